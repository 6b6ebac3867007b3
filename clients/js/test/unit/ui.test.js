import { test } from "node:test";
import assert from "node:assert/strict";
import { AntiFlicker, TypingIndicator, TYPING_CSS } from "../../src/ellipsis.js";
import { fakeTimers } from "./helpers.js";

const alice = { user: "alice", name: "Alice" };
const bob = { user: "bob", name: "Bob" };

function setup(t) {
  const timers = fakeTimers(t);
  const seen = [];
  const af = new AntiFlicker({ onChange: (shown) => seen.push(shown.map((x) => x.user).join(",")) });
  return { timers, af, seen };
}

test("anti-flicker: a name stays shown at least 500 ms", (t) => {
  const { timers, af, seen } = setup(t);
  af.update([alice]);
  timers.tick(100);
  af.update([]); // stopped after 100 ms
  assert.deepEqual(seen, ["alice"], "still shown");
  timers.tick(399);
  assert.deepEqual(af.shown, [alice]);
  timers.tick(1);
  assert.deepEqual(seen, ["alice", ""], "hidden at 500 ms");
});

test("anti-flicker: a name shown long enough goes at once", (t) => {
  const { timers, af, seen } = setup(t);
  af.update([alice, bob]);
  timers.tick(800);
  af.update([bob]);
  assert.deepEqual(seen, ["alice,bob", "bob"]);
});

test("anti-flicker: back before the hide cancels it", (t) => {
  const { timers, af, seen } = setup(t);
  af.update([alice]);
  timers.tick(200);
  af.update([]);
  timers.tick(200);
  af.update([alice]);
  timers.tick(1000);
  assert.deepEqual(seen, ["alice"], "never hidden");
  af.update([{ user: "alice", name: "Alice B." }]);
  assert.deepEqual(seen, ["alice", "alice"], "a new name re-renders");
  af.update([]);
  assert.deepEqual(seen.at(-1), "");
});

test("anti-flicker: dispose cancels pending hides", (t) => {
  const { timers, af, seen } = setup(t);
  af.update([alice]);
  af.update([]);
  af.dispose();
  timers.tick(1000);
  assert.deepEqual(seen, ["alice"]);
});

// A DOM just big enough for TypingIndicator.
class El {
  constructor(doc, tag) {
    this.ownerDocument = doc;
    this.tagName = tag;
    this.children = [];
    this.attributes = {};
    this.dataset = {};
    this.className = "";
    this.textContent = "";
    const classes = new Set();
    this.classList = { add: (c) => classes.add(c), contains: (c) => classes.has(c) };
  }
  setAttribute(k, v) {
    this.attributes[k] = v;
  }
  append(...nodes) {
    this.children.push(...nodes);
  }
  replaceChildren(...nodes) {
    this.children = nodes.filter((n) => n !== "");
  }
  get text() {
    return this.children.map((c) => (typeof c === "string" ? c : c.children.length ? c.text : c.textContent)).join("");
  }
}
function fakeDocument() {
  const doc = { createElement: (tag) => new El(doc, tag) };
  doc.head = new El(doc, "head");
  return doc;
}

test("TypingIndicator: aria-live polite, text + animated dots, exact line in data-text", (t) => {
  const timers = fakeTimers(t);
  const doc = fakeDocument();
  const el = new El(doc, "div");
  const line = new TypingIndicator(el);
  assert.equal(el.attributes["aria-live"], "polite");
  assert.equal(el.attributes.role, "status");
  assert.ok(el.classList.contains("ellipsis-typing"));
  assert.equal(doc.head.children.length, 1, "styles injected");
  assert.equal(doc.head.children[0].textContent, TYPING_CSS);
  new TypingIndicator(new El(doc, "div"));
  assert.equal(doc.head.children.length, 1, "once per document");
  assert.match(TYPING_CSS, /@keyframes/);
  assert.match(TYPING_CSS, /prefers-reduced-motion/);

  line.update([alice]);
  assert.equal(el.dataset.text, "Alice is typing…");
  assert.equal(line.text, "Alice is typing…");
  assert.equal(el.text, "Alice is typing...");
  const dots = el.children[1];
  assert.equal(dots.className, "ellipsis-dots");
  assert.equal(dots.attributes["aria-hidden"], "true");
  assert.equal(dots.children.length, 3);

  line.update([alice, bob]);
  assert.equal(el.dataset.text, "Alice and Bob are typing…");
  line.locale = "vi";
  line.render();
  assert.equal(el.dataset.text, "Alice và Bob đang gõ...");

  timers.tick(100);
  line.update([]);
  assert.equal(el.dataset.text, "Alice và Bob đang gõ...", "anti-flicker keeps them");
  timers.tick(400);
  assert.equal(el.dataset.text, "");
  assert.equal(el.children.length, 0);
  line.destroy();
});

