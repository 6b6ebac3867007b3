// Back from the background, in headless Chromium against a real stack:
// Bob's page misses Alice's typing_stop while it is "in the background"
// (its WebSocket runs through a TCP proxy here that drops the gateway's
// data frames meanwhile) and shows the right line as soon as it is visible
// again, through the SDK's resync on visibilitychange, not its periodic
// resync (set to 10 minutes) nor the local expiry (graceMs 10 minutes).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, readdirSync } from "node:fs";
import { createServer, connect as tcpConnect } from "node:net";
import { once } from "node:events";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { startStack, repoRoot, freePort } from "./stack.js";
import { launchChromium, serveOrigin } from "./browser.js";

const artifacts = join(repoRoot, "clients", "js", "test-artifacts");
const srcDir = join(repoRoot, "clients", "js", "src");

// The app page: the SDK from its own origin, the client on the gateway (or
// the proxy) given by ?url=; every frame sent and received, and every line
// shown, logged in order in window.log.
const PAGE = `<!doctype html><meta charset="utf-8"><title>resync</title><p id="typing" data-text=""></p>
<script type="module">
import { Client, formatTypists } from "./src/ellipsis.js";
const q = new URLSearchParams(location.search);
const log = (window.log = []);
class LoggedWebSocket extends WebSocket {
  constructor(url) {
    super(url);
    this.addEventListener("message", (e) => log.push({ kind: "recv", frame: JSON.parse(e.data) }));
  }
  send(data) {
    log.push({ kind: "sent", frame: JSON.parse(data) });
    super.send(data);
  }
}
const client = new Client({
  url: q.get("url"), user: q.get("user"), name: q.get("name"), WebSocket: LoggedWebSocket,
  resyncMs: Number(q.get("resyncMs")), graceMs: Number(q.get("graceMs")),
});
const room = client.join(q.get("room"));
const line = document.getElementById("typing");
room.on("change", (typists, total) => {
  line.dataset.text = formatTypists(typists, { locale: "en", total });
  log.push({ kind: "line", text: line.dataset.text });
});
client.on("resync", (ev) => log.push({ kind: "resync", ...ev }));
window.app = { client, room };
client.connect();
</script>`;

/**
 * A TCP proxy to the gateway. While `blackhole` is true it drops the
 * gateway's WebSocket data frames (text, binary, continuation) and keeps
 * its control frames (ping, pong, close), so the connection stays up and
 * only events are lost: the page cannot notice but by asking (a sync).
 * The gateway's frames are unmasked and uncompressed (no
 * permessage-deflate), so they are parsed as they pass; `dropped` keeps
 * the texts dropped.
 */
async function startProxy(target) {
  const { hostname, port } = new URL(target);
  const proxy = { blackhole: false, dropped: [], sockets: new Set() };
  const srv = createServer((client) => {
    const upstream = tcpConnect(Number(port), hostname);
    proxy.sockets.add(client).add(upstream);
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
    client.pipe(upstream);
    let buf = Buffer.alloc(0);
    let frames = false; // past a 101 response head
    let raw = false; // an HTTP response that is not an upgrade: pass as is
    upstream.on("data", (chunk) => {
      if (raw) return client.write(chunk);
      buf = Buffer.concat([buf, chunk]);
      if (!frames) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const head = buf.subarray(0, end + 4);
        if (!/^HTTP\/1\.1 101 /.test(head.toString("latin1"))) {
          raw = true;
          client.write(buf);
          return;
        }
        client.write(head);
        buf = buf.subarray(end + 4);
        frames = true;
      }
      for (;;) {
        if (buf.length < 2) return;
        let len = buf[1] & 0x7f;
        let off = 2;
        if (len === 126) {
          if (buf.length < 4) return;
          len = buf.readUInt16BE(2);
          off = 4;
        } else if (len === 127) {
          if (buf.length < 10) return;
          len = Number(buf.readBigUInt64BE(2));
          off = 10;
        }
        if (buf.length < off + len) return;
        const frame = buf.subarray(0, off + len);
        buf = buf.subarray(off + len);
        const opcode = frame[0] & 0x0f;
        if (proxy.blackhole && opcode < 8) proxy.dropped.push(frame.subarray(off).toString("utf8"));
        else client.write(frame);
      }
    });
  });
  srv.listen(await freePort(), "127.0.0.1");
  await once(srv, "listening");
  proxy.url = `http://127.0.0.1:${srv.address().port}`;
  proxy.close = async () => {
    for (const s of proxy.sockets) s.destroy();
    srv.close();
    await once(srv, "close");
  };
  return proxy;
}

