// Threads end to end in headless Chromium against the gateway and worker
// built from this checkout: Alice types in the demo page's thread pane, and
// Bob's tab, open on the same room and thread, shows "Alice is typing in a
// thread…" on its channel line and "Alice is typing…" in its thread pane;
// a reply in the thread ends both; Bob's thread pane on another thread
// shows nothing of it; the same on a gateway with auth=jwt (the demo page
// with ?token=, no chat service). With the dev stack (its chat service and assistant),
// a message mentioning @assistant in the thread makes both lines show the
// assistant thinking, then its reply lands in the thread.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { createHmac, randomBytes } from "node:crypto";
import { startStack, startDevStack, repoRoot } from "./stack.js";
import { launchChromium } from "./browser.js";

const artifacts = join(repoRoot, "clients", "js", "test-artifacts");

let browser;
before(
  async () => {
    mkdirSync(artifacts, { recursive: true });
    browser = await launchChromium();
  },
  { timeout: 60_000 },
);
after(async () => {
  if (browser) await browser.close();
});

const roomId = () => `e2e-threads ${randomBytes(3).toString("hex")}`;

// Opens the demo page as a user, joined to room with the thread pane on
// thread, and records both typing lines (their data-text) with page times.
async function openUser(url, user, name, room, thread, token = "") {
  const context = await browser.newContext({ viewport: { width: 1000, height: 640 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (err) => errors.push(err.message));
  const q = new URLSearchParams({ name, room, user, lang: "en", autojoin: "1", thread });
  if (token) q.set("token", token);
  const console_ = [];
  page.on("console", (m) => console_.push(`${m.type()}: ${m.text()}`));
  await page.goto(`${url}/?${q}`);
  try {
    await page.waitForFunction(() => window.ellipsisDemo && window.ellipsisDemo.room.state === "joined" && window.ellipsisDemo.thread, null, { timeout: 10_000 });
  } catch (err) {
    throw new Error(`${name}'s demo page did not join with its thread pane: ${err.message}; page errors: ${JSON.stringify(errors)}; console: ${JSON.stringify(console_)}`);
  }
  await page.evaluate(() => {
    window.lines = { typing: [], "thread-typing": [] };
    for (const id of Object.keys(window.lines)) {
      const el = document.getElementById(id);
      window.lines[id].push(el.dataset.text || "");
      new MutationObserver(() => window.lines[id].push(el.dataset.text)).observe(el, { attributes: true, attributeFilter: ["data-text"] });
    }
  });
  return { context, page, errors, close: () => context.close() };
}

const line = (page, id) => page.evaluate((i) => document.getElementById(i).dataset.text || "", id);
const lineBecomes = (page, id, text, timeout = 5000) =>
  page.waitForFunction(([i, t]) => document.getElementById(i).dataset.text === t, [id, text], { timeout, polling: 20 });
const history = (page, id) => page.evaluate((i) => window.lines[i], id);

test("Alice types in a thread: Bob's channel line says she types in a thread, his thread pane shows her; a reply there ends both", { timeout: 240_000 }, async (t) => {
  const stack = await startStack({ root: repoRoot, artifacts, tag: "threads" });
  t.after(() => stack.stop());
  const config = await (await fetch(`${stack.url}/v1/config`)).json();
  assert.ok(config.max_threads_per_user > 0, "this gateway takes threads (GET /v1/config says max_threads_per_user)");
  const room = roomId();
  const alice = await openUser(stack.url, "alice", "Alice", room, "t-e2e");
  const bob = await openUser(stack.url, "bob", "Bob", room, "t-e2e");
  const carol = await openUser(stack.url, "carol", "Carol", room, "t-other");
  t.after(() => Promise.all([alice.close(), bob.close(), carol.close()]));

  await alice.page.focus("#thread-text");
  await alice.page.keyboard.type("hello from the thread", { delay: 40 });
  await lineBecomes(bob.page, "typing", "Alice is typing in a thread…");
  await lineBecomes(bob.page, "thread-typing", "Alice is typing…");
  await lineBecomes(carol.page, "typing", "Alice is typing in a thread…");
  assert.equal(await line(carol.page, "thread-typing"), "", "Carol's thread pane is on another thread");
  await bob.page.screenshot({ path: join(artifacts, "e2e-bob-sees-alice-typing-in-a-thread.png") });
  // The channel line never read as if Alice typed in the channel (the old behaviour).
  assert.ok(!(await history(bob.page, "typing")).includes("Alice is typing…"), "no room-level line for thread typing");

  // Bob types in the channel meanwhile (a key every 500 ms, so no idle stop
  // however slow the machine): Alice's channel line has him, her thread pane does not.
  await bob.page.evaluate(() => {
    const el = document.getElementById("text");
    window.keys = setInterval(() => {
      el.value += ".";
      el.dispatchEvent(new Event("input"));
    }, 500);
  });
  await lineBecomes(alice.page, "typing", "Bob is typing…");
  await lineBecomes(carol.page, "typing", "Bob is typing and Alice is typing in a thread…");
  assert.equal(await line(alice.page, "thread-typing"), "");

  // Alice replies in the thread: typing_stop in the thread only, both of Bob's lines drop her.
  await alice.page.press("#thread-text", "Enter");
  await lineBecomes(bob.page, "thread-typing", "");
  await lineBecomes(carol.page, "typing", "Bob is typing…");
  await alice.page.waitForFunction(() => [...document.querySelectorAll("#thread-messages li")].some((li) => /hello from the thread/.test(li.textContent)), null, { timeout: 5000 });
  assert.match(await bob.page.evaluate(() => document.getElementById("typing").dataset.text), /^(|Alice is typing in a thread…)$/, "anti-flicker at most");
  await lineBecomes(bob.page, "typing", "");
  await bob.page.evaluate(() => clearInterval(window.keys));
  for (const u of [alice, bob, carol]) assert.deepEqual(u.errors, []);
});

function jwt(claims, key) {
  const b64 = (v) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}`;
  return `${body}.${createHmac("sha256", key).update(body).digest("base64url")}`;
}

test("auth=jwt: the demo page's thread pane works with a token (messages stay in the tab)", { timeout: 240_000 }, async (t) => {
  const secret = randomBytes(16).toString("hex");
  const stack = await startStack({ root: repoRoot, artifacts, tag: "threads-jwt", gatewayEnv: { ELLIPSIS_AUTH: "jwt", ELLIPSIS_JWT_SECRET: secret } });
  t.after(() => stack.stop());
  const token = (sub, name) => jwt({ sub, name, exp: Math.floor(Date.now() / 1000) + 3600 }, secret);
  const room = roomId();
  const alice = await openUser(stack.url, "", "Alice", room, "t-jwt", token("alice", "Alice"));
  const bob = await openUser(stack.url, "", "Bob", room, "t-jwt", token("bob", "Bob"));
  t.after(() => Promise.all([alice.close(), bob.close()]));
  await alice.page.focus("#thread-text");
  await alice.page.keyboard.type("signed in", { delay: 40 });
  await lineBecomes(bob.page, "typing", "Alice is typing in a thread…");
  await lineBecomes(bob.page, "thread-typing", "Alice is typing…");
  await alice.page.press("#thread-text", "Enter");
  await lineBecomes(bob.page, "thread-typing", "");
  await alice.page.waitForFunction(() => [...document.querySelectorAll("#thread-messages li")].some((li) => /signed in/.test(li.textContent)), null, { timeout: 5000 });
  for (const u of [alice, bob]) assert.deepEqual(u.errors, []);
});

test("dev stack: @assistant in a thread: both lines show the assistant thinking, then its reply lands in the thread", { timeout: 240_000 }, async (t) => {
  const stack = await startDevStack({ root: repoRoot, artifacts });
  t.after(() => stack.stop());
  const room = roomId();
  const alice = await openUser(stack.url, "alice", "Alice", room, "t-agent");
  const bob = await openUser(stack.url, "bob", "Bob", room, "t-agent");
  t.after(() => Promise.all([alice.close(), bob.close()]));
  for (const u of [alice, bob]) await u.page.waitForFunction(() => window.ellipsisDemo.chat === true, null, { timeout: 10_000 });

  await alice.page.focus("#thread-text");
  await alice.page.keyboard.type("@assistant what is a thread?", { delay: 20 });
  await alice.page.press("#thread-text", "Enter");
  await lineBecomes(bob.page, "thread-typing", "Assistant is thinking…", 10_000);
  await lineBecomes(bob.page, "typing", "Assistant is thinking in a thread…", 5000);
  await bob.page.screenshot({ path: join(artifacts, "e2e-bob-sees-the-assistant-thinking.png") });
  // The reply (the dev stack's assistant thinks 8 s) comes in the thread, and the thinking ends with it.
  await bob.page.waitForFunction(() => [...document.querySelectorAll("#thread-messages li")].some((li) => /^Assistant/.test(li.textContent)), null, { timeout: 30_000 });
  await lineBecomes(bob.page, "thread-typing", "", 5000);
  await lineBecomes(bob.page, "typing", "", 5000);
  const channel = await bob.page.evaluate(() => [...document.querySelectorAll("#messages li:not(.note)")].map((li) => li.textContent));
  assert.deepEqual(channel, [], "nothing of the thread in the channel");
  for (const u of [alice, bob]) assert.deepEqual(u.errors, []);
});