test("TypingIndicator: a total above the typists shows the count", (t) => {
  fakeTimers(t);
  const doc = fakeDocument();
  const el = new El(doc, "div");
  const line = new TypingIndicator(el);
  line.update([alice, bob], 2);
  assert.equal(line.text, "Alice and Bob are typing…");
  line.update([alice, bob], 140); // the same names, more people: re-rendered
  assert.equal(line.text, "140 people are typing…");
  assert.equal(el.text, "140 people are typing...");
  line.update([alice], 1);
  assert.equal(line.text, "Alice and Bob are typing…", "bob still shown 500 ms (anti-flicker)");
  line.update([alice]);
  line.destroy();
});

test("TypingIndicator: a messages table (German), anti-flicker intact; bad locale or table throws naming the field", (t) => {
  const timers = fakeTimers(t);
  const de = {
    typing: { one: "{names} tippt…", other: "{names} tippen…" },
    count: { one: "{count} Person tippt…", other: "{count} Personen tippen…" },
  };
  const el = new El(fakeDocument(), "div");
  const line = new TypingIndicator(el, { locale: "de-DE", messages: de });
  line.update([alice, bob]);
  assert.equal(line.text, "Alice und Bob tippen…");
  assert.equal(el.text, "Alice und Bob tippen...");
  timers.tick(100);
  line.update([alice]);
  assert.equal(line.text, "Alice und Bob tippen…", "bob still shown (anti-flicker)");
  timers.tick(400);
  assert.equal(line.text, "Alice tippt…");
  line.update([alice], 30);
  assert.equal(line.text, "30 Personen tippen…");
  assert.throws(() => (line.locale = "no such tag!"), { name: "RangeError", message: /locale "no such tag!"/ });
  assert.throws(() => (line.messages = { typing: {}, count: de.count }), { name: "TypeError", message: /messages\.typing\.other is required/ });
  assert.equal(line.locale, "de-DE", "unchanged after a rejected value");
  line.messages = undefined;
  line.locale = "vi";
  line.render();
  assert.equal(line.text, "30 người đang gõ...");
  assert.throws(() => new TypingIndicator(new El(fakeDocument(), "div"), { messages: { count: de.count } }), /messages\.typing/);
  line.destroy();
});

test("anti-flicker per (thread, user) and activity: the same user in the room and a thread is two entries; a new activity re-renders", (t) => {
  const { timers, af, seen } = setup(t);
  af.update([alice, { ...alice, thread: "t-9" }]);
  assert.equal(af.shown.length, 2);
  timers.tick(600);
  af.update([{ ...alice, thread: "t-9" }]);
  assert.deepEqual(af.shown, [{ ...alice, thread: "t-9" }], "the room's entry went, the thread's stays");
  af.update([{ ...alice, thread: "t-9", activity: "uploading" }]);
  assert.equal(seen.length, 3, "an activity change is a change");
  assert.equal(af.shown[0].activity, "uploading");
});

test("TypingIndicator: a channel view tells the threads; a thread view shows its own; activities", (t) => {
  const timers = fakeTimers(t);
  const channelEl = new El(fakeDocument(), "div");
  const threadEl = new El(fakeDocument(), "div");
  const channel = new TypingIndicator(channelEl);
  const inThread = new TypingIndicator(threadEl);
  const t9 = { thread: "t-9", typists: [alice], total: 1 };
  channel.update([], 0, [t9]);
  inThread.update(t9.typists, t9.total);
  assert.equal(channelEl.dataset.text, "Alice is typing in a thread…");
  assert.equal(channelEl.text, "Alice is typing in a thread...");
  assert.equal(inThread.text, "Alice is typing…");
  channel.update([bob], 1, [t9]);
  assert.equal(channel.text, "Bob is typing and Alice is typing in a thread…");
  channel.update([bob], 1, [t9, { thread: "t-1", typists: [{ user: "carol", name: "Carol" }], total: 1 }]);
  assert.equal(channel.text, "Bob is typing and 2 people are typing in threads…");
  timers.tick(600);
  channel.update([bob], 1, [t9]);
  assert.equal(channel.text, "Bob is typing and Alice is typing in a thread…");
  // A thread's total above its typists (a cut snapshot) re-renders with the names unchanged.
  channel.update([bob], 1, [{ ...t9, total: 12 }]);
  assert.equal(channel.text, "Bob is typing and 12 people are typing in a thread…");
  // The thread empties: anti-flicker keeps Alice 500 ms after she was shown.
  channel.update([bob], 1, []);
  assert.equal(channel.text, "Bob is typing…", "shown over 500 ms: gone at once");
  channel.update([bob], 1, [{ thread: "t-2", typists: [{ user: "bot", name: "Assistant", activity: "thinking" }], total: 1 }]);
  assert.equal(channel.text, "Bob is typing and Assistant is thinking in a thread…");
  timers.tick(100);
  channel.update([bob], 1, []);
  assert.equal(channel.text, "Bob is typing and Assistant is thinking in a thread…", "anti-flicker in threads too");
  timers.tick(400);
  assert.equal(channel.text, "Bob is typing…");
  inThread.update([{ ...alice, activity: "recording_audio" }], 1);
  assert.equal(inThread.text, "Alice is recording a voice message…");
  channel.locale = "vi";
  channel.update([], 0, [t9]);
  assert.equal(channel.text, "Alice đang gõ trong một chuỗi tin nhắn...");
  channel.destroy();
  inThread.destroy();
});
