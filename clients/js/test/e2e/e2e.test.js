// End-to-end in real headless Chromium (Debian's chromium, driven by
// playwright-core) against a real stack (gateway + presence-worker as
// separate processes, Redis, NATS): Alice and Bob open the demo page in two
// browser contexts and Bob watches Alice type.
//
// Timings are measured in the pages (Date.now() on both sides; one machine,
// one clock): Alice's input events, and a MutationObserver on Bob's typing
// line (its data-text attribute holds the exact line).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { startStack, startDevStack, repoRoot } from "./stack.js";
import { launchChromium } from "./browser.js";

const artifacts = join(repoRoot, "clients", "js", "test-artifacts");

let stack;
let browser;
let timing; // GET /v1/config

before(
  async () => {
    mkdirSync(artifacts, { recursive: true });
    // ELLIPSIS_E2E_URL: test a stack that already runs (make run, a
    // Kubernetes port-forward; auth=none) instead of starting one.
    const external = process.env.ELLIPSIS_E2E_URL;
    [stack, browser] = await Promise.all([
      external ? { url: external.replace(/\/+$/, ""), gateway: null, stop: async () => {} } : startStack({ root: repoRoot, artifacts }),
      launchChromium(),
    ]);
    timing = await (await fetch(`${stack.url}/v1/config`)).json();
  },
  { timeout: 240_000 },
);

after(async () => {
  if (browser) await browser.close();
  if (stack) await stack.stop();
});

const room = () => `e2e ${randomBytes(3).toString("hex")} ☕`; // a space and non-ASCII on purpose

/**
 * Opens the demo page as a user in its own browser context, joined to room,
 * and starts recording its typing line and connection states.
 */
async function openUser(user, name, roomId, url = stack.url, beforeGoto = async (_page) => {}) {
  const context = await browser.newContext({ viewport: { width: 720, height: 540 } });
  const page = await context.newPage();
  await beforeGoto(page);
  const errors = [];
  page.on("pageerror", (err) => errors.push(err.message));
  const q = new URLSearchParams({ name, room: roomId, user, lang: "en", autojoin: "1" });
  await page.goto(`${url}/?${q}`);
  await page.waitForFunction(() => window.ellipsisDemo && window.ellipsisDemo.room.state === "joined", null, { timeout: 10_000 });
  await page.evaluate(() => {
    const el = document.getElementById("typing");
    window.typingLog = [{ t: Date.now(), text: el.dataset.text || "" }];
    new MutationObserver(() => window.typingLog.push({ t: Date.now(), text: el.dataset.text })).observe(el, {
      attributes: true,
      attributeFilter: ["data-text"],
    });
    window.stateLog = [];
    window.ellipsisDemo.client.on("state", (ev) => window.stateLog.push(ev.state));
    window.inputTimes = [];
    document.getElementById("text").addEventListener("input", () => window.inputTimes.push(Date.now()));
  });
  await page.focus("#text");
  return { context, page, errors, close: () => context.close() };
}

/** Waits until the typing line reads text; returns when it first did (page time, ms). */
async function lineBecomes(page, text, timeoutMs) {
  await page.waitForFunction((t) => document.getElementById("typing").dataset.text === t, text, { timeout: timeoutMs, polling: 20 });
  const log = await page.evaluate(() => window.typingLog);
  return log.findLast((e) => e.text === text).t;
}

const typingLog = (page) => page.evaluate(() => window.typingLog);
const inputTimes = (page) => page.evaluate(() => window.inputTimes);

// Types text one key at a time, delayMs apart.
async function typeSlowly(page, text, delayMs) {
  await page.keyboard.type(text, { delay: delayMs });
}

async function screenshot(user, file) {
  const path = join(artifacts, file);
  await user.page.screenshot({ path });
  return path;
}

/**
 * Screenshots the users' tabs and lays them side by side, each under a
 * caption, in one PNG (the README's picture of the product working,
 * docs/img/two-tabs.png; `make readme-images` copies it there). Every tab
 * has the same viewport.
 */
