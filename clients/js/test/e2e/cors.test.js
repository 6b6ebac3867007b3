// Cross-origin end-to-end in headless Chromium (docs/protocol.md, "CORS" and
// "The SDK: GET /sdk/v1/… and GET /sdk/{version}/…"): an app page on an
// origin of its own (serveOrigin) imports the SDK from the gateway's
// /sdk/ path as a module and connects with fetchConfig left on, the
// production setup (ELLIPSIS_DEMO_PAGE=false, ELLIPSIS_ALLOWED_ORIGINS set
// to the app's origin); a third origin, not in the list, gets neither the
// SDK, nor /v1/config, nor a WebSocket.
//
// These tests always start stacks of their own (ELLIPSIS_E2E_URL does not
// apply): they need the allow-list and the auth mode set.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { request } from "node:http";
import { createHmac, randomBytes } from "node:crypto";
import { startStack, repoRoot } from "./stack.js";
import { launchChromium, serveOrigin } from "./browser.js";

const artifacts = join(repoRoot, "clients", "js", "test-artifacts");
const VERSION = JSON.parse(readFileSync(join(repoRoot, "clients", "js", "package.json"), "utf8")).version;
const JWT_SECRET = "e2e-cors-" + randomBytes(16).toString("hex");

let browser;
let app; // the allowed origin (in ELLIPSIS_ALLOWED_ORIGINS)
let evil; // an origin not in the list
let stack; // auth=none
let timing; // the stack's GET /v1/config
const appFiles = {}; // filled once the gateway's URL is known
const evilFiles = {};

before(
  async () => {
    mkdirSync(artifacts, { recursive: true });
    [app, evil, browser] = await Promise.all([serveOrigin(appFiles), serveOrigin(evilFiles), launchChromium()]);
    stack = await startStack({ root: repoRoot, artifacts, tag: "cors", gatewayEnv: prodEnv() });
    timing = await (await fetch(`${stack.url}/v1/config`)).json();
  },
  { timeout: 240_000 },
);

after(async () => {
  if (browser) await browser.close();
  if (stack) await stack.stop();
  if (app) await app.close();
  if (evil) await evil.close();
});

/** The gateway settings of the production setup: SDK from /sdk/ only, the app's origin allowed. */
function prodEnv(extra = {}) {
  return { ELLIPSIS_DEMO_PAGE: "false", ELLIPSIS_ALLOWED_ORIGINS: app.origin, ...extra };
}

const room = () => `cors ${randomBytes(3).toString("hex")} ☕`;

/** An HS256 JWT (RFC 7519) for ELLIPSIS_JWT_SECRET, valid for ten minutes. */
function hs256(claims) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  const data = `${b64({ alg: "HS256", typ: "JWT" })}.${b64({ exp: Math.floor(Date.now() / 1000) + 600, ...claims })}`;
  return `${data}.${createHmac("sha256", JWT_SECRET).update(data).digest("base64url")}`;
}

/**
 * The app page: a static `import` of the SDK from the gateway's origin, a
 * Client on that gateway with fetchConfig left on, one room, an input and
 * a TypingIndicator. Credentials (user/name, or token) and the room come in
 * the page's query. window.app holds the client and room; window.appError
 * whatever the connection threw.
 */
function appPage(gw, sdkPath) {
  return `<!doctype html><meta charset="utf-8"><title>app</title><link rel="icon" href="data:,">
<input id="text" autocomplete="off"><div id="typing"></div>
<script type="module">
import { Client, TypingIndicator, VERSION } from ${JSON.stringify(gw + sdkPath)};
const q = new URLSearchParams(location.search);
const creds = q.get("token") ? { token: q.get("token") } : { user: q.get("user"), name: q.get("name") };
const client = new Client({ url: ${JSON.stringify(gw)}, ...creds });
const room = client.join(q.get("room"));
const line = new TypingIndicator(document.getElementById("typing"));
room.on("change", (typists, total) => line.update(typists, total));
document.getElementById("text").addEventListener("input", () => room.keystroke());
window.app = { client, room, VERSION };
client.connect().catch((err) => { window.appError = String(err); });
</script>`;
}

/**
 * Opens page `path` of origin in a browser context of its own and records
 * its console errors, page errors, failed requests and the answers it got
 * (url → status and headers, as the browser received them).
 */
