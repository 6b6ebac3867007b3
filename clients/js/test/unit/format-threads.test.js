// The line with activities and threads: each activity's wording in both
// built-in languages, mixed activities in one line, a channel view ("Alice
// is typing in a thread…") and a thread view, operators' activities, and
// tables of other languages (with and without the new fields).
import { test } from "node:test";
import assert from "node:assert/strict";
import { formatTypists, validateMessages, MESSAGES } from "../../src/ellipsis.js";

const alice = { user: "alice", name: "Alice" };
const bob = { user: "bob", name: "Bob" };
const carol = { user: "carol", name: "Carol" };
const dan = { user: "dan", name: "Dan" };
const bot = { user: "assistant", name: "Assistant", activity: "thinking" };
const as = (t, activity) => ({ ...t, activity });
const thread = (id, typists, total = typists.length) => ({ thread: id, typists, total });

test("activities in English and Vietnamese", () => {
  const cases = [
    [[bot], "Assistant is thinking…", "Assistant đang suy nghĩ..."],
    [[as(bob, "recording_audio")], "Bob is recording a voice message…", "Bob đang ghi âm tin nhắn thoại..."],
    [[as(bob, "recording_video")], "Bob is recording a video…", "Bob đang quay video..."],
    [[as(carol, "uploading")], "Carol is uploading…", "Carol đang tải lên..."],
    [[as(alice, "typing")], "Alice is typing…", "Alice đang gõ..."],
    [[as(alice, "recording_audio"), as(bob, "recording_audio")], "Alice and Bob are recording voice messages…", "Alice và Bob đang ghi âm tin nhắn thoại..."],
    [[as(alice, "uploading"), as(bob, "uploading"), as(carol, "uploading"), as(dan, "uploading")], "Alice, Bob and 2 others are uploading…", "4 người đang tải lên..."],
  ];
  for (const [users, en, vi] of cases) {
    assert.equal(formatTypists(users), en);
    assert.equal(formatTypists(users, { locale: "vi" }), vi);
  }
  assert.equal(formatTypists([as(alice, "thinking"), as(bob, "thinking")], { max: 1 }), "2 people are thinking…", "a count line of an activity");
  assert.equal(formatTypists([as(alice, "thinking"), as(bob, "thinking")], { max: 1, locale: "vi" }), "2 người đang suy nghĩ...");
});

test("an operator's activity: busy, unless the app's table has a line for it", () => {
  const reviewing = as(alice, "reviewing");
  assert.equal(formatTypists([reviewing]), "Alice is busy…");
  assert.equal(formatTypists([reviewing, as(bob, "reviewing")]), "Alice and Bob are busy…");
  assert.equal(formatTypists([reviewing], { locale: "vi" }), "Alice đang bận...");
  const en = {
    ...MESSAGES.en,
    activities: { ...MESSAGES.en.activities, reviewing: { one: "{names} is reviewing the draft…", other: "{names} are reviewing the draft…" } },
  };
  assert.equal(formatTypists([reviewing], { messages: en }), "Alice is reviewing the draft…");
  assert.equal(formatTypists([reviewing, as(bob, "reviewing")], { messages: en, max: 1 }), "2 people are reviewing the draft…");
  assert.equal(formatTypists([bot], { messages: en }), "Assistant is thinking…", "the built-in lines stay");
});

test("mixed activities in one line: one clause each, names while max lasts, then counts", () => {
  assert.equal(formatTypists([alice, bot]), "Alice is typing and Assistant is thinking…");
  assert.equal(formatTypists([alice, bob, bot]), "Alice and Bob are typing and Assistant is thinking…");
  assert.equal(formatTypists([alice, as(bob, "recording_audio"), bot]), "Alice is typing, Bob is recording a voice message and Assistant is thinking…");
  assert.equal(formatTypists([alice, bob, carol, dan, bot]), "4 people are typing and Assistant is thinking…");
  assert.equal(formatTypists([alice, bob, carol, dan, bot, as({ user: "b2", name: "Helper" }, "thinking")], { max: 2 }), "4 people are typing and Assistant and Helper are thinking…");
  assert.equal(formatTypists([alice, bot], { locale: "vi" }), "Alice đang gõ và Assistant đang suy nghĩ...");
  assert.equal(formatTypists([alice, bot], { locale: "en-US" }), "Alice is typing and Assistant is thinking…");
  // A cut snapshot: the activities of those not listed are unknown, the count is typing's.
  assert.equal(formatTypists([alice, bot], { total: 140 }), "140 people are typing…");
});