async function sideBySide(users, file) {
  const shots = await Promise.all(users.map(async (u) => ({ caption: u.caption, png: (await u.page.screenshot()).toString("base64") })));
  const { width, height } = users[0].page.viewportSize();
  // 12 px of padding each side, a 16 px gap, a 1 px border around each shot.
  const context = await browser.newContext({ viewport: { width: 24 + users.length * (width + 2) + (users.length - 1) * 16, height: height + 60 } });
  try {
    const page = await context.newPage();
    const cells = shots
      .map((s) => `<figure><figcaption>${s.caption}</figcaption><img src="data:image/png;base64,${s.png}"></figure>`)
      .join("");
    await page.setContent(
      `<!doctype html><style>body{margin:0;padding:12px;display:flex;gap:16px;background:#e8eaed;font:600 15px system-ui,sans-serif}` +
        `figure{margin:0}figcaption{padding:4px 2px 8px;color:#3c4043}img{display:block;border:1px solid #9aa0a6;border-radius:6px}</style>${cells}`,
    );
    const path = join(artifacts, file);
    await page.screenshot({ path, fullPage: true });
    return path;
  } finally {
    await context.close();
  }
}

// The README's picture: the demo page wide enough for its thread pane
// beside the channel (the page's two columns start above 760 px); Alice
// types in the thread, and Bob's tab shows it on both lines.
test("README picture: Alice types in a thread in one tab, Bob's tab shows it (two-tabs.png)", { timeout: 90_000 }, async (t) => {
  const r = room();
  const [bob, alice] = await Promise.all([openUser("bob", "Bob", r), openUser("alice", "Alice", r)]);
  try {
    for (const u of [alice, bob]) {
      await u.page.setViewportSize({ width: 960, height: 600 });
      await u.page.waitForFunction(() => window.ellipsisDemo.thread, null, { timeout: 10_000 });
    }
    await alice.page.focus("#thread-text");
    // Alice keeps typing while the pictures are taken, so her indicator
    // stays up however slow the screenshots are on a loaded machine.
    const typing = typeSlowly(alice.page, "Hello Bob, how was the trip?", 250);
    await lineBecomes(bob.page, "Alice is typing in a thread…", 5000);
    await bob.page.waitForFunction(() => document.getElementById("thread-typing").dataset.text === "Alice is typing…", null, { timeout: 5000, polling: 20 });
    await new Promise((res) => setTimeout(res, 1500));
    const both = await sideBySide(
      [
        { caption: "Alice's tab: she types in a thread", page: alice.page },
        { caption: "Bob's tab: he sees it, in the channel and in the thread", page: bob.page },
      ],
      "two-tabs.png",
    );
    t.diagnostic(`two tabs side by side: ${both}`);
    assert.equal(await bob.page.locator("#typing").getAttribute("data-text"), "Alice is typing in a thread…", "the indicator went away while the picture was taken");
    assert.equal(await bob.page.locator("#thread-typing").getAttribute("data-text"), "Alice is typing…", "the thread's indicator went away while the picture was taken");
    await typing;
    assert.deepEqual([...alice.errors, ...bob.errors], []);
  } finally {
    await alice.close();
    await bob.close();
  }
});

test("Alice types → Bob's page shows \"Alice is typing…\" within 1 s; it disappears after the idle stop", { timeout: 30_000 }, async (t) => {
  const r = room();
  const [bob, alice] = await Promise.all([openUser("bob", "Bob", r), openUser("alice", "Alice", r)]);
  try {
    await alice.page.keyboard.type("H");
    const [first] = await inputTimes(alice.page);
    const shown = await lineBecomes(bob.page, "Alice is typing…", 5000);
    t.diagnostic(`keystroke → Bob sees "Alice is typing…": ${shown - first} ms`);
    assert.ok(shown - first <= 1000, `shown ${shown - first} ms after the keystroke`);
    // Bob's line is an aria-live region with the animated dots.
    const line = bob.page.locator("#typing");
    assert.equal(await line.getAttribute("aria-live"), "polite");
    assert.equal(await line.locator(".ellipsis-dots > span").count(), 3);
    assert.match(await line.innerText(), /^Alice is typing\.\.\.$/);
    const shot = await screenshot(bob, "e2e-bob-sees-alice-typing.png");
    t.diagnostic(`screenshot: ${shot}`);

    // Alice never sees herself.
    assert.equal(await alice.page.locator("#typing").getAttribute("data-text"), "");

    await typeSlowly(alice.page, "ello", 150);
    const last = (await inputTimes(alice.page)).at(-1);
    const cleared = await lineBecomes(bob.page, "", timing.idle_stop_ms + 3000);
    const after = cleared - last;
    t.diagnostic(`last keystroke → Bob's line clears: ${after} ms (idle stop ${timing.idle_stop_ms} ms, ttl ${timing.ttl_ms} ms)`);
    assert.ok(after >= timing.idle_stop_ms - 50, `cleared ${after} ms after the last key: before the idle stop`);
    assert.ok(after <= timing.idle_stop_ms + 1000, `cleared ${after} ms after the last key: the idle stop did not get through`);
    const log = await typingLog(bob.page);
    assert.deepEqual(log.map((e) => e.text).filter((x, i, a) => x !== a[i - 1]), ["", "Alice is typing…", ""], "no flicker");
    assert.deepEqual([...alice.errors, ...bob.errors], []);
  } finally {
    await alice.close();
    await bob.close();
  }
});

