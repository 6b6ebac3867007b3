import { test, mock } from "node:test";
import assert from "node:assert/strict";
import { Client, connect, backoffDelay, tokenSubject } from "../../src/ellipsis.js";
import { flush, FakeWebSocket, FakeClock, configFetch, FakeTarget } from "./helpers.js";

// A client on a fake clock, WebSocket and fetch, at the seed timing.
async function setup(t, opts = {}, config) {
  const clock = new FakeClock();
  FakeWebSocket.reset();
  const win = new FakeTarget();
  const doc = new FakeTarget();
  const states = [];
  const client = new Client({
    url: "http://gw.test:8080",
    user: "me",
    name: "Me",
    WebSocket: FakeWebSocket,
    fetch: configFetch(config),
    window: win,
    document: doc,
    clock,
    ...opts,
  });
  client.on("state", (ev) => states.push(ev.state));
  const errors = [];
  client.on("error", (e) => errors.push(e));
  const tick = (ms) => clock.advance(ms);
  return { client, clock, tick, win, doc, states, errors };
}

// Connects and opens the socket; returns it.
async function open(client) {
  const p = client.connect();
  await flush();
  const ws = FakeWebSocket.last;
  ws.open();
  await p;
  return ws;
}

test("connect: reads /v1/config, opens /v1/ws as the dev user, joins with a snapshot", async (t) => {
  const { client, states } = await setup(t);
  const room = client.join("42");
  const ws = await open(client);
  assert.equal(ws.url.href, "ws://gw.test:8080/v1/ws?user=me&name=Me");
  assert.deepEqual(client.config, { ttlMs: 5000, refreshMs: 4000, idleStopMs: 3000, auth: "none", maxFrameBytes: 4096, activities: ["typing", "thinking", "recording_audio", "recording_video", "uploading"], maxThreadsPerUser: null });
  assert.deepEqual(states, ["connecting", "open"]);
  assert.deepEqual(ws.frames, [{ type: "join", room: "42", id: ws.frames[0].id }]);
  assert.equal(room.state, "joining");
  const changes = [];
  room.on("change", (ts) => changes.push(ts));
  ws.acceptJoin("42", [{ user: "alice", name: "Alice" }, { user: "me", name: "Me" }]);
  assert.equal(room.state, "joined");
  assert.deepEqual(room.typists, [{ user: "alice", name: "Alice" }], "self filtered");
  assert.deepEqual(client.typists("42"), room.typists);
  assert.equal(changes.length, 1);
  // A room joined while open is joined at once; the same Room for the same id.
  const other = client.join("a*b?c[d] ☕");
  assert.equal(client.join("a*b?c[d] ☕"), other);
  assert.equal(ws.framesOf("join").at(-1).room, "a*b?c[d] ☕");
  assert.throws(() => client.join(""), TypeError);
  assert.throws(() => client.keystroke("nope"), /join\(\) first/);
  client.close();
});

test("connect() with a path prefix and https: wss, relative paths", async (t) => {
  const { client } = await setup(t, { url: "https://chat.example.com/ellipsis" });
  await open(client);
  assert.equal(FakeWebSocket.last.url.href, "wss://chat.example.com/ellipsis/v1/ws?user=me&name=Me");
  client.close();
});

test("token auth: subprotocol by default, self from the token's sub, a token function runs on every connect", async (t) => {
  const payload = Buffer.from(JSON.stringify({ sub: "alice-ü", exp: 1 })).toString("base64url");
  const jwt = `eyJhbGciOiJIUzI1NiJ9.${payload}.sig`;
  assert.equal(tokenSubject(jwt), "alice-ü");
  assert.equal(tokenSubject("garbage"), "");
  const token = mock.fn(async () => jwt);
  const { client, tick } = await setup(t, { user: undefined, name: undefined, token });
  const room = client.join("r");
  const ws = await open(client);
  // Default tokenTransport "protocol": the token is in Sec-WebSocket-Protocol, not the URL.
  assert.equal(ws.url.searchParams.has("access_token"), false);
  assert.equal(ws.url.search, "");
  assert.deepEqual(ws.protocols, ["ellipsis.v1", "ellipsis.bearer." + jwt]);
  assert.equal(ws.url.searchParams.has("user"), false);
  assert.equal(client.user, "alice-ü");
  ws.acceptJoin("r", [{ user: "alice-ü" }, { user: "bob" }]);
  assert.deepEqual(room.typists, [{ user: "bob" }]);
  ws.drop(1008, "token expired"); // with a token function: reconnect with a fresh token
  await tick(1000);
  assert.equal(token.mock.callCount(), 2);
  assert.equal(FakeWebSocket.all.length, 2);
  client.close();
});