test("channel view: the room's threads add one clause; a thread view shows its own typists only", () => {
  const threads = [thread("t-9", [alice])];
  assert.equal(formatTypists([], { threads }), "Alice is typing in a thread…");
  assert.equal(formatTypists([], { threads, locale: "vi" }), "Alice đang gõ trong một chuỗi tin nhắn...");
  assert.equal(formatTypists([bob], { threads }), "Bob is typing and Alice is typing in a thread…");
  assert.equal(formatTypists([], { threads: [thread("t-9", [alice, bob])] }), "Alice and Bob are typing in a thread…");
  assert.equal(formatTypists([], { threads: [thread("t-9", [alice]), thread("t-1", [bob])] }), "2 people are typing in threads…");
  assert.equal(formatTypists([], { threads: [thread("t-9", [alice]), thread("t-1", [bob])], locale: "vi" }), "2 người đang gõ trong các chuỗi tin nhắn...");
  assert.equal(formatTypists([], { threads: [thread("t-9", [alice]), thread("t-1", [alice])] }), "Alice is typing in a thread…", "one person in two threads counts once");
  assert.equal(formatTypists([alice], { threads }), "Alice is typing…", "a user in the room itself is not told again");
  assert.equal(formatTypists([], { threads: [thread("t-1", [bot])] }), "Assistant is thinking in a thread…");
  assert.equal(formatTypists([], { threads: [thread("t-1", [bot]), thread("t-2", [as(bob, "thinking")])] }), "2 people are thinking in threads…");
  assert.equal(formatTypists([], { threads: [thread("t-1", [alice], 30)] }), "30 people are typing in a thread…", "a cut thread snapshot");
  assert.equal(formatTypists([], { threads: [thread("t-1", [])] }), "");
  assert.equal(formatTypists([], { threads: [] }), "");
  // The thread view: the thread's typists, no `threads`.
  assert.equal(formatTypists(threads[0].typists, { total: threads[0].total }), "Alice is typing…");
});

// The README's German table: typing, others and count only (a table made before activities and threads).
const de = {
  typing: { one: "{names} tippt…", other: "{names} tippen…" },
  others: { one: "{count} weitere Person", other: "{count} weitere Personen" },
  count: { one: "{count} Person tippt…", other: "{count} Personen tippen…" },
};

test("a table without the new fields: activities read as typing, no thread clause, nothing breaks", () => {
  const o = { locale: "de", messages: de };
  assert.equal(formatTypists([bot], o), "Assistant tippt…");
  assert.equal(formatTypists([alice, bot], o), "Alice tippt und Assistant tippt…");
  assert.equal(formatTypists([alice], { ...o, threads: [thread("t", [bob])] }), "Alice tippt…");
  assert.equal(formatTypists([as(alice, "thinking"), as(bob, "thinking")], { ...o, max: 1 }), "2 Personen tippen…", "no people: the typing count");
});

test("a German table with activities, busy, people and threads", () => {
  const full = {
    ...de,
    people: { one: "{count} Person", other: "{count} Personen" },
    activities: { thinking: { one: "{names} denkt nach…", other: "{names} denken nach…" } },
    busy: { one: "{names} ist beschäftigt…", other: "{names} sind beschäftigt…" },
    thread: { other: "{line} in einem Thread…" },
    threads: { other: "{line} in Threads…" },
  };
  validateMessages(full);
  const o = { locale: "de", messages: full };
  assert.equal(formatTypists([bot], o), "Assistant denkt nach…");
  assert.equal(formatTypists([alice, bot], o), "Alice tippt und Assistant denkt nach…");
  assert.equal(formatTypists([as(alice, "uploading")], o), "Alice ist beschäftigt…");
  assert.equal(formatTypists([as(alice, "thinking"), as(bob, "thinking")], { ...o, max: 1 }), "2 Personen denken nach…");
  assert.equal(formatTypists([], { ...o, threads: [thread("t", [alice])] }), "Alice tippt in einem Thread…");
  assert.equal(formatTypists([], { ...o, threads: [thread("t", [alice]), thread("u", [bob])] }), "2 Personen tippen in Threads…");
});

test("the new fields are checked like the others, naming the field", () => {
  const bad = (messages, re) => assert.throws(() => formatTypists([], { messages }), { name: "TypeError", message: re });
  bad({ ...de, activities: [] }, /messages\.activities must be an object/);
  bad({ ...de, activities: { Thinking: de.typing } }, /messages\.activities\.Thinking is not an activity name/);
  bad({ ...de, activities: { thinking: { one: "{names} denkt" } } }, /messages\.activities\.thinking\.other is required/);
  bad({ ...de, activities: { thinking: { other: "{line}" } } }, /messages\.activities\.thinking\.other has the unknown placeholder \{line\}/);
  bad({ ...de, thread: { other: "{names} im Thread" } }, /messages\.thread\.other has the unknown placeholder \{names\}; it may use \{line\} and \{count\}/);
  bad({ ...de, people: { other: "{names}" } }, /messages\.people\.other has the unknown placeholder \{names\}/);
  bad({ ...de, threadz: de.typing }, /messages\.threadz is not a messages field \(typing, others, count, people, busy, thread, threads, activities\)/);
  assert.ok(Object.isFrozen(MESSAGES.en.activities.thinking), "nested built-in lines are frozen too");
  for (const table of [MESSAGES.en, MESSAGES.vi]) validateMessages(table);
});