async function openPage(origin, path) {
  const context = await browser.newContext({ viewport: { width: 640, height: 320 } });
  const page = await context.newPage();
  const errors = [];
  const responses = [];
  page.on("console", (m) => m.type() === "error" && errors.push(`console: ${m.text()}`));
  page.on("pageerror", (err) => errors.push(`pageerror: ${err.message}`));
  page.on("requestfailed", (r) => errors.push(`requestfailed: ${r.url()} ${r.failure()?.errorText}`));
  page.on("response", (r) => {
    const headers = r.allHeaders().catch(() => r.headers());
    responses.push({ url: r.url(), status: r.status(), method: r.request().method(), headers });
  });
  // CORS preflights are not Playwright requests; the DevTools protocol
  // reports them: an OPTIONS requestWillBeSent, the headers the browser
  // sent in requestWillBeSentExtraInfo, and a responseReceived of type
  // "Preflight" (keyed by requestId, in no fixed order).
  const preflights = new Map(); // requestId → {url, requestHeaders, status, headers}
  const pf = (id) => preflights.get(id) || preflights.set(id, {}).get(id);
  const cdp = await context.newCDPSession(page);
  cdp.on("Network.requestWillBeSent", (e) => e.request.method === "OPTIONS" && (pf(e.requestId).url = e.request.url));
  cdp.on("Network.requestWillBeSentExtraInfo", (e) => (pf(e.requestId).requestHeaders = e.headers));
  cdp.on("Network.responseReceived", (e) => {
    if (e.type !== "Preflight") return;
    Object.assign(pf(e.requestId), { url: e.response.url, status: e.response.status, headers: e.response.headers });
  });
  await cdp.send("Network.enable");
  await page.goto(`${origin}${path}`);
  const preflightsSeen = () => [...preflights.values()].filter((p) => p.url && p.status && p.requestHeaders);
  return { context, page, errors, responses, preflightsSeen, close: () => context.close() };
}

/** Opens the app page as one user (query: user/name or token, room) and waits until it joined. */
async function openUser(query) {
  const u = await openPage(app.origin, `/index.html?${new URLSearchParams(query)}`);
  try {
    await u.page.waitForFunction(() => window.appError || (window.app && window.app.room.state === "joined"), null, { timeout: 15_000 });
    const failed = await u.page.evaluate(() => window.appError);
    assert.equal(failed, undefined, `connect() failed: ${failed}\n${u.errors.join("\n")}`);
  } catch (err) {
    const shot = join(artifacts, `cors-join-${query.user || "token"}.png`);
    await u.page.screenshot({ path: shot }).catch(() => {});
    await u.close();
    throw new Error(`${query.user || "token user"} never joined: ${err.message}\nscreenshot: ${shot}\n${u.errors.join("\n")}`);
  }
  return u;
}

/** Waits until the page's typing line reads text. */
const lineBecomes = (page, text, timeoutMs) =>
  page.waitForFunction((t) => document.getElementById("typing").dataset.text === t, text, { timeout: timeoutMs, polling: 20 });

/** Runs fn; on failure saves a screenshot of each page to test-artifacts (cors-<name>-<i>.png). */
async function withShots(name, users, fn) {
  try {
    await fn();
  } catch (err) {
    for (const [i, u] of users.entries()) {
      const path = join(artifacts, `cors-${name}-${i}.png`);
      await u.page.screenshot({ path }).then(
        () => (err.message += `\nscreenshot: ${path}`),
        () => {},
      );
    }
    throw err;
  } finally {
    for (const u of users) await u.close();
  }
}

/** The browser's last answer to GET pathname ({status, headers}), or a failure naming what it saw. */
async function answer(u, pathname) {
  const hit = u.responses.findLast((r) => new URL(r.url).pathname === pathname && r.method === "GET");
  assert.ok(hit, `no answer to GET ${pathname} seen; got ${u.responses.map((r) => r.url).join(", ")}`);
  return { status: hit.status, headers: await hit.headers };
}

/**
 * Alice types in her tab, Bob's shows "Alice is typing…", then the line
 * clears once she stops; both pages on the app origin, no errors on either.
 */
