// What would be published is what is tested, in a browser: the tarball of
// `npm pack` installed into a scratch project (test/pack/pack.js), served as
// static files from an origin of its own, and a bundler-free page that
// imports "@ellipsis-chat/client" through an import map pointing into
// node_modules. Two such pages (Alice, Bob) talk to a real stack on another
// origin (ELLIPSIS_ALLOWED_ORIGINS lists the page's), with /v1/config
// fetched cross-origin, and Bob's page shows Alice typing.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { startStack, repoRoot } from "./stack.js";
import { launchChromium, serveFolder } from "./browser.js";
import { packAndInstall, packageName } from "../pack/pack.js";

const artifacts = join(repoRoot, "clients", "js", "test-artifacts");

const page = (gateway) => `<!doctype html>
<meta charset="utf-8">
<title>packed SDK</title>
<script type="importmap">${JSON.stringify({ imports: { [packageName]: `/node_modules/${packageName}/src/ellipsis.js` } })}</script>
<div id="typing"></div>
<script type="module">
  import { Client, TypingIndicator, VERSION } from ${JSON.stringify(packageName)};
  const q = new URLSearchParams(location.search);
  const client = new Client({ url: ${JSON.stringify(gateway)}, user: q.get("user"), name: q.get("name") });
  const errors = [];
  client.on("error", (err) => errors.push(String(err && err.message || err)));
  const room = client.join(q.get("room"));
  const line = new TypingIndicator(document.getElementById("typing"));
  room.on("change", (typists, total) => line.update(typists, total));
  client.connect();
  window.packed = { client, room, errors, VERSION };
</script>
`;

let pack;
let site;
let stack;
let browser;

before(
  async () => {
    mkdirSync(artifacts, { recursive: true });
    pack = await packAndInstall();
    // The page's origin must be known before the gateway starts, to allow it.
    let gatewayURL = "";
    site = await serveFolder(pack.project, {
      "/index.html": { get body() { return page(gatewayURL); } },
      "/favicon.ico": { body: "", type: "image/x-icon" }, // else Chromium's request for it logs a 404
    });
    [stack, browser] = await Promise.all([
      startStack({ root: repoRoot, artifacts, env: { ELLIPSIS_ALLOWED_ORIGINS: site.origin }, tag: "pack" }),
      launchChromium(),
    ]);
    gatewayURL = stack.url;
  },
  { timeout: 240_000 },
);

after(async () => {
  if (browser) await browser.close();
  if (stack) await stack.stop();
  if (site) await site.close();
  if (pack) pack.cleanup();
});

async function open(user, name, roomId) {
  const context = await browser.newContext();
  const p = await context.newPage();
  const problems = [];
  p.on("pageerror", (err) => problems.push(err.message));
  p.on("console", (m) => m.type() === "error" && problems.push(m.text()));
  p.on("response", (r) => r.status() >= 400 && problems.push(`${r.status()} ${r.url()}`));
  await p.goto(`${site.origin}/index.html?${new URLSearchParams({ user, name, room: roomId })}`);
  try {
    await p.waitForFunction(() => window.packed && window.packed.client.state === "open" && window.packed.room.state === "joined", null, { timeout: 15_000 });
  } catch (err) {
    throw new Error(`${user}'s page did not join: ${problems.concat(await p.evaluate(() => window.packed?.errors ?? [])).slice(0, 6).join("; ") || err.message}`);
  }
  return { context, page: p, problems };
}

test("the packed SDK, loaded with an import map from node_modules, shows a typist from a second client cross-origin", { timeout: 60_000 }, async () => {
  assert.notEqual(new URL(site.origin).port, new URL(stack.url).port, "the page and the gateway are on different origins");
  const roomId = `pack ${randomBytes(3).toString("hex")}`;
  const bob = await open("bob", "Bob", roomId);
  const alice = await open("alice", "Alice", roomId);
  try {
    const installed = JSON.parse(readFileSync(join(pack.installed, "package.json"), "utf8"));
    assert.equal(await bob.page.evaluate(() => window.packed.VERSION), installed.version, "the page runs the installed package");
    await alice.page.evaluate(() => window.packed.room.keystroke());
    await bob.page.waitForFunction(() => document.getElementById("typing").dataset.text === "Alice is typing…", null, { timeout: 5000 });
    await alice.page.evaluate(() => window.packed.room.messageSent());
    await bob.page.waitForFunction(() => document.getElementById("typing").dataset.text === "", null, { timeout: 5000 });
    // /v1/config was fetched across origins (fetchConfig on): no CORS error, no SDK error.
    assert.deepEqual(bob.problems.concat(alice.problems), []);
    assert.deepEqual(await bob.page.evaluate(() => window.packed.errors), []);
  } finally {
    await Promise.all([alice.context.close(), bob.context.close()]);
  }
});