test('tokenTransport "query": the deprecated ?access_token= for an old gateway, no subprotocols', async (t) => {
  const { client } = await setup(t, { user: undefined, token: "a.b.c", tokenTransport: "query" });
  const ws = await open(client);
  assert.equal(ws.url.searchParams.get("access_token"), "a.b.c");
  assert.equal(ws.protocols, undefined);
  client.close();
});

test("tokenTransport: anything but protocol or query is a TypeError naming the option", () => {
  assert.throws(() => new Client({ url: "http://gw.test", token: "a.b.c", tokenTransport: "header" }), {
    name: "TypeError",
    message: /tokenTransport must be "protocol" or "query", got "header"/,
  });
});

test("a token function that once answers no JWT (an error page) is retried; a trailing newline is trimmed", async (t) => {
  const answers = ["<html>502 Bad Gateway</html>", "a.b.c\n"];
  const { client, tick } = await setup(t, { user: undefined, token: async () => answers.shift() });
  const errors = [];
  client.on("error", (e) => errors.push(e));
  client.connect().catch(() => {});
  await tick(0);
  assert.match(String(errors[0] && errors[0].message), /not a JWT/);
  assert.notEqual(client.state, "closed");
  for (let i = 0; i < 20 && FakeWebSocket.all.length === 0; i++) await tick(1000);
  assert.equal(FakeWebSocket.all.length, 1, "reconnected with the next token");
  assert.deepEqual(FakeWebSocket.all[0].protocols, ["ellipsis.v1", "ellipsis.bearer.a.b.c"]);
});

test("a token that cannot be a subprotocol fails for good, naming the rule and the fallback", async (t) => {
  const { client, tick, states } = await setup(t, { user: undefined, token: "not a jwt" });
  const errors = [];
  client.on("error", (e) => errors.push(e));
  client.connect().catch(() => {});
  await tick(0);
  await tick(60000);
  assert.equal(client.state, "closed");
  assert.equal(FakeWebSocket.all.length, 0);
  assert.match(String(errors[0] && errors[0].message), /RFC 7230 token.*tokenTransport: "query"/);
  assert.deepEqual(states, ["connecting", "closed"]);
});

test("1008 with a fixed token: closed for good, no reconnect loop", async (t) => {
  const { client, tick, states } = await setup(t, { user: undefined, token: "a.b.c" });
  const ws = await open(client);
  ws.drop(1008, "token expired");
  await tick(60000);
  assert.equal(client.state, "closed");
  assert.deepEqual(states, ["connecting", "open", "closed"]);
  assert.equal(FakeWebSocket.all.length, 1);
});