async function aliceTypesBobSees(alice, bob, timingMs) {
  await alice.page.focus("#text");
  await alice.page.keyboard.type("Hi Bob", { delay: 50 });
  await lineBecomes(bob.page, "Alice is typing…", 5000);
  assert.equal(await alice.page.locator("#typing").getAttribute("data-text"), "", "Alice sees herself");
  await lineBecomes(bob.page, "", timingMs.idle_stop_ms + 5000);
  assert.deepEqual([...alice.errors, ...bob.errors], [], "console errors or failed requests");
}

/** The Access-Control-* headers of an answer (lower-case names). */
const acHeaders = (headers) => Object.keys(headers).filter((k) => k.toLowerCase().startsWith("access-control-"));

test("a page on another origin imports /sdk/v1/ellipsis.js, fetches /v1/config cross-origin, and Bob's tab shows Alice typing", { timeout: 60_000 }, async () => {
  appFiles["/index.html"] = { body: appPage(stack.url, "/sdk/v1/ellipsis.js") };
  const r = room();
  const users = [];
  await withShots("v1", users, async () => {
    users.push(await openUser({ user: "bob", name: "Bob", room: r }), await openUser({ user: "alice", name: "Alice", room: r }));
    const [bob, alice] = users;
    for (const u of users) {
      // The SDK came from the gateway's origin, under CORS.
      const sdk = await answer(u, "/sdk/v1/ellipsis.js");
      assert.equal(sdk.status, 200);
      assert.equal(sdk.headers["access-control-allow-origin"], app.origin);
      // fetchConfig: the page really read /v1/config across origins.
      const cfg = await answer(u, "/v1/config");
      assert.equal(cfg.status, 200);
      assert.equal(cfg.headers["access-control-allow-origin"], app.origin, "/v1/config answered without the app's origin");
      assert.match(cfg.headers.vary || "", /origin/i);
      assert.equal(cfg.headers["access-control-allow-credentials"], undefined);
      const config = await u.page.evaluate(() => window.app.client.config);
      assert.deepEqual(config, {
        ttlMs: timing.ttl_ms,
        refreshMs: timing.refresh_ms,
        idleStopMs: timing.idle_stop_ms,
        auth: "none",
        maxFrameBytes: timing.max_frame_bytes,
        activities: timing.activities,
        maxThreadsPerUser: timing.max_threads_per_user,
      });
    }
    await aliceTypesBobSees(alice, bob, timing);
  });
});

test("with a JWT (HS256): the same across origins, and a snapshot GET with Authorization passes a real preflight", { timeout: 120_000 }, async () => {
  const jwt = await startStack({ root: repoRoot, artifacts, tag: "cors-jwt", gatewayEnv: prodEnv({ ELLIPSIS_AUTH: "jwt", ELLIPSIS_JWT_SECRET: JWT_SECRET }) });
  const jwtTiming = await (await fetch(`${jwt.url}/v1/config`)).json();
  assert.equal(jwtTiming.auth, "jwt");
  appFiles["/index.html"] = { body: appPage(jwt.url, "/sdk/v1/ellipsis.js") };
  const r = room();
  const users = [];
  try {
    await withShots("jwt", users, async () => {
      users.push(
        await openUser({ token: hs256({ sub: "bob", name: "Bob" }), room: r }),
        await openUser({ token: hs256({ sub: "alice", name: "Alice" }), room: r }),
      );
      const [bob, alice] = users;
      assert.equal(await bob.page.evaluate(() => window.app.client.config.auth), "jwt");
      await alice.page.focus("#text");
      await alice.page.keyboard.type("Hi", { delay: 50 });
      await lineBecomes(bob.page, "Alice is typing…", 5000);
      // The room's snapshot over HTTP with the token in Authorization: not
      // a CORS-safelisted header, so Chromium preflights it first.
      const bearer = hs256({ sub: "bob", name: "Bob" });
      const snap = await bob.page.evaluate(
        async ([u, token]) => {
          const res = await fetch(u, { headers: { Authorization: `Bearer ${token}` } });
          return { status: res.status, body: await res.json() };
        },
        [`${jwt.url}/v1/rooms/${encodeURIComponent(r)}/typing`, bearer],
      );
      assert.equal(snap.status, 200, JSON.stringify(snap.body));
      assert.deepEqual(snap.body.users, [{ user: "alice", name: "Alice" }]);
      // The preflight as the browser sent and got it (its DevTools events
      // may trail the fetch a little: bounded wait).
      const lower = (h) => Object.fromEntries(Object.entries(h || {}).map(([k, v]) => [k.toLowerCase(), v]));
      const deadline = Date.now() + 5000;
      let pre;
      while (!(pre = bob.preflightsSeen().find((p) => new URL(p.url).pathname.endsWith("/typing"))) && Date.now() < deadline) await new Promise((res) => setTimeout(res, 50));
      assert.ok(pre, `no preflight seen for the snapshot GET (seen: ${JSON.stringify(bob.preflightsSeen())})`);
      const sent = lower(pre.requestHeaders);
      const got = lower(pre.headers);
      assert.equal(sent["access-control-request-method"], "GET");
      assert.match(sent["access-control-request-headers"] || "", /authorization/i);
      assert.equal(sent.origin, app.origin);
      assert.equal(pre.status, 204);
      assert.equal(got["access-control-allow-origin"], app.origin);
      assert.match(got["access-control-allow-headers"] || "", /authorization/i);
      assert.match(got["access-control-allow-methods"] || "", /\bGET\b/);
      assert.equal(got["access-control-max-age"], "600");
      await lineBecomes(bob.page, "", jwtTiming.idle_stop_ms + 5000);
      assert.deepEqual([...alice.errors, ...bob.errors], [], "console errors or failed requests");
    });
  } finally {
    await jwt.stop();
  }
});

