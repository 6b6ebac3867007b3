// Threads and activities in the client (docs/protocol.md, "Threads and
// activities"): this user's typing per scope (the room itself and each
// thread, each with its own start, refresh and idle stop), activities on
// typing_start, the room's typists per scope from events and snapshots, the
// thread limit, join {typing: false}, and an older gateway that takes no
// thread. A real Client over a fake socket, fetch and clock.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "../../src/ellipsis.js";
import { flush, FakeWebSocket, FakeClock, configFetch, FakeTarget } from "./helpers.js";

// A gateway that takes threads (its /v1/config says max_threads_per_user).
const THREADED = {
  ttl_ms: 5000,
  refresh_ms: 4000,
  idle_stop_ms: 3000,
  auth: "none",
  activities: ["typing", "thinking", "recording_audio", "recording_video", "uploading", "reviewing"],
  max_threads_per_user: 5,
};

async function setup(t, config = THREADED, opts = {}) {
  const clock = new FakeClock();
  FakeWebSocket.reset();
  const client = new Client({
    url: "http://gw.test:8080",
    user: "me",
    name: "Me",
    WebSocket: FakeWebSocket,
    fetch: configFetch(config),
    window: new FakeTarget(),
    document: new FakeTarget(),
    clock,
    resyncMs: 0,
    ...opts,
  });
  const errors = [];
  client.on("error", (e) => errors.push(e));
  const p = client.connect();
  await flush();
  const ws = FakeWebSocket.last;
  ws.open();
  await p;
  t.after(() => client.close());
  return { client, clock, ws, errors, tick: (ms) => clock.advance(ms) };
}

// The typing frames sent, without their request ids (checked apart).
const typingFrames = (ws) => ws.frames.filter((f) => f.type.startsWith("typing_")).map(({ id, ...f }) => f);

test("keystroke({thread}): typing_start/typing_stop carry thread; the room itself and the thread each have their own burst", async (t) => {
  const { client, ws, tick } = await setup(t);
  const room = client.join("42");
  ws.acceptJoin("42");
  room.keystroke({ thread: "t-9" });
  room.keystroke();
  assert.deepEqual(typingFrames(ws), [
    { type: "typing_start", room: "42", thread: "t-9" },
    { type: "typing_start", room: "42" },
  ]);
  const threadStart = ws.framesOf("typing_start")[0];
  assert.match(threadStart.id, /^c\d+$/, "a thread's first start carries an id (for too_many_threads)");
  assert.equal(ws.framesOf("typing_start")[1].id, undefined, "the room's own start stays as before");
  assert.ok(room.typing && room.thread("t-9").typing);
  // Keys in the room only: the thread's burst idles out at 3 s, the room's goes on.
  for (let i = 0; i < 5; i++) {
    await tick(500);
    room.keystroke();
  }
  await tick(500);
  assert.deepEqual(typingFrames(ws).slice(2), [{ type: "typing_stop", room: "42", thread: "t-9" }], "the thread's idle stop, at 3 s");
  assert.ok(room.typing, "the room's burst is untouched");
  await tick(1000);
  assert.deepEqual(typingFrames(ws).slice(3), [{ type: "typing_start", room: "42" }], "the room's refresh at 4 s");
  assert.equal(room.thread("t-9").stats.idleStops, 1);
  assert.equal(room.stats.refreshes, 1);
  // messageSent in the thread stops the thread only.
  room.thread("t-9").keystroke();
  room.messageSent({ thread: "t-9" });
  assert.deepEqual(typingFrames(ws).slice(-2), [
    { type: "typing_start", room: "42", thread: "t-9" },
    { type: "typing_stop", room: "42", thread: "t-9" },
  ]);
  assert.ok(room.typing, "a post in the thread does not stop the room's burst");
  room.messageSent();
  assert.deepEqual(typingFrames(ws).at(-1), { type: "typing_stop", room: "42" });
  // client.keystroke(room, opts) and blur per scope.
  client.keystroke("42", { thread: "t-1" });
  client.blur("42", { thread: "t-1" });
  assert.deepEqual(typingFrames(ws).slice(-2), [
    { type: "typing_start", room: "42", thread: "t-1" },
    { type: "typing_stop", room: "42", thread: "t-1" },
  ]);
});