test("timers from the server are validated: refresh >= ttl rejects connect()", async (t) => {
  const { client, states } = await setup(t, {}, { ttl_ms: 4000, refresh_ms: 4000, idle_stop_ms: 3000, auth: "none" });
  await assert.rejects(client.connect(), /refreshMs \(4000\) must be below the server's ttl_ms \(4000\)/);
  assert.equal(client.state, "closed");
  assert.deepEqual(states, ["connecting", "closed"]);
  assert.equal(FakeWebSocket.all.length, 0);
});

test("options override the server's timing; fetchConfig: false uses options and defaults", async (t) => {
  const { client } = await setup(t, { refreshMs: 2500 });
  await open(client);
  assert.deepEqual(client.config, { ttlMs: 5000, refreshMs: 2500, idleStopMs: 3000, auth: "none", maxFrameBytes: 4096, activities: ["typing", "thinking", "recording_audio", "recording_video", "uploading"], maxThreadsPerUser: null });
  client.close();
  assert.throws(() => new Client({ url: "http://x", fetchConfig: false, refreshMs: 6000 }), RangeError);
  const offline = new Client({ url: "http://x", fetchConfig: false, ttlMs: 2000, refreshMs: 1500, idleStopMs: 1000 });
  assert.deepEqual(offline.config, { ttlMs: 2000, refreshMs: 1500, idleStopMs: 1000, auth: "none", maxFrameBytes: 4096, activities: ["typing", "thinking", "recording_audio", "recording_video", "uploading"], maxThreadsPerUser: null });
});

test("config fetch failures are retried with backoff", async (t) => {
  let calls = 0;
  const fetch = async () => {
    calls++;
    if (calls < 3) throw new Error("connection refused");
    return { ok: true, status: 200, json: async () => ({ ttl_ms: 5000, refresh_ms: 4000, idle_stop_ms: 3000, auth: "none" }) };
  };
  const { client, tick, states, errors } = await setup(t, { fetch });
  client.connect();
  await tick(10000);
  assert.equal(calls, 3);
  assert.deepEqual(states, ["connecting", "reconnecting", "connecting", "reconnecting", "connecting"]);
  assert.equal(errors.length, 2);
  assert.equal(FakeWebSocket.all.length, 1);
  client.close();
});

test("typing frames: start once, refresh, idle stop, sent, blur; only once joined", async (t) => {
  const { client, tick } = await setup(t);
  const room = client.join("42");
  const ws = await open(client);
  room.keystroke(); // before the join is acknowledged: held back
  assert.equal(ws.framesOf("typing_start").length, 0);
  ws.acceptJoin("42");
  assert.deepEqual(ws.framesOf("typing_start"), [{ type: "typing_start", room: "42" }], "announced on joined");
  for (let i = 0; i < 9; i++) {
    await tick(500);
    client.keystroke("42");
  }
  assert.equal(ws.framesOf("typing_start").length, 2, "a refresh at 4 s");
  await tick(3000);
  assert.deepEqual(ws.frames.at(-1), { type: "typing_stop", room: "42" }, "idle stop");
  client.keystroke("42");
  client.messageSent("42");
  client.keystroke("42");
  client.blur("42");
  assert.deepEqual(ws.frames.slice(-4).map((f) => f.type), ["typing_start", "typing_stop", "typing_start", "typing_stop"]);
  assert.deepEqual(room.stats, { keystrokes: 12, starts: 3, refreshes: 1, changes: 0, idleStops: 1, stops: 3 });
  client.close();
});

test("events update the room: typing_start, refresh, typing_stop, local expiry", async (t) => {
  const { client, tick } = await setup(t);
  const room = client.join("42");
  const ws = await open(client);
  ws.acceptJoin("42");
  const seen = [];
  client.on("change", (r, ts) => seen.push(`${r.id}:${ts.map((x) => x.user).join(",")}`));
  ws.receive({ type: "typing_start", room: "42", user: "alice", name: "Alice", ttl_ms: 5000 });
  ws.receive({ type: "typing_start", room: "42", user: "bob", ttl_ms: 5000 });
  ws.receive({ type: "typing_start", room: "other", user: "carol", ttl_ms: 5000 }); // not joined: ignored
  ws.receive({ type: "typing_stop", room: "42", user: "bob", reason: "stopped" });
  ws.receive("not json");
  ws.receive({ type: "typing_start", room: "42", user: "me", ttl_ms: 5000 }); // self: ignored
  assert.deepEqual(seen, ["42:alice", "42:alice,bob", "42:alice"]);
  await tick(5999);
  assert.deepEqual(room.typists, [{ user: "alice", name: "Alice" }]);
  await tick(1);
  assert.deepEqual(room.typists, [], "ttl_ms + 1 s grace without news: gone");
  client.close();
});

test("reconnect: backoff with jitter, rejoin every room, fresh snapshot, typing resumed", async (t) => {
  const { client, tick, states } = await setup(t);
  t.mock.method(Math, "random", () => 0.5);
  const a = client.join("a");
  const b = client.join("b");
  const ws1 = await open(client);
  ws1.acceptJoin("a", [{ user: "alice" }]);
  ws1.acceptJoin("b");
  a.keystroke();
  const delays = [];
  client.on("state", (ev) => ev.state === "reconnecting" && delays.push(ev.delayMs));
  ws1.drop(1006);
  assert.equal(a.state, "joining");
  await tick(375); // attempt 0: 250..500 ms, 375 with random 0.5
  const ws2 = FakeWebSocket.last;
  assert.notEqual(ws2, ws1);
  ws2.drop(1006); // refused again
  await tick(750);
  const ws3 = FakeWebSocket.last;
  assert.notEqual(ws3, ws2);
  ws3.open();
  assert.deepEqual(ws3.framesOf("join").map((f) => f.room), ["a", "b"], "every room rejoined");
  assert.deepEqual(a.typists, [{ user: "alice" }], "stale typists kept until the snapshot");
  ws3.acceptJoin("a", [{ user: "bob" }]);
  assert.deepEqual(a.typists, [{ user: "bob" }], "the snapshot replaces");
  assert.deepEqual(ws3.framesOf("typing_start"), [{ type: "typing_start", room: "a" }], "the burst still on is announced again");
  ws3.acceptJoin("b");
  assert.deepEqual(delays, [375, 750]);
  assert.deepEqual(states.slice(-4), ["connecting", "reconnecting", "connecting", "open"]);
  client.close();
});

test("backoff grows to the cap, jittered, and resets after a stable connection", async (t) => {
  for (let i = 0; i < 12; i++) {
    const lo = backoffDelay(i, 500, 30000, () => 0);
    const hi = backoffDelay(i, 500, 30000, () => 1);
    const ceiling = Math.min(30000, 500 * 2 ** i);
    assert.equal(lo, ceiling / 2);
    assert.equal(hi, ceiling);
  }
  const { client, tick } = await setup(t);
  t.mock.method(Math, "random", () => 1);
  const delays = [];
  client.on("state", (ev) => ev.state === "reconnecting" && delays.push(ev.delayMs));
  let ws = await open(client);
  for (let i = 0; i < 4; i++) {
    ws.drop(1006);
    await tick(delays.at(-1));
    ws = FakeWebSocket.last;
    ws.open();
  }
  assert.deepEqual(delays, [500, 1000, 2000, 4000]);
  await tick(5000); // stable for 5 s
  ws.drop(1001, "gateway shutting down");
  assert.deepEqual(delays.at(-1), 500, "back to the first step");
  client.close();
});

test("ping keepalive; a dead connection is dropped and replaced", async (t) => {
  const { client, tick } = await setup(t);
  const ws = await open(client);
  await tick(24999);
  assert.equal(ws.framesOf("ping").length, 0);
  await tick(1);
  const [ping] = ws.framesOf("ping");
  assert.ok(ping.id);
  ws.receive({ type: "pong", id: ping.id });
  await tick(25000);
  assert.equal(ws.framesOf("ping").length, 2);
  await tick(9999);
  assert.equal(ws.closed, null);
  await tick(1); // no answer for 10 s
  assert.deepEqual(ws.closed, { code: 4000, reason: "keepalive timeout" });
  assert.equal(client.state, "reconnecting");
  await tick(1000);
  assert.equal(FakeWebSocket.all.length, 2);
  client.close();
});

test("periodic resync every 10 s; the typing snapshot replaces", async (t) => {
  const { client, tick } = await setup(t);
  const room = client.join("42");
  const ws = await open(client);
  ws.acceptJoin("42", [{ user: "ghost" }]);
  await tick(10000);
  const syncs = ws.framesOf("sync");
  assert.equal(syncs.length, 1, "the first within 5..10 s");
  ws.receive({ type: "typing", room: "42", users: [{ user: "bob", name: "Bob" }], id: syncs[0].id });
  assert.deepEqual(room.typists, [{ user: "bob", name: "Bob" }]);
  await tick(10000);
  assert.equal(ws.framesOf("sync").length, 2);
  // Unasked snapshots (after the gateway resynced) replace too, and do not
  // answer the sync in flight.
  ws.receive({ type: "typing", room: "42", users: [] });
  assert.deepEqual(room.typists, []);
  assert.equal(room.sync(), false, "one sync per room in flight");
  assert.equal(ws.framesOf("sync").length, 2);
  ws.receive({ type: "typing", room: "42", users: [], id: ws.framesOf("sync")[1].id });
  assert.equal(room.sync(), true);
  assert.equal(ws.framesOf("sync").length, 3);
  // A refused sync (over the snapshot budget) is no longer in flight.
  ws.receive({ type: "error", code: "rate_limited", message: "too many snapshots", room: "42", id: ws.framesOf("sync")[2].id });
  assert.equal(room.sync(), true);
  // An unanswered one counts as lost after pongTimeoutMs.
  assert.equal(room.sync(), false);
  await tick(9999);
  assert.equal(ws.framesOf("sync").length, 4, "the periodic resync waits on the one in flight");
  ws.receive({ type: "pong" }); // keep the socket
  await tick(1);
  assert.equal(room.sync(), true);
  assert.equal(ws.framesOf("sync").length, 5);
  client.close();
});

test("join errors: retry when unavailable, give up when forbidden; not_joined rejoins", async (t) => {
  const { client, tick, errors } = await setup(t);
  t.mock.method(Math, "random", () => 0);
  const a = client.join("a");
  const f = client.join("secret");
  const ws = await open(client);
  const joinA = ws.framesOf("join").find((j) => j.room === "a");
  ws.receive({ type: "error", code: "unavailable", message: "retry", room: "a", id: joinA.id });
  const joinF = ws.framesOf("join").find((j) => j.room === "secret");
  const roomErrors = [];
  f.on("error", (e) => roomErrors.push(e.code));
  ws.receive({ type: "error", code: "forbidden", message: "no", room: "secret", id: joinF.id });
  assert.equal(f.state, "error");
  assert.deepEqual(roomErrors, ["forbidden"]);
  await tick(250);
  assert.equal(ws.framesOf("join").filter((j) => j.room === "a").length, 2, "retried");
  assert.equal(ws.framesOf("join").filter((j) => j.room === "secret").length, 1, "not retried");
  ws.acceptJoin("a");
  assert.equal(a.state, "joined");
  ws.receive({ type: "error", code: "not_joined", message: "join room a first", room: "a" });
  assert.equal(a.state, "joining");
  assert.equal(ws.framesOf("join").filter((j) => j.room === "a").length, 3);
  assert.equal(errors.length, 3, "every error frame reaches the client's error event");
  client.close();
});

test("an id-less rate_limited error retries the joins in flight, not the joined rooms", async (t) => {
  const { client, tick, errors } = await setup(t);
  t.mock.method(Math, "random", () => 0);
  const a = client.join("a");
  const b = client.join("b");
  const ws = await open(client);
  ws.acceptJoin("b");
  assert.equal(b.state, "joined");
  // The gateway dropped a's join over its inbound limit, undecoded.
  ws.receive({ type: "error", code: "rate_limited", message: "too many frames" });
  assert.equal(errors.length, 1);
  await tick(250);
  assert.equal(ws.framesOf("join").filter((j) => j.room === "a").length, 2, "a's join retried");
  assert.equal(ws.framesOf("join").filter((j) => j.room === "b").length, 1, "b is joined: not retried");
  ws.acceptJoin("a");
  assert.equal(a.state, "joined");
  client.close();
});

test("page hidden or closed stops typing; online reconnects at once", async (t) => {
  const { client, tick, win, doc } = await setup(t);
  const room = client.join("42");
  const ws = await open(client);
  ws.acceptJoin("42");
  room.keystroke();
  doc.visibilityState = "hidden";
  doc.dispatch("visibilitychange");
  assert.deepEqual(ws.frames.at(-1), { type: "typing_stop", room: "42" });
  doc.visibilityState = "visible";
  room.keystroke();
  win.dispatch("pagehide", { persisted: false });
  assert.deepEqual(ws.frames.slice(-2).map((f) => f.type), ["typing_start", "typing_stop"]);
  ws.drop(1006);
  assert.equal(client.state, "reconnecting");
  win.dispatch("online");
  await flush();
  assert.equal(client.state, "connecting");
  assert.equal(FakeWebSocket.all.length, 2);
  client.close();
  assert.equal(win.count("pagehide") + doc.count("visibilitychange") + win.count("online"), 0, "listeners removed");
  await tick(60000);
  assert.equal(FakeWebSocket.all.length, 2);
});

test("close(): typing_stop, close 1000, closed for good", async (t) => {
  const { client, tick, states } = await setup(t);
  const room = client.join("42");
  const ws = await open(client);
  ws.acceptJoin("42", [{ user: "alice" }]);
  room.keystroke();
  client.close();
  client.close();
  assert.deepEqual(ws.frames.at(-1), { type: "typing_stop", room: "42" });
  assert.deepEqual(ws.closed, { code: 1000, reason: "client closed" });
  assert.deepEqual(states, ["connecting", "open", "closed"]);
  await tick(60000);
  assert.equal(FakeWebSocket.all.length, 1);
  await assert.rejects(client.connect(), /closed/);
});

test("leave: typing_stop, leave frame, typists forgotten", async (t) => {
  const { client } = await setup(t);
  const room = client.join("42");
  const ws = await open(client);
  ws.acceptJoin("42", [{ user: "alice" }]);
  room.keystroke();
  room.leave();
  assert.deepEqual(ws.frames.slice(-2).map((f) => f.type), ["typing_stop", "leave"]);
  assert.deepEqual(room.typists, []);
  assert.equal(room.state, "left");
  assert.equal(client.room("42"), undefined);
  room.keystroke();
  assert.equal(ws.frames.at(-1).type, "leave", "a left room sends nothing");
  client.close();
});

test("outbound pacing stays under the gateway's limit (burst 20, then 10/s)", async (t) => {
  const { client, tick } = await setup(t);
  const rooms = Array.from({ length: 50 }, (_, i) => client.join(`r${i}`));
  const ws = await open(client);
  assert.equal(ws.framesOf("join").length, 20);
  await tick(1000);
  assert.equal(ws.framesOf("join").length, 30);
  await tick(2000);
  assert.equal(ws.framesOf("join").length, 50);
  assert.equal(new Set(ws.framesOf("join").map((j) => j.room)).size, 50);
  for (const r of rooms) ws.acceptJoin(r.id);
  assert.ok(rooms.every((r) => r.state === "joined"));
  client.close();
});

test("connect() helper resolves with an open client", async (t) => {
  FakeWebSocket.reset();
  const clock = new FakeClock();
  const p = connect({ url: "http://gw.test", user: "u", WebSocket: FakeWebSocket, fetch: configFetch(), stopOnHide: false, clock });
  await flush();
  FakeWebSocket.last.open();
  const client = await p;
  assert.equal(client.state, "open");
  client.close();
});

test("a stale joined (reply to an earlier join) is ignored", async () => {
  const clock = new FakeClock();
  FakeWebSocket.reset();
  const client = new Client({ url: "http://gw.test", user: "me", WebSocket: FakeWebSocket, fetch: configFetch(), stopOnHide: false, clock });
  client.connect();
  await clock.advance(0);
  const ws = FakeWebSocket.last;
  ws.open();
  const room = client.join("a");
  const first = ws.framesOf("join")[0].id;
  ws.receive({ type: "error", code: "not_joined", message: "x", room: "a" }); // ignored: not joined yet
  room._sendJoin(); // a second join in flight
  ws.receive({ type: "joined", room: "a", typing: [{ user: "old" }], id: first });
  assert.equal(room.state, "joining");
  ws.acceptJoin("a", [{ user: "new" }]);
  assert.equal(room.state, "joined");
  assert.deepEqual(room.typists, [{ user: "new" }]);
  client.close();
});

test("total: a cut joined or typing snapshot counts everyone; change events carry it", async (t) => {
  const { client } = await setup(t);
  const room = client.join("42");
  const ws = await open(client);
  const seen = [];
  room.on("change", (ts, total) => seen.push(`${ts.map((x) => x.user).join(",")}/${total}`));
  const fromClient = [];
  client.on("change", (r, ts, total) => fromClient.push(`${r.id}:${total}`));
  const join = ws.framesOf("join").pop();
  ws.receive({ type: "joined", room: "42", typing: [{ user: "a" }, { user: "b" }], total: 140, id: join.id });
  assert.deepEqual([room.typists.length, room.total], [2, 140]);
  ws.receive({ type: "typing_start", room: "42", user: "c", ttl_ms: 5000 }); // an unlisted typist's refresh
  assert.equal(room.total, 140);
  ws.receive({ type: "typing", room: "42", users: [{ user: "a" }], total: 3 });
  assert.deepEqual([room.typists.length, room.total], [1, 3]);
  ws.receive({ type: "typing", room: "42", users: [{ user: "a" }] }); // no total: the list is everyone
  assert.equal(room.total, 1);
  assert.deepEqual(seen, ["a,b/140", "a,b,c/140", "a/3", "a/1"]);
  assert.deepEqual(fromClient, ["42:140", "42:140", "42:3", "42:1"]);
  client.close();
});

// ---- back from the background: visible, online, wake ----

// A client with rooms a and b joined and c still joining; the periodic
// resync pushed far out so only the triggers sync.
async function backgroundSetup(t, opts = {}) {
  const s = await setup(t, { resyncMs: 600000, ...opts });
  const rooms = ["a", "b", "c"].map((id) => s.client.join(id));
  const ws = await open(s.client);
  ws.acceptJoin("a", [{ user: "alice" }]);
  ws.acceptJoin("b");
  const resyncs = [];
  s.client.on("resync", (ev) => resyncs.push(ev));
  return { ...s, rooms, ws, resyncs };
}

const syncRooms = (ws) => ws.framesOf("sync").map((f) => f.room);

test("visible: one sync per joined room at once, a ping, the snapshot replaces; hidden syncs nothing", async (t) => {
  const { client, doc, ws, rooms, resyncs } = await backgroundSetup(t);
  doc.visibilityState = "hidden";
  doc.dispatch("visibilitychange");
  assert.deepEqual(syncRooms(ws), [], "hidden: no sync");
  assert.equal(ws.framesOf("ping").length, 0);
  doc.visibilityState = "visible";
  doc.dispatch("visibilitychange");
  assert.deepEqual(syncRooms(ws), ["a", "b"], "the joined rooms; c gets its snapshot from its join");
  assert.deepEqual(resyncs, [{ reason: "visible", rooms: ["a", "b"] }]);
  assert.equal(ws.framesOf("ping").length, 1, "the connection is checked");
  const syncA = ws.framesOf("sync")[0];
  ws.receive({ type: "typing", room: "a", users: [], id: syncA.id });
  assert.deepEqual(rooms[0].typists, [], "alice stopped while we were away");
  ws.acceptJoin("c");
  assert.equal(rooms[2].state, "joined");
  client.close();
});

test("visible resyncs with stopOnHide: false too; the periodic resync restarts its period after it", async (t) => {
  const { client, tick, doc, ws } = await backgroundSetup(t, { resyncMs: 10000, stopOnHide: false });
  await tick(3000);
  const before = syncRooms(ws).length;
  doc.dispatch("visibilitychange"); // visibilityState stays "visible"
  const at = syncRooms(ws).length;
  assert.equal(at - before, 2);
  for (const f of ws.framesOf("sync")) ws.receive({ type: "typing", room: f.room, users: [], id: f.id });
  await tick(9999);
  assert.equal(syncRooms(ws).length, at, "no periodic sync within 10 s of the triggered one");
  await tick(1);
  assert.equal(syncRooms(ws).length, at + 2, "then every 10 s again");
  client.close();
});

test("online while open: resync and ping; a half-dead socket is dropped by the ping's timeout and rejoined", async (t) => {
  const { client, tick, win, ws, resyncs } = await backgroundSetup(t);
  win.dispatch("online");
  assert.deepEqual(syncRooms(ws), ["a", "b"]);
  assert.deepEqual(resyncs, [{ reason: "online", rooms: ["a", "b"] }]);
  assert.equal(ws.framesOf("ping").length, 1);
  await tick(10000); // no frame back: the link died while offline
  assert.deepEqual(ws.closed, { code: 4000, reason: "keepalive timeout" });
  assert.equal(client.state, "reconnecting");
  await tick(1000);
  const ws2 = FakeWebSocket.last;
  ws2.open();
  assert.deepEqual(ws2.framesOf("join").map((f) => f.room), ["a", "b", "c"], "rejoined: each join brings a snapshot");
  client.close();
});

test("wake: a timer far past its time (the machine slept) resyncs every room and pings; a short gap does not", async (t) => {
  const { client, clock, tick, ws, resyncs } = await backgroundSetup(t);
  clock.sleep(40000); // under max(2 × pingMs, 30 s) = 50 s
  await tick(25000); // the ping timer fires 40 s late
  assert.deepEqual(syncRooms(ws), []);
  assert.equal(ws.framesOf("ping").length, 1, "only the keepalive");
  ws.receive({ type: "pong" });
  clock.sleep(3_600_000);
  assert.deepEqual(syncRooms(ws), [], "nothing runs while asleep");
  await tick(25000); // the next ping timer fires an hour late
  assert.deepEqual(syncRooms(ws), ["a", "b"]);
  assert.deepEqual(resyncs, [{ reason: "wake", rooms: ["a", "b"] }]);
  assert.equal(ws.framesOf("ping").length, 2);
  client.close();
});

test("wake is detected by a room's resync timer too, and ignored while the page is hidden (throttled timers)", async (t) => {
  const { client, clock, tick, doc, ws, resyncs } = await backgroundSetup(t, { resyncMs: 10000, pingMs: 600000 });
  doc.visibilityState = "hidden";
  clock.sleep(3_600_000);
  await tick(10000); // both rooms' resync timers fire late while hidden
  assert.equal(resyncs.length, 0);
  assert.deepEqual(syncRooms(ws).sort(), ["a", "b"], "the periodic syncs only");
  for (const f of ws.framesOf("sync")) ws.receive({ type: "typing", room: f.room, users: [], id: f.id });
  doc.visibilityState = "visible";
  clock.sleep(3_600_000);
  await tick(10000);
  assert.deepEqual(resyncs, [{ reason: "wake", rooms: ["a", "b"] }], "one wake for both late timers");
  assert.equal(syncRooms(ws).length, 4, "one sync per room, not one per late timer");
  client.close();
});

test("coalescing: visible, online and wake together make one sync per room; one in flight is never doubled", async (t) => {
  const { client, clock, tick, doc, win, ws, resyncs } = await backgroundSetup(t);
  clock.sleep(3_600_000);
  await tick(25000); // the ping timer fires an hour late: wake
  doc.dispatch("visibilitychange"); // the lid opened: the page shows,
  win.dispatch("online"); // and the network is back
  assert.deepEqual(syncRooms(ws), ["a", "b"]);
  assert.deepEqual(resyncs.map((e) => e.reason), ["wake"]);
  assert.equal(ws.framesOf("ping").length, 1, "one ping in flight");
  ws.receive({ type: "pong" });
  // Answered, but within RESYNC_COALESCE_MS of the last sync: no burst.
  for (const f of ws.framesOf("sync")) ws.receive({ type: "typing", room: f.room, users: [], id: f.id });
  doc.dispatch("visibilitychange");
  assert.equal(syncRooms(ws).length, 2);
  // Unanswered for a while (in flight): not doubled.
  await tick(1000);
  doc.dispatch("visibilitychange");
  assert.equal(syncRooms(ws).length, 4, "a second later: synced again");
  await tick(2000);
  win.dispatch("online");
  assert.equal(syncRooms(ws).length, 4, "the syncs are still in flight");
  assert.deepEqual(resyncs.map((e) => e.reason), ["wake", "visible"]);
  client.close();
});

test("triggers while not open sync nothing: the joins on open bring the snapshots", async (t) => {
  const { client, tick, doc, win, ws, resyncs } = await backgroundSetup(t);
  t.mock.method(Math, "random", () => 0.5);
  ws.drop(1006);
  doc.dispatch("visibilitychange");
  assert.equal(client.state, "reconnecting");
  win.dispatch("online"); // reconnects at once
  assert.equal(client.state, "connecting");
  doc.dispatch("visibilitychange");
  await flush();
  const ws2 = FakeWebSocket.last;
  ws2.open();
  doc.dispatch("visibilitychange"); // open, but every room is joining
  assert.deepEqual(ws2.framesOf("join").map((f) => f.room), ["a", "b", "c"]);
  assert.deepEqual(syncRooms(ws2), []);
  assert.deepEqual(resyncs, []);
  await tick(0);
  client.close();
});

test("connect() without any WebSocket (Node 20, no option) fails at once naming the option", async () => {
  const saved = globalThis.WebSocket;
  delete globalThis.WebSocket;
  try {
    const client = new Client({ url: "http://gw.test/", user: "alice", fetchConfig: false });
    await assert.rejects(client.connect(), { name: "TypeError", message: /WebSocket option/ });
    assert.notEqual(client.state, "connecting");
  } finally {
    if (saved) globalThis.WebSocket = saved;
  }
});