test(`the versioned SDK /sdk/${VERSION}/ellipsis.js imports cross-origin with a strong ETag and an immutable cache`, { timeout: 60_000 }, async () => {
  const path = `/sdk/${VERSION}/ellipsis.js`;
  appFiles["/index.html"] = { body: appPage(stack.url, path) };
  const r = room();
  const users = [];
  await withShots("versioned", users, async () => {
    users.push(await openUser({ user: "bob", name: "Bob", room: r }), await openUser({ user: "alice", name: "Alice", room: r }));
    const [bob, alice] = users;
    assert.equal(await bob.page.evaluate(() => window.app.VERSION), VERSION);
    for (const p of [path, `/sdk/${VERSION}/client.js`]) {
      const res = await answer(bob, p);
      assert.equal(res.status, 200, p);
      assert.equal(res.headers["access-control-allow-origin"], app.origin, p);
      assert.match(res.headers.etag || "", /^"[A-Za-z0-9_-]{20,}"$/, `${p}: ETag`);
      assert.match(res.headers["cache-control"] || "", /max-age=31536000/, `${p}: Cache-Control`);
      assert.match(res.headers["cache-control"] || "", /immutable/, `${p}: Cache-Control`);
      assert.match(res.headers["content-type"] || "", /^text\/javascript/, `${p}: Content-Type`);
    }
    await aliceTypesBobSees(alice, bob, timing);
  });
});

/** GET or OPTIONS from Node with headers; resolves to {status, headers}. */
function httpDo(method, url, headers) {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers, timeout: 10_000 }, (res) => {
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers }));
    });
    req.on("timeout", () => req.destroy(new Error(`${method} ${url}: no answer in 10 s`)));
    req.on("error", reject);
    req.end();
  });
}

/** A WebSocket upgrade request (RFC 6455 §4.1) from origin; resolves to the HTTP status (101 when upgraded). */
function upgradeStatus(url, origin) {
  return new Promise((resolve, reject) => {
    const req = request(url, {
      headers: {
        Connection: "Upgrade",
        Upgrade: "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": randomBytes(16).toString("base64"),
        Origin: origin,
      },
      timeout: 10_000,
    });
    req.on("upgrade", (res, socket) => {
      socket.destroy();
      resolve(res.statusCode);
    });
    req.on("response", (res) => {
      res.resume();
      resolve(res.statusCode);
    });
    req.on("timeout", () => req.destroy(new Error(`upgrade ${url}: no answer in 10 s`)));
    req.on("error", reject);
    req.end();
  });
}