test("typing longer than the ttl stays shown without a gap; sending the message clears it", { timeout: 40_000 }, async (t) => {
  const r = room();
  const [bob, alice] = await Promise.all([openUser("bob", "Bob", r), openUser("alice", "Alice", r)]);
  try {
    await alice.page.keyboard.type("a");
    await lineBecomes(bob.page, "Alice is typing…", 5000);
    // Keep typing for ttl + 2 s, a key every 400 ms: refreshes keep it alive.
    const keys = Math.ceil((timing.ttl_ms + 2000) / 400);
    await typeSlowly(alice.page, "b".repeat(keys), 400);
    let log = await typingLog(bob.page);
    assert.equal(log.at(-1).text, "Alice is typing…");
    assert.equal(log.filter((e) => e.text === "").length, 1, "never cleared while Alice typed");
    const sentAt = await alice.page.evaluate(() => {
      const t = Date.now();
      document.getElementById("compose").requestSubmit();
      return t;
    });
    const cleared = await lineBecomes(bob.page, "", 3000);
    t.diagnostic(`message sent → Bob's line clears: ${cleared - sentAt} ms`);
    assert.ok(cleared - sentAt <= 1000, `cleared ${cleared - sentAt} ms after the send`);
    assert.match(await alice.page.locator("#messages li:not(.note)").last().innerText(), /Alice\s*abb+/);
    const stats = await alice.page.evaluate(() => window.ellipsisDemo.room.stats);
    t.diagnostic(`Alice: ${stats.keystrokes} keystrokes → ${stats.starts + stats.refreshes + stats.stops} typing frames (${JSON.stringify(stats)})`);
    assert.equal(stats.starts, 1);
    assert.ok(stats.refreshes >= 1);
  } finally {
    await alice.close();
    await bob.close();
  }
});

test("Alice closes her tab mid-typing → Bob's line clears within ttl + 1 s", { timeout: 30_000 }, async (t) => {
  const r = room();
  const [bob, alice] = await Promise.all([openUser("bob", "Bob", r), openUser("alice", "Alice", r)]);
  try {
    await typeSlowly(alice.page, "Hi Bo", 100);
    await lineBecomes(bob.page, "Alice is typing…", 5000);
    const closedAt = Date.now();
    await alice.page.close(); // mid-typing: no send, no idle stop yet
    const cleared = await lineBecomes(bob.page, "", timing.ttl_ms + 3000);
    t.diagnostic(`Alice's tab closed → Bob's line clears: ${cleared - closedAt} ms (bound: ttl + 1 s = ${timing.ttl_ms + 1000} ms)`);
    assert.ok(cleared - closedAt <= timing.ttl_ms + 1000, `cleared ${cleared - closedAt} ms after the close`);
  } finally {
    await alice.close();
    await bob.close();
  }
});

