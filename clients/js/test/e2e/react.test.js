// The React binding in real headless Chromium against a real stack: a tiny
// app (react-dom/client, StrictMode, development build so effects mount
// twice) bundled here with esbuild's JS API from node_modules (nothing is
// downloaded), served from an origin of its own (in the gateway's
// ELLIPSIS_ALLOWED_ORIGINS) and talking to the gateway cross-origin. Alice
// and Bob each open it in a browser context: a <Composer> (keystroke on
// input, messageSent on Enter) and a <Line> (formatTypists) share one room
// through useTyping.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { build } from "esbuild";
import { startStack, repoRoot } from "./stack.js";
import { launchChromium, serveOrigin } from "./browser.js";

const jsDir = join(repoRoot, "clients", "js");
const artifacts = join(jsDir, "test-artifacts");

const APP = `
import { createElement as h, StrictMode, useState } from "react";
import { createRoot } from "react-dom/client";
import { Client, formatTypists } from "./src/ellipsis.js";
import { useTyping } from "./src/react.js";

const q = new URLSearchParams(location.search);
const client = new Client({ url: q.get("gw"), user: q.get("user"), name: q.get("name") });
client.connect().catch((err) => console.error(err));
window.client = client;

function Composer({ roomId }) {
  const { keystroke, messageSent, blur } = useTyping(client, roomId);
  const [text, setText] = useState("");
  return h("input", {
    id: "text",
    value: text,
    onChange: (e) => { setText(e.target.value); keystroke(); },
    onKeyDown: (e) => { if (e.key === "Enter") { messageSent(); setText(""); } },
    onBlur: blur,
  });
}

function Line({ roomId }) {
  const { typists, total } = useTyping(client, roomId);
  const line = formatTypists(typists, { total, locale: "en" });
  return h("p", { id: "typing", "data-text": line }, line);
}

function App() {
  const [roomId, setRoomId] = useState(q.get("room"));
  window.setRoom = setRoomId;
  return h("div", null, h(Composer, { roomId }), h(Line, { roomId }));
}

const root = createRoot(document.getElementById("app"));
root.render(h(StrictMode, null, h(App)));
window.unmountApp = () => root.render(h(StrictMode, null));
`;

let stack;
let browser;
let site;
let outDir;

before(
  async () => {
    mkdirSync(artifacts, { recursive: true });
    outDir = mkdtempSync(join(tmpdir(), "ellipsis-react-e2e-"));
    await build({
      stdin: { contents: APP, resolveDir: jsDir, sourcefile: "app.js", loader: "js" },
      bundle: true,
      format: "esm",
      platform: "browser",
      target: "chrome120",
      define: { "process.env.NODE_ENV": '"development"' },
      outfile: join(outDir, "app.js"),
      logLevel: "error",
    });
    const files = {
      "/index.html": { body: '<!doctype html><meta charset="utf-8"><title>react</title><link rel="icon" href="data:,"><div id="app"></div><script type="module" src="/app.js"></script>' },
      "/app.js": { body: readFileSync(join(outDir, "app.js")), type: "text/javascript; charset=utf-8" },
    };
    site = await serveOrigin(files);
    [stack, browser] = await Promise.all([
      startStack({ root: repoRoot, artifacts, env: { ELLIPSIS_ALLOWED_ORIGINS: site.origin }, tag: "react" }),
      launchChromium(),
    ]);
  },
  { timeout: 240_000 },
);

after(async () => {
  if (browser) await browser.close();
  if (stack) await stack.stop();
  if (site) await site.close();
  if (outDir) rmSync(outDir, { recursive: true, force: true });
});

async function openUser(user, name, roomId) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (err) => errors.push(err.message));
  page.on("console", (msg) => msg.type() === "error" && errors.push(msg.text()));
  const q = new URLSearchParams({ gw: stack.url, user, name, room: roomId });
  await page.goto(`${site.origin}/index.html?${q}`);
  await joined(page, roomId);
  return { context, page, errors };
}

const joined = (page, roomId) =>
  page.waitForFunction((r) => window.client.room(r)?.state === "joined", roomId, { timeout: 10_000 });

const lineBecomes = (page, text) =>
  page.waitForFunction((t) => document.getElementById("typing")?.dataset.text === t, text, { timeout: 10_000, polling: 20 });

test("react useTyping: Bob's tab shows Alice typing and clears when she sends; StrictMode and two components share one Room", { timeout: 60_000 }, async () => {
  const roomId = `react ${randomBytes(3).toString("hex")} ☕`;
  const alice = await openUser("alice", "Alice", roomId);
  const bob = await openUser("bob", "Bob", roomId);
  try {
    // Two components per tab and StrictMode's double mount share one Room.
    for (const { page } of [alice, bob]) {
      assert.equal(await page.evaluate(() => window.client.rooms.size), 1);
    }
    await alice.page.focus("#text");
    await alice.page.keyboard.type("hello", { delay: 30 });
    await lineBecomes(bob.page, "Alice is typing…");
    assert.equal(await alice.page.evaluate(() => document.getElementById("typing").dataset.text), "", "never this user");
    await alice.page.keyboard.press("Enter");
    await lineBecomes(bob.page, "");
    assert.equal(await alice.page.inputValue("#text"), "");

    // A new roomId leaves the old room and joins the new one.
    const next = `${roomId} 2`;
    await bob.page.evaluate((r) => window.setRoom(r), next);
    await joined(bob.page, next);
    await bob.page.waitForFunction((r) => window.client.room(r) === undefined, roomId, { timeout: 10_000 });

    // Unmounting the last component leaves the room.
    await alice.page.evaluate(() => window.unmountApp());
    await alice.page.waitForFunction(() => window.client.rooms.size === 0, null, { timeout: 10_000 });
    assert.deepEqual(alice.errors, []);
    assert.deepEqual(bob.errors, []);
  } catch (err) {
    await bob.page.screenshot({ path: join(artifacts, "react-bob.png") }).catch(() => {});
    throw err;
  } finally {
    await alice.context.close();
    await bob.context.close();
  }
});