// Headless Chromium keeps every page "visible": minimising its window
// (Browser.setWindowBounds), bringing another tab to front (bringToFront,
// Target.activateTarget) and Page.setWebLifecycleState all leave
// document.visibilityState alone (checked with Chromium 156). So the test
// overrides visibilityState and dispatches the real visibilitychange event,
// which is what the SDK listens to.
async function setVisibility(page, state) {
  await page.evaluate((s) => {
    Object.defineProperty(document, "visibilityState", { value: s, configurable: true });
    Object.defineProperty(document, "hidden", { value: s === "hidden", configurable: true });
    document.dispatchEvent(new Event("visibilitychange"));
  }, state);
}

/** Waits (bounded) until cond() holds in Node. */
async function until(cond, what, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`e2e: timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

let stack, browser, app, proxy;

before(
  async () => {
    mkdirSync(artifacts, { recursive: true });
    const files = { "/page.html": { body: PAGE } };
    for (const f of readdirSync(srcDir)) {
      if (f.endsWith(".js")) files[`/src/${f}`] = { body: readFileSync(join(srcDir, f)), type: "text/javascript; charset=utf-8" };
    }
    app = await serveOrigin(files);
    [stack, browser] = await Promise.all([
      startStack({ root: repoRoot, artifacts, tag: "resync", env: { ELLIPSIS_ALLOWED_ORIGINS: app.origin } }),
      launchChromium(),
    ]);
    proxy = await startProxy(stack.url);
  },
  { timeout: 240_000 },
);

after(async () => {
  if (browser) await browser.close();
  if (proxy) await proxy.close();
  if (stack) await stack.stop();
  if (app) await app.close();
});

async function openTab(user, name, roomId, url) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (err) => errors.push(err.message));
  const q = new URLSearchParams({ url, user, name, room: roomId, resyncMs: "600000", graceMs: "600000" });
  await page.goto(`${app.origin}/page.html?${q}`);
  await page.waitForFunction(() => window.app && window.app.room.state === "joined", null, { timeout: 10_000 });
  return { page, errors, close: () => context.close() };
}

const lineIs = (page, text) =>
  page.waitForFunction((t) => document.getElementById("typing").dataset.text === t, text, { timeout: 10_000, polling: 20 });

test("a hidden tab that missed a typing_stop shows the right line on becoming visible (resync)", async () => {
  const roomId = `resync ${randomBytes(3).toString("hex")}`;
  const alice = await openTab("alice", "Alice", roomId, stack.url);
  const bob = await openTab("bob", "Bob", roomId, proxy.url);
  try {
    await alice.page.evaluate(() => window.app.room.keystroke());
    await lineIs(bob.page, "Alice is typing…");

    // Bob goes to the background and his link silently loses events.
    proxy.blackhole = true;
    await setVisibility(bob.page, "hidden");
    await alice.page.evaluate(() => window.app.room.messageSent());
    await until(() => proxy.dropped.some((t) => t.includes('"typing_stop"') && t.includes('"alice"')), "the gateway's typing_stop to Bob (dropped)");
    assert.equal(await bob.page.evaluate(() => document.getElementById("typing").dataset.text), "Alice is typing…", "Bob missed the stop");
    const mark = await bob.page.evaluate(() => window.log.length);

    // Back in front: one sync, its snapshot replaces the stale line.
    proxy.blackhole = false;
    await setVisibility(bob.page, "visible");
    await lineIs(bob.page, "");
    const log = (await bob.page.evaluate(() => window.log)).slice(mark);
    const syncs = log.filter((e) => e.kind === "sent" && e.frame.type === "sync");
    assert.equal(syncs.length, 1, "one sync for the one room");
    assert.equal(syncs[0].frame.room, roomId);
    assert.deepEqual(log.find((e) => e.kind === "resync"), { kind: "resync", reason: "visible", rooms: [roomId] });
    const reply = log.findIndex((e) => e.kind === "recv" && e.frame.type === "typing" && e.frame.id === syncs[0].frame.id);
    assert.ok(reply >= 0, "the sync was answered");
    assert.deepEqual(log[reply].frame.users, [], "the snapshot: nobody types");
    const cleared = log.findIndex((e) => e.kind === "line" && e.text === "");
    assert.ok(cleared > reply, "the line was replaced by the snapshot");
    assert.ok(log.some((e) => e.kind === "sent" && e.frame.type === "ping"), "the connection was checked");
    assert.deepEqual([...alice.errors, ...bob.errors], []);
  } finally {
    await Promise.all([alice.close(), bob.close()]);
  }
});