test("Alice's tab crashes mid-typing (no pagehide, no typing_stop) → Bob's line clears within ttl + 1 s", { timeout: 30_000 }, async (t) => {
  const r = room();
  const [bob, alice] = await Promise.all([openUser("bob", "Bob", r), openUser("alice", "Alice", r)]);
  try {
    await typeSlowly(alice.page, "Hi Bo", 100);
    await lineBecomes(bob.page, "Alice is typing…", 5000);
    const cdp = await alice.context.newCDPSession(alice.page);
    const crashedAt = Date.now();
    cdp.send("Page.crash").catch(() => {}); // the renderer dies: no page event runs
    const cleared = await lineBecomes(bob.page, "", timing.ttl_ms + 3000);
    t.diagnostic(`Alice's renderer crashed → Bob's line clears: ${cleared - crashedAt} ms (bound ${timing.ttl_ms + 1000} ms)`);
    assert.ok(cleared - crashedAt <= timing.ttl_ms + 1000, `cleared ${cleared - crashedAt} ms after the crash`);
  } finally {
    await alice.close();
    await bob.close();
  }
});

test("three typists, in the order they started; self never shown", { timeout: 30_000 }, async () => {
  const r = room();
  const [bob, alice] = await Promise.all([openUser("bob", "Bob", r), openUser("alice", "Alice", r)]);
  const carol = await openUser("carol", "Carol", r);
  const dan = await openUser("dan", "Dan", r);
  try {
    await alice.page.keyboard.type("x");
    await lineBecomes(bob.page, "Alice is typing…", 5000);
    await carol.page.keyboard.type("y");
    await lineBecomes(bob.page, "Alice and Carol are typing…", 5000);
    await dan.page.keyboard.type("z");
    await lineBecomes(bob.page, "Alice, Carol and Dan are typing…", 5000);
    await lineBecomes(alice.page, "Carol and Dan are typing…", 5000);
    await bob.page.keyboard.type("w");
    await lineBecomes(alice.page, "Carol, Dan and Bob are typing…", 5000);
    await lineBecomes(carol.page, "Alice, Dan and Bob are typing…", 5000);
    // Vietnamese, switched live on Bob's page.
    await bob.page.selectOption("#lang", "vi");
    await lineBecomes(bob.page, "Alice, Carol và Dan đang gõ...", 2000);
  } finally {
    for (const u of [alice, carol, dan, bob]) await u.close();
  }
});

test("more typists than the snapshot lists: \"N people are typing…\" from total, names once their refreshes arrive", { timeout: 150_000 }, async (t) => {
  if (!stack.gateway) return t.skip("needs a stack of its own with ELLIPSIS_SNAPSHOT_MAX=2 (ELLIPSIS_E2E_URL is set)");
  // Refreshes 15 s apart, so Bob's page shows the count for seconds before
  // the first refresh after his join lists the third typist.
  const env = { ELLIPSIS_SNAPSHOT_MAX: "2", ELLIPSIS_TYPING_TTL: "30s", ELLIPSIS_TYPING_REFRESH: "15s", ELLIPSIS_TYPING_IDLE_STOP: "5s" };
  const cut = await startStack({ root: repoRoot, artifacts, env, tag: "cut" });
  const r = room();
  const users = [];
  try {
    for (const [id, name] of [["alice", "Alice"], ["carol", "Carol"], ["dan", "Dan"]]) users.push(await openUser(id, name, r, cut.url));
    // All three keep typing (a key every 300 ms for 24 s) while Bob
    // joins: his joined snapshot lists two and counts three.
    const typing = users.map((u) => u.page.keyboard.type("x".repeat(80), { delay: 300 }));
    await users[0].page.waitForFunction(() => window.ellipsisDemo.room.total === 2, null, { timeout: 10_000 });
    const bob = await openUser("bob", "Bob", r, cut.url);
    users.push(bob);
    const j = await bob.page.evaluate(() => ({ listed: window.ellipsisDemo.room.typists.length, total: window.ellipsisDemo.room.total }));
    assert.deepEqual(j, { listed: 2, total: 3 }, "the joined snapshot: two listed, three counted");
    await lineBecomes(bob.page, "3 people are typing…", 5000);
    // The refresh (15 s after the first key) of the typist the cut list
    // left out lists him: names again. Which one was left out is the
    // store's choice (it lists the most recently active), so the order of
    // the names is not fixed.
    await bob.page.waitForFunction(
      () => {
        const text = document.getElementById("typing").dataset.text || "";
        return ["Alice", "Carol", "Dan"].every((n) => text.includes(n)) && text.endsWith(" are typing…");
      },
      null,
      { timeout: 25_000, polling: 50 },
    );
    await Promise.all(typing);
  } finally {
    for (const u of users) await u.close();
    await cut.stop();
  }
});