test("activities: sent on typing_start (absent for typing); a change while on is a start at once; startActivity has no idle stop", async (t) => {
  const { client, ws, tick } = await setup(t);
  const room = client.join("42");
  ws.acceptJoin("42");
  room.keystroke({ activity: "typing" });
  assert.deepEqual(typingFrames(ws), [{ type: "typing_start", room: "42" }], "typing is the default: no activity field");
  room.keystroke({ activity: "thinking" });
  assert.deepEqual(typingFrames(ws).at(-1), { type: "typing_start", room: "42", activity: "thinking" }, "a change: at once");
  room.keystroke({ activity: "thinking" });
  assert.equal(typingFrames(ws).length, 2, "the same activity again: nothing");
  assert.equal(room.stats.changes, 1);
  for (let i = 0; i < 4; i++) {
    await tick(1000);
    room.keystroke({ activity: "thinking" });
  }
  assert.deepEqual(typingFrames(ws).at(-1), { type: "typing_start", room: "42", activity: "thinking" }, "the refresh, 4 s after the change, keeps the activity");
  assert.equal(typingFrames(ws).length, 3);
  await tick(3000);
  assert.deepEqual(typingFrames(ws).at(-1), { type: "typing_stop", room: "42" }, "idle stop 3 s after the last key");

  // A recording: on until stopped, refreshed, never idle-stopped.
  const th = room.thread("t-9");
  th.startActivity("recording_audio");
  assert.deepEqual(typingFrames(ws).at(-1), { type: "typing_start", room: "42", thread: "t-9", activity: "recording_audio" });
  const before = typingFrames(ws).length;
  await tick(12_000);
  const during = typingFrames(ws).slice(before);
  assert.equal(during.length, 3, "three refreshes in 12 s, no stop");
  assert.ok(during.every((f) => f.type === "typing_start" && f.activity === "recording_audio"));
  assert.ok(th.typing);
  // A keystroke afterwards: typing again, with the idle stop.
  th.keystroke();
  assert.deepEqual(typingFrames(ws).at(-1), { type: "typing_start", room: "42", thread: "t-9" }, "back to typing: at once, no activity");
  await tick(3000);
  assert.deepEqual(typingFrames(ws).at(-1), { type: "typing_stop", room: "42", thread: "t-9" });
  // An operator's activity the gateway lists is taken; one it does not list, or a bad form, throws.
  room.keystroke({ activity: "reviewing" });
  assert.deepEqual(typingFrames(ws).at(-1), { type: "typing_start", room: "42", activity: "reviewing" });
  assert.throws(() => room.keystroke({ activity: "dancing" }), (e) => e instanceof RangeError && /activity "dancing" is not one the gateway accepts \(typing, thinking/.test(e.message));
  assert.throws(() => room.keystroke({ activity: "Thinking!" }), (e) => e instanceof TypeError && /activity must be 1\.\.32 characters of a-z and _/.test(e.message));
  assert.throws(() => room.startActivity(), /activity is required/);
  assert.throws(() => room.keystroke({ thread: "" }), (e) => e instanceof TypeError && /keystroke: thread must be a non-empty string/.test(e.message));
  assert.throws(() => room.thread(42), TypeError);
  assert.throws(() => room.keystroke("t-9"), /options must be an object/);
});

test("typists per scope: an event for a thread never changes the room's list; threads and thread handles", async (t) => {
  const { client, ws } = await setup(t);
  const room = client.join("42");
  ws.acceptJoin("42");
  const roomChanges = [];
  const threadEvents = [];
  const clientThreads = [];
  room.on("change", (ts, total) => roomChanges.push([ts.map((x) => x.user).join(","), total]));
  room.on("threads", (threads) => threadEvents.push(threads.map((x) => `${x.thread}:${x.typists.map((u) => u.user + (u.activity ? "/" + u.activity : "")).join(",")}`).join(" ")));
  client.on("threads", (r, threads) => clientThreads.push([r.id, threads.length]));
  const t9 = room.thread("t-9");
  const t9changes = [];
  t9.on("change", (ts, total) => t9changes.push([ts.map((x) => x.user).join(","), total]));

  ws.receive({ type: "typing_start", room: "42", thread: "t-9", user: "alice", name: "Alice", ttl_ms: 5000 });
  ws.receive({ type: "typing_start", room: "42", thread: "t-1", user: "bot", name: "Assistant", activity: "thinking", ttl_ms: 30000 });
  ws.receive({ type: "typing_start", room: "42", user: "bob", name: "Bob", ttl_ms: 5000 });
  assert.deepEqual(room.typists, [{ user: "bob", name: "Bob" }], "the room itself: Bob only");
  assert.deepEqual(roomChanges, [["bob", 1]]);
  assert.deepEqual(t9.typists, [{ user: "alice", name: "Alice" }]);
  assert.deepEqual(t9changes, [["alice", 1]]);
  assert.deepEqual(room.threads, [
    { thread: "t-9", typists: [{ user: "alice", name: "Alice" }], total: 1 },
    { thread: "t-1", typists: [{ user: "bot", name: "Assistant", activity: "thinking" }], total: 1 },
  ]);
  assert.deepEqual(threadEvents, ["t-9:alice", "t-9:alice t-1:bot/thinking"]);
  assert.deepEqual(clientThreads, [["42", 1], ["42", 2]]);
  assert.deepEqual(client.typists("42", { thread: "t-1" }), [{ user: "bot", name: "Assistant", activity: "thinking" }]);
  // An activity change is a change; a stop in a thread leaves the room alone.
  ws.receive({ type: "typing_start", room: "42", thread: "t-9", user: "alice", name: "Alice", activity: "uploading", ttl_ms: 5000 });
  assert.deepEqual(t9.typists, [{ user: "alice", name: "Alice", activity: "uploading" }]);
  ws.receive({ type: "typing_stop", room: "42", thread: "t-9", user: "alice", reason: "stopped" });
  ws.receive({ type: "typing_stop", room: "42", thread: "t-7", user: "alice", reason: "stopped" }); // a thread nobody types in
  assert.deepEqual(t9.typists, []);
  assert.equal(t9.total, 0);
  assert.deepEqual(room.typists, [{ user: "bob", name: "Bob" }]);
  assert.deepEqual(roomChanges, [["bob", 1]], "no room change for any thread event");
  assert.deepEqual(room.threads.map((x) => x.thread), ["t-1"]);
  assert.equal(room.thread("t-9"), t9, "the same handle for the same id");
  // The room's stop of bob does not touch the threads.
  ws.receive({ type: "typing_stop", room: "42", user: "bob", reason: "stopped" });
  assert.deepEqual(room.threads.map((x) => x.thread), ["t-1"]);
  // Self is filtered in threads too.
  ws.receive({ type: "typing_start", room: "42", thread: "t-1", user: "me", ttl_ms: 5000 });
  assert.deepEqual(room.threads[0].typists.map((x) => x.user), ["bot"]);
});

test("expiry per entry: a service's start with ttl_ms 30 s stays 31 s; a snapshot never shortens it", async (t) => {
  const { client, ws, tick } = await setup(t);
  const room = client.join("42");
  ws.acceptJoin("42");
  ws.receive({ type: "typing_start", room: "42", thread: "t-1", user: "bot", name: "Assistant", activity: "thinking", ttl_ms: 30000 });
  ws.receive({ type: "typing_start", room: "42", thread: "t-1", user: "alice", ttl_ms: 5000 });
  await tick(10_000);
  assert.deepEqual(room.thread("t-1").typists.map((x) => x.user), ["bot"], "alice expired at 6 s, the bot lives on");
  // A snapshot listing the bot (no ttl_ms on snapshot entries) keeps its 31 s.
  ws.receive({ type: "typing", room: "42", users: [], total: 0, threads: [{ thread: "t-1", users: [{ user: "bot", name: "Assistant", activity: "thinking" }], total: 1 }] });
  await tick(20_999);
  assert.deepEqual(room.thread("t-1").typists.map((x) => x.user), ["bot"], "still there at 30.999 s");
  await tick(1);
  assert.deepEqual(room.thread("t-1").typists, [], "gone at ttl_ms + 1 s grace");
  // A typist first seen in a snapshot lives the standard ttl + grace from it.
  ws.receive({ type: "typing", room: "42", users: [{ user: "carol" }], total: 1 });
  await tick(5999);
  assert.deepEqual(room.typists, [{ user: "carol" }]);
  await tick(1);
  assert.deepEqual(room.typists, []);
});

test("snapshots: joined and typing replace every scope; a thread not listed has nobody typing", async (t) => {
  const { client, ws } = await setup(t);
  const room = client.join("42");
  const threadsSeen = [];
  room.on("threads", (threads) => threadsSeen.push(threads.map((x) => `${x.thread}:${x.total}`).join(" ")));
  ws.receive({
    type: "joined",
    room: "42",
    id: ws.framesOf("join")[0].id,
    typing: [{ user: "bob", name: "Bob" }],
    total: 1,
    threads: [
      { thread: "t-1", users: [{ user: "bot", name: "Assistant", activity: "thinking" }], total: 1 },
      { thread: "t-2", users: [{ user: "alice" }], total: 140 },
    ],
  });
  assert.deepEqual(room.typists, [{ user: "bob", name: "Bob" }]);
  assert.equal(room.total, 1);
  assert.deepEqual(room.threads, [
    { thread: "t-1", typists: [{ user: "bot", name: "Assistant", activity: "thinking" }], total: 1 },
    { thread: "t-2", typists: [{ user: "alice" }], total: 140 },
  ], "each thread with its own total (t-2's snapshot was cut)");
  // A resync without t-2: it has nobody typing now.
  ws.receive({ type: "typing", room: "42", users: [], total: 0, threads: [{ thread: "t-1", users: [{ user: "bot", name: "Assistant", activity: "thinking" }], total: 1 }] });
  assert.deepEqual(room.threads.map((x) => x.thread), ["t-1"]);
  assert.deepEqual(room.typists, []);
  // No `threads` at all (absent when no thread has a typist): every thread is empty.
  ws.receive({ type: "typing", room: "42", users: [{ user: "bob" }], total: 1 });
  assert.deepEqual(room.threads, []);
  assert.deepEqual(room.typists, [{ user: "bob" }]);
  assert.deepEqual(threadsSeen, ["t-1:1 t-2:140", "t-1:1", ""]);
  // Malformed thread entries are skipped.
  ws.receive({ type: "typing", room: "42", users: [], total: 0, threads: [null, { thread: "" }, { thread: 7 }, { thread: "t-3" }] });
  assert.deepEqual(room.threads, [], "t-3 listed without users: nobody");
});

test("an older gateway (no max_threads_per_user): thread frames are not sent, its room-only snapshots leave thread typists to events", async (t) => {
  const { client, ws, tick } = await setup(t, { ttl_ms: 5000, refresh_ms: 4000, idle_stop_ms: 3000, auth: "none" });
  assert.equal(client.config.maxThreadsPerUser, null);
  const room = client.join("42");
  ws.acceptJoin("42");
  room.keystroke({ thread: "t-9" });
  room.keystroke({ activity: "dancing" }); // an older gateway lists no activities: any well-formed one goes
  assert.deepEqual(typingFrames(ws), [{ type: "typing_start", room: "42", activity: "dancing" }], "no thread frame: it would show in the room");
  assert.ok(room.thread("t-9").typing, "the burst runs locally all the same");
  // A service typing in a thread reaches us through events; the room-only snapshot keeps it.
  ws.receive({ type: "typing_start", room: "42", thread: "t-1", user: "bot", activity: "thinking", ttl_ms: 5000 });
  ws.receive({ type: "typing", room: "42", users: [{ user: "bob" }], total: 1 });
  assert.deepEqual(room.threads.map((x) => x.thread), ["t-1"]);
  assert.deepEqual(room.typists, [{ user: "bob" }]);
  await tick(6000);
  assert.deepEqual(room.threads, [], "local expiry ends it");
});

test("fetchConfig: false: thread frames are sent as given, and a snapshot with threads makes absent ones mean nobody", async (t) => {
  const clock = new FakeClock();
  FakeWebSocket.reset();
  const client = new Client({ url: "http://gw.test", user: "me", WebSocket: FakeWebSocket, fetchConfig: false, clock, resyncMs: 0, window: new FakeTarget(), document: new FakeTarget() });
  t.after(() => client.close());
  const p = client.connect();
  await flush();
  const ws = FakeWebSocket.last;
  ws.open();
  await p;
  const room = client.join("42");
  ws.acceptJoin("42");
  room.keystroke({ thread: "t-9" });
  assert.deepEqual(typingFrames(ws), [{ type: "typing_start", room: "42", thread: "t-9" }]);
  ws.receive({ type: "typing_start", room: "42", thread: "t-1", user: "bot", ttl_ms: 5000 });
  ws.receive({ type: "typing", room: "42", users: [], total: 0 });
  assert.equal(room.threads.length, 1, "unknown gateway, no threads seen: kept");
  ws.receive({ type: "typing", room: "42", users: [], total: 0, threads: [{ thread: "t-1", users: [{ user: "bot" }], total: 1 }] });
  ws.receive({ type: "typing", room: "42", users: [], total: 0 });
  assert.deepEqual(room.threads, [], "this gateway lists threads: absent means nobody");
});

test("a rejoin announces every burst still on, each in its scope with its activity", async (t) => {
  const { client, ws: ws1, tick } = await setup(t);
  t.mock.method(Math, "random", () => 0.5);
  const room = client.join("42");
  ws1.acceptJoin("42");
  room.keystroke({ thread: "t-9", activity: "thinking" });
  room.keystroke();
  ws1.drop(1006);
  await tick(375);
  const ws2 = FakeWebSocket.last;
  assert.notEqual(ws2, ws1);
  ws2.open();
  assert.deepEqual(typingFrames(ws2), [], "nothing before joined");
  ws2.acceptJoin("42");
  assert.deepEqual(typingFrames(ws2), [
    { type: "typing_start", room: "42" },
    { type: "typing_start", room: "42", thread: "t-9", activity: "thinking" },
  ]);
});

test("max_threads_per_user: a start in one thread more is not sent, told once as too_many_threads, until a thread's burst ends", async (t) => {
  const { client, ws, errors } = await setup(t, { ...THREADED, max_threads_per_user: 2 });
  const room = client.join("42");
  ws.acceptJoin("42");
  const roomErrors = [];
  room.on("error", (e) => roomErrors.push(e));
  room.keystroke({ thread: "a" });
  room.keystroke({ thread: "b" });
  room.keystroke(); // the room itself never counts
  room.keystroke({ thread: "c" });
  room.keystroke({ thread: "c" });
  assert.deepEqual(typingFrames(ws).map((f) => f.thread ?? "-"), ["a", "b", "-"]);
  assert.equal(roomErrors.length, 1, "told once");
  assert.deepEqual({ ...roomErrors[0], message: undefined }, { type: "error", code: "too_many_threads", room: "42", thread: "c", message: undefined });
  assert.match(roomErrors[0].message, /types in 2 threads of room "42" already \(max_threads_per_user 2\)/);
  assert.equal(errors.length, 1, "the client's error event too");
  assert.ok(!room.thread("c").typing);
  room.messageSent({ thread: "a" });
  room.keystroke({ thread: "c" });
  assert.deepEqual(typingFrames(ws).slice(-2), [{ type: "typing_stop", room: "42", thread: "a" }, { type: "typing_start", room: "42", thread: "c" }]);
});

test("the gateway's too_many_threads (answering a thread start's id) ends that burst here, names the thread, and keeps it off", async (t) => {
  const { client, ws, tick } = await setup(t);
  const room = client.join("42");
  ws.acceptJoin("42");
  const roomErrors = [];
  room.on("error", (e) => roomErrors.push(e));
  room.keystroke({ thread: "z" });
  const start = ws.framesOf("typing_start").at(-1);
  ws.receive({ type: "error", code: "too_many_threads", message: "thread: this connection types in 5 threads of room 42 already", room: "42", id: start.id });
  assert.equal(roomErrors.length, 1);
  assert.equal(roomErrors[0].thread, "z");
  assert.ok(!room.thread("z").typing);
  const sent = ws.sent.length;
  room.keystroke({ thread: "z" });
  await tick(10_000);
  assert.equal(ws.sent.length, sent, "no start, no refresh, no stop for the refused thread");
  // Another thread's burst ends: z may try again.
  room.keystroke({ thread: "y" });
  room.messageSent({ thread: "y" });
  room.keystroke({ thread: "z" });
  assert.deepEqual(typingFrames(ws).at(-1), { type: "typing_start", room: "42", thread: "z" });
});

test("join(room, {typing: false}): the join says so, typing events and snapshots are ignored, no resync; own typing goes out", async (t) => {
  const { client, ws, tick } = await setup(t, THREADED, { resyncMs: 1000 });
  const room = client.join("quiet", { typing: false });
  assert.equal(room.receivesTyping, false);
  const join = ws.framesOf("join").at(-1);
  assert.deepEqual(join, { type: "join", room: "quiet", id: join.id, typing: false });
  ws.receive({ type: "joined", room: "quiet", id: join.id, typing: [{ user: "bob" }], total: 1 });
  ws.receive({ type: "typing_start", room: "quiet", user: "alice", ttl_ms: 5000 });
  ws.receive({ type: "typing_start", room: "quiet", thread: "t", user: "alice", ttl_ms: 5000 });
  assert.deepEqual(room.typists, []);
  assert.deepEqual(room.threads, []);
  assert.equal(room.sync(), false);
  await tick(5000);
  assert.equal(ws.framesOf("sync").length, 0, "no periodic resync");
  room.keystroke({ thread: "t" });
  assert.deepEqual(typingFrames(ws).at(-1), { type: "typing_start", room: "quiet", thread: "t" });
  // The same room again: without options it is returned as it is; another typing throws.
  assert.equal(client.join("quiet"), room);
  assert.equal(client.join("quiet", { typing: false }), room);
  assert.throws(() => client.join("quiet", { typing: true }), /joined with typing: false; leave\(\) it before joining with typing: true/);
  assert.throws(() => client.join("x", { typing: "no" }), (e) => e instanceof TypeError && /typing must be true or false, got "no"/.test(e.message));
  // A room joined the usual way sends no typing field.
  client.join("loud");
  assert.deepEqual(Object.keys(ws.framesOf("join").at(-1)).sort(), ["id", "room", "type"]);
});

test("pacing: a queued typing frame is replaced per scope, not across the room and its threads", async (t) => {
  const { client, ws } = await setup(t, THREADED, { frameBurst: 1, maxFramesPerSecond: 1 });
  const room = client.join("42");
  ws.acceptJoin("42");
  const before = ws.sent.length;
  room.keystroke({ thread: "t" }); // queued (the join took the one token)
  room.keystroke();
  room.messageSent({ thread: "t" }); // replaces the thread's queued start, not the room's
  await client._clock.advance(2500);
  const after = ws.frames.slice(before).map(({ id, ...f }) => f);
  assert.deepEqual(after, [{ type: "typing_stop", room: "42", thread: "t" }, { type: "typing_start", room: "42" }]);
});

test("leave and stopTyping end every scope; room.stop(reason) the room itself only", async (t) => {
  const { client, ws } = await setup(t);
  const room = client.join("42");
  ws.acceptJoin("42");
  room.keystroke({ thread: "t" });
  room.keystroke();
  room.stop();
  assert.deepEqual(typingFrames(ws).at(-1), { type: "typing_stop", room: "42" });
  assert.ok(room.thread("t").typing, "the thread's burst goes on");
  room.stop({ thread: "t", reason: "sent" });
  assert.ok(!room.thread("t").typing);
  room.keystroke({ thread: "t" });
  room.keystroke();
  client.stopTyping("hidden");
  assert.deepEqual(typingFrames(ws).slice(-2), [{ type: "typing_stop", room: "42" }, { type: "typing_stop", room: "42", thread: "t" }]);
  room.keystroke({ thread: "t" });
  ws.receive({ type: "typing_start", room: "42", thread: "u", user: "alice", ttl_ms: 5000 });
  room.leave();
  assert.deepEqual(ws.frames.slice(-2).map(({ id, ...f }) => f), [{ type: "typing_stop", room: "42", thread: "t" }, { type: "leave", room: "42" }]);
  assert.deepEqual(room.threads, []);
});

test("thread scopes nobody types in are forgotten (a busy room's threads come and go); handles stay", async (t) => {
  const { client, ws } = await setup(t);
  const room = client.join("42");
  ws.acceptJoin("42");
  for (let i = 0; i < 50; i++) {
    ws.receive({ type: "typing_start", room: "42", thread: `t${i}`, user: "alice", ttl_ms: 5000 });
    ws.receive({ type: "typing_stop", room: "42", thread: `t${i}`, user: "alice", reason: "stopped" });
  }
  assert.equal(room._scopes.size, 1, "only the room itself is kept");
  room.keystroke({ thread: "mine" });
  room.messageSent({ thread: "mine" });
  await flush();
  assert.equal(room._scopes.size, 1, "own bursts ended: forgotten too");
  const h = room.thread("kept");
  ws.receive({ type: "typing_start", room: "42", thread: "kept", user: "alice", ttl_ms: 5000 });
  ws.receive({ type: "typing_stop", room: "42", thread: "kept", user: "alice", reason: "stopped" });
  assert.equal(room._scopes.size, 2, "a thread with a handle keeps its scope");
  assert.deepEqual(h.typists, []);
});

test("a joined typist with ttl_ms (an agent's own ttl) stays shown past the standard ttl, in the room and in a thread", async (t) => {
  const { client, ws, tick } = await setup(t);
  const room = client.join("42");
  const agent = { user: "bot", name: "Assistant", activity: "thinking", ttl_ms: 30000 };
  ws.receive({
    type: "joined",
    room: "42",
    id: ws.framesOf("join")[0].id,
    typing: [agent, { user: "bob" }],
    total: 2,
    threads: [{ thread: "t-9", users: [agent], total: 1 }],
  });
  await tick(6000);
  assert.deepEqual(room.typists, [{ user: "bot", name: "Assistant", activity: "thinking" }], "bob (no ttl_ms) expired at ttl + grace");
  assert.deepEqual(room.threads.map((x) => x.thread), ["t-9"]);
  // The agent's refresh (every 15 s) keeps it.
  await tick(9000);
  ws.receive({ type: "typing_start", room: "42", user: "bot", name: "Assistant", activity: "thinking", ttl_ms: 30000 });
  await tick(20000);
  assert.deepEqual(room.typists.map((x) => x.user), ["bot"], "35 s after joined, 20 s after the refresh");
  assert.deepEqual(room.threads, [], "the thread's entry, not refreshed, ended 31 s after joined");
  await tick(11000);
  assert.deepEqual(room.typists, []);
});