test("an origin not in ELLIPSIS_ALLOWED_ORIGINS: no SDK, no /v1/config, no WebSocket in the browser; no Access-Control-* and 403 from Node", { timeout: 60_000 }, async () => {
  const gw = stack.url;
  const wsURL = `${gw.replace(/^http/, "ws")}/v1/ws?user=eve&name=Eve`;
  // A module script from /sdk/v1/, a dynamic import of it, a fetch of
  // /v1/config, a snapshot GET with Authorization (preflighted), and a
  // WebSocket; each records how it ended in window.result.
  evilFiles["/index.html"] = {
    body: `<!doctype html><meta charset="utf-8"><title>evil</title><link rel="icon" href="data:,">
<script>window.result = {};</script>
<script type="module" src="${gw}/sdk/v1/ellipsis.js" onload="result.script = 'load'" onerror="result.script = 'error'"></script>
<script type="module">
const r = window.result;
const settle = (p) => p.then((v) => "ok " + v, (e) => e.name + ": " + e.message);
r.fetch = await settle(fetch(${JSON.stringify(gw + "/v1/config")}).then((res) => res.status));
r.auth = await settle(fetch(${JSON.stringify(gw + "/v1/rooms/r1/typing")}, { headers: { Authorization: "Bearer x" } }).then((res) => res.status));
r.import = await settle(import(${JSON.stringify(gw + "/sdk/v1/ellipsis.js?dynamic")}).then((m) => typeof m.Client));
r.ws = await new Promise((resolve) => {
  const ws = new WebSocket(${JSON.stringify(wsURL)});
  ws.onopen = () => { resolve("open"); ws.close(); };
  ws.onclose = (e) => resolve("closed " + e.code);
});
</script>`,
  };
  const users = [];
  await withShots("disallowed", users, async () => {
    const u = await openPage(evil.origin, "/index.html");
    users.push(u);
    await u.page.waitForFunction(() => ["script", "fetch", "auth", "import", "ws"].every((k) => k in window.result), null, { timeout: 15_000 });
    const res = await u.page.evaluate(() => window.result);
    assert.equal(res.script, "error", "the module script from /sdk/v1/ loaded");
    assert.match(res.fetch, /^TypeError: /, "fetch /v1/config did not fail");
    assert.match(res.auth, /^TypeError: /, "the preflighted snapshot GET did not fail");
    assert.match(res.import, /^TypeError: /, "import() of /sdk/v1/ellipsis.js did not fail");
    assert.match(res.ws, /^closed 1006$/, "the WebSocket opened");
    // The failures are CORS's (the answers came, without the headers), not a 404 or a refused connection.
    const blocked = u.errors.filter((e) => /blocked by CORS policy/.test(e));
    assert.ok(blocked.length >= 3, `expected CORS errors for the script, import and fetches; got:\n${u.errors.join("\n")}`);
    assert.ok(
      u.errors.some((e) => /WebSocket connection to .*\/v1\/ws.* failed/i.test(e) && /403/.test(e)),
      `expected the WebSocket refused with 403; got:\n${u.errors.join("\n")}`,
    );
  });

  // From Node, the same origin: no Access-Control-* header at all.
  for (const p of ["/v1/config", "/sdk/v1/ellipsis.js", `/sdk/${VERSION}/ellipsis.js`, "/v1/rooms/r1/typing?user=eve"]) {
    const get = await httpDo("GET", `${gw}${p}`, { Origin: evil.origin });
    assert.deepEqual(acHeaders(get.headers), [], `GET ${p} from ${evil.origin}`);
    const pre = await httpDo("OPTIONS", `${gw}${p}`, {
      Origin: evil.origin,
      "Access-Control-Request-Method": "GET",
      "Access-Control-Request-Headers": "authorization",
    });
    assert.deepEqual(acHeaders(pre.headers), [], `OPTIONS ${p} from ${evil.origin}`);
    // The allowed origin, as a control: the same requests get the headers.
    const ok = await httpDo("OPTIONS", `${gw}${p}`, {
      Origin: app.origin,
      "Access-Control-Request-Method": "GET",
      "Access-Control-Request-Headers": "authorization",
    });
    assert.equal(ok.headers["access-control-allow-origin"], app.origin, `OPTIONS ${p} from ${app.origin}`);
    assert.match(ok.headers["access-control-allow-headers"] || "", /authorization/i);
    assert.equal(ok.headers["access-control-max-age"], "600");
  }
  const wsHTTP = `${gw}/v1/ws?user=eve&name=Eve`;
  assert.equal(await upgradeStatus(wsHTTP, evil.origin), 403, `WebSocket upgrade from ${evil.origin}`);
  assert.equal(await upgradeStatus(wsHTTP, app.origin), 101, `WebSocket upgrade from ${app.origin} (control)`);
});
