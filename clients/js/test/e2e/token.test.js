// The SDK's default token transport against a real gateway with auth=jwt in
// Chromium: the JWT travels in Sec-WebSocket-Protocol (never in the URL), the
// browser accepts the gateway's ellipsis.v1 selection, a bad token is refused,
// and the deprecated ?access_token= still works (docs/protocol.md, "Where
// the token travels").
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { startStack, repoRoot } from "./stack.js";
import { launchChromium } from "./browser.js";

const artifacts = join(repoRoot, "clients", "js", "test-artifacts");
const secret = randomBytes(16).toString("hex");
let stack;
let browser;

function jwt(claims, key = secret) {
  const b64 = (v) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}`;
  return `${body}.${createHmac("sha256", key).update(body).digest("base64url")}`;
}
const valid = (sub) => jwt({ sub, name: sub, exp: Math.floor(Date.now() / 1000) + 3600 });

before(
  async () => {
    mkdirSync(artifacts, { recursive: true });
    [stack, browser] = await Promise.all([
      startStack({ root: repoRoot, artifacts, tag: "token", gatewayEnv: { ELLIPSIS_AUTH: "jwt", ELLIPSIS_JWT_SECRET: secret } }),
      launchChromium(),
    ]);
  },
  { timeout: 240_000 },
);

after(async () => {
  if (browser) await browser.close();
  if (stack) await stack.stop();
});

/** Runs the SDK from the gateway's page origin; returns the final state, the WebSocket URLs and the selected subprotocol. */
async function connect(token, tokenTransport) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const sockets = [];
  page.on("websocket", (ws) => sockets.push(ws.url()));
  await page.goto(`${stack.url}/`);
  const out = await page.evaluate(
    async ([token, tokenTransport]) => {
      const { Client } = await import("/src/ellipsis.js");
      const client = new Client({ token, ...(tokenTransport ? { tokenTransport } : {}), reconnectMinMs: 60000, reconnectMaxMs: 60000 });
      const room = client.join("token-room");
      client.connect().catch(() => {});
      const deadline = Date.now() + 10000;
      while (Date.now() < deadline && room.state !== "joined" && client.state !== "reconnecting" && client.state !== "closed") {
        await new Promise((r) => setTimeout(r, 50));
      }
      const res = { state: client.state, room: room.state, protocol: client._ws ? client._ws.protocol : null };
      client.close();
      return res;
    },
    [token, tokenTransport],
  );
  await context.close();
  return { ...out, sockets };
}

test("default: the JWT in Sec-WebSocket-Protocol, not in the URL; the gateway selects ellipsis.v1", { timeout: 30_000 }, async () => {
  const tok = valid("alice");
  const r = await connect(tok);
  assert.equal(r.room, "joined", JSON.stringify(r));
  assert.equal(r.protocol, "ellipsis.v1");
  assert.ok(r.sockets.length >= 1);
  for (const u of r.sockets) assert.ok(!u.includes(tok) && !u.includes("access_token"), u);
});

test("a token with a bad signature is refused (no join, the client reconnects)", { timeout: 30_000 }, async () => {
  const r = await connect(jwt({ sub: "mallory", exp: Math.floor(Date.now() / 1000) + 3600 }, "other-secret"));
  assert.notEqual(r.room, "joined");
  assert.equal(r.state, "reconnecting", JSON.stringify(r));
});

test('tokenTransport "query": the deprecated ?access_token= still authenticates', { timeout: 30_000 }, async () => {
  const tok = valid("bob");
  const r = await connect(tok, "query");
  assert.equal(r.room, "joined", JSON.stringify(r));
  assert.equal(r.protocol, "");
  assert.ok(r.sockets.some((u) => new URL(u).searchParams.get("access_token") === tok), r.sockets.join(" "));
});
