// Watching many rooms, end to end in headless Chromium against a real
// stack: Alice's demo page watches 40 rooms (its room list, through
// client.watch); Bob, in another browser context, types in one of them,
// and Alice's list shows "Bob is typing…" on that room's row, then clears
// it when Bob sends, while no other row ever changes. Alice's own typing
// never shows in her list (the gateway's self filter).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { startStack, repoRoot } from "./stack.js";
import { launchChromium } from "./browser.js";

const artifacts = join(repoRoot, "clients", "js", "test-artifacts");

let stack, browser;

before(
  async () => {
    mkdirSync(artifacts, { recursive: true });
    [stack, browser] = await Promise.all([startStack({ root: repoRoot, artifacts, tag: "watch" }), launchChromium()]);
  },
  { timeout: 240_000 },
);

after(async () => {
  if (browser) await browser.close();
  if (stack) await stack.stop();
});

// Opens the demo page as a user joined to roomId with `rooms` in its room
// list; waits until it is joined, its watch() answered and every room's
// first summary in, then records every change of a row's line in
// window.rowLog.
async function openDemo(user, name, roomId, rooms) {
  const context = await browser.newContext({ viewport: { width: 720, height: 720 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (err) => errors.push(err.message));
  const q = new URLSearchParams({ name, user, room: roomId, rooms: rooms.join(","), lang: "en", autojoin: "1" });
  await page.goto(`${stack.url}/?${q}`);
  await page.waitForFunction(() => window.ellipsisDemo && window.ellipsisDemo.room.state === "joined" && window.ellipsisDemo.watching, null, {
    timeout: 15_000,
  });
  await page.waitForFunction((rs) => rs.every((r) => window.ellipsisDemo.client.summary(r)), rooms, { timeout: 15_000 });
  await page.evaluate(() => {
    window.rowLog = [];
    for (const li of document.querySelectorAll("#rooms li")) {
      const line = li.querySelector(".room-typing");
      new MutationObserver(() => window.rowLog.push({ room: li.dataset.room, text: line.dataset.text })).observe(line, {
        attributes: true,
        attributeFilter: ["data-text"],
      });
    }
  });
  return { page, errors, close: () => context.close() };
}

const rowText = (page, roomId) =>
  page.evaluate((r) => [...document.querySelectorAll("#rooms li")].find((li) => li.dataset.room === r)?.querySelector(".room-typing").dataset.text, roomId);

const rowBecomes = (page, roomId, text) =>
  page.waitForFunction(
    ([r, t]) => [...document.querySelectorAll("#rooms li")].find((li) => li.dataset.room === r)?.querySelector(".room-typing").dataset.text === t,
    [roomId, text],
    { timeout: 15_000, polling: 50 },
  );

test("a page watching 40 rooms sees another tab's typing in one of them appear and end in its room list", async () => {
  const tag = randomBytes(3).toString("hex");
  const rooms = Array.from({ length: 40 }, (_, i) => `watch ${tag} ☕ ${i}`);
  const home = rooms[0];
  const target = rooms[17];
  const alice = await openDemo("alice", "Alice", home, rooms);
  const bob = await openDemo("bob", "Bob", target, [target]);
  try {
    const watching = await alice.page.evaluate(() => window.ellipsisDemo.watching);
    assert.deepEqual(watching.refused, []);
    assert.equal(watching.rooms.length, 40);
    assert.equal(watching.watched, 40);
    assert.equal(await alice.page.evaluate(() => window.ellipsisDemo.client.watched.size), 40);
    assert.equal(await alice.page.evaluate(() => document.querySelectorAll("#rooms li").length), 40);
    // Every accepted room got its first summary (openDemo waited): nobody types yet.
    assert.equal(await rowText(alice.page, target), "");

    // Alice types in her own room: her list never shows herself.
    await alice.page.focus("#text");
    await alice.page.keyboard.type("hi", { delay: 50 });

    await bob.page.focus("#text");
    await bob.page.keyboard.type("hello", { delay: 50 });
    await rowBecomes(alice.page, target, "Bob is typing…");
    const seen = await alice.page.evaluate((r) => window.ellipsisDemo.client.summary(r), target);
    assert.deepEqual(seen, { room: target, typing: [{ user: "bob", name: "Bob" }], total: 1 });
    await alice.page.evaluate((r) => [...document.querySelectorAll("#rooms li")].find((li) => li.dataset.room === r).scrollIntoView({ block: "center" }), target);
    await alice.page.screenshot({ path: join(artifacts, "e2e-watch-room-list.png") });

    // Bob sends: typing_stop at once; the next summary clears the row.
    await bob.page.keyboard.press("Enter");
    await rowBecomes(alice.page, target, "");
    assert.deepEqual(await alice.page.evaluate((r) => window.ellipsisDemo.client.summary(r), target), { room: target, typing: [], total: 0 });

    const log = await alice.page.evaluate(() => window.rowLog);
    assert.deepEqual(
      log.filter((e) => e.room !== target && e.text !== ""),
      [],
      "no other row showed anyone (Alice's own typing in her room never shows)",
    );
    assert.deepEqual(
      log.map((e) => e.text).filter((t, i, a) => t !== a[i - 1]),
      ["Bob is typing…", ""],
    );
    assert.deepEqual([...alice.errors, ...bob.errors], []);
  } finally {
    await Promise.all([alice.close(), bob.close()]);
  }
});