test("gateway restart: pages reconnect with backoff, rejoin, and typing shows again", { timeout: 60_000 }, async (t) => {
  if (!stack.gateway) return t.skip("the stack under test is not ours to restart (ELLIPSIS_E2E_URL)");
  const r = room();
  const [bob, alice] = await Promise.all([openUser("bob", "Bob", r), openUser("alice", "Alice", r)]);
  try {
    await alice.page.keyboard.type("before");
    await lineBecomes(bob.page, "Alice is typing…", 5000);
    await stack.gateway.stop(); // SIGTERM: clears its connections' typing, closes them with 1001
    await lineBecomes(bob.page, "", timing.ttl_ms + 3000);
    await bob.page.waitForFunction(() => window.stateLog.includes("reconnecting"), null, { timeout: 5000 });
    stack.gateway.start();
    await stack.gateway.ready();
    // The pages back off (see the states below); "online" makes them retry now.
    for (const u of [alice, bob]) await u.page.evaluate(() => window.dispatchEvent(new Event("online")));
    for (const u of [alice, bob]) {
      await u.page.waitForFunction(() => window.ellipsisDemo.client.state === "open" && window.ellipsisDemo.room.state === "joined", null, {
        timeout: 30_000,
      });
    }
    const states = await bob.page.evaluate(() => window.stateLog);
    t.diagnostic(`Bob's connection: ${states.join(" → ")}`);
    assert.equal(states.at(-1), "open");
    assert.match(await bob.page.locator("#status").innerText(), /Connected as Bob/);
    await alice.page.keyboard.type(" after");
    const times = await inputTimes(alice.page);
    const shown = await lineBecomes(bob.page, "Alice is typing…", 5000);
    assert.ok(shown - times.at(-1) <= 1000 || shown - times.at(-6) <= 1000, "shown within 1 s of typing again");
  } finally {
    if (stack.gateway.proc.exitCode !== null) {
      stack.gateway.start();
      await stack.gateway.ready();
    }
    await alice.close();
    await bob.close();
  }
});

test("dev stack: a message sent in Alice's tab appears in Bob's, and the chat service's stop clears her indicator", { timeout: 180_000 }, async (t) => {
  const dev = await startDevStack({ root: repoRoot, artifacts });
  t.after(() => dev.stop());
  const r = room();
  // Alice's own typing_stop frames never reach the gateway: only the chat
  // service's stop on NATS (the platform path) can clear her indicator
  // before it expires.
  const dropStops = (page) =>
    page.routeWebSocket(/\/v1\/ws/, (ws) => {
      const server = ws.connectToServer();
      ws.onMessage((m) => {
        if (!String(m).includes('"typing_stop"')) server.send(m);
      });
    });
  const [bob, alice] = await Promise.all([openUser("bob", "Bob", r, dev.url), openUser("alice", "Alice", r, dev.url, dropStops)]);
  try {
    for (const u of [alice, bob]) await u.page.waitForFunction(() => window.ellipsisDemo.chat === true, null, { timeout: 10_000 });
    await alice.page.keyboard.type("hello there");
    await lineBecomes(bob.page, "Alice is typing…", 5000);
    const sentAt = await alice.page.evaluate(() => {
      const t = Date.now();
      document.getElementById("compose").requestSubmit();
      return t;
    });
    const cleared = await lineBecomes(bob.page, "", timing.ttl_ms);
    t.diagnostic(`message sent → Bob's line clears through the chat service's stop: ${cleared - sentAt} ms`);
    assert.ok(cleared - sentAt <= 1500, `cleared ${cleared - sentAt} ms after the send (the ttl is ${timing.ttl_ms} ms)`);
    for (const u of [bob, alice]) {
      await u.page.waitForFunction(() => document.querySelectorAll("#messages li:not(.note)").length === 1, null, { timeout: 5000 });
      assert.match(await u.page.locator("#messages li:not(.note)").innerText(), /Alice\s*hello there/);
    }
    assert.deepEqual([...alice.errors, ...bob.errors], []);
  } finally {
    await alice.close();
    await bob.close();
  }
});
