// Watching many rooms (docs/protocol.md, "Watching many rooms"): watch
// frames split under the gateway's frame limit, their answers merged,
// refused rooms, the re-watch after a reconnect, summaries, unwatch.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, DEFAULT_MAX_FRAME_BYTES } from "../../src/ellipsis.js";
import { packRooms } from "../../src/client.js";
import { flush, FakeWebSocket, FakeClock, configFetch, FakeTarget } from "./helpers.js";

const TIMING = { ttl_ms: 5000, refresh_ms: 4000, idle_stop_ms: 3000, auth: "none" };

// A client on a fake clock, WebSocket and fetch; `server` is added to the
// /v1/config answer.
function setup(t, opts = {}, server = {}) {
  const clock = new FakeClock();
  FakeWebSocket.reset();
  const client = new Client({
    url: "http://gw.test:8080",
    user: "me",
    WebSocket: FakeWebSocket,
    fetch: configFetch({ ...TIMING, ...server }),
    window: new FakeTarget(),
    document: new FakeTarget(),
    clock,
    ...opts,
  });
  const errors = [];
  client.on("error", (e) => errors.push(e));
  const summaries = [];
  client.on("summary", (s) => summaries.push(s));
  t.after(() => client.close());
  return { client, clock, tick: (ms) => clock.advance(ms), errors, summaries };
}

async function open(client) {
  const p = client.connect();
  await flush();
  const ws = FakeWebSocket.last;
  ws.open();
  await p;
  return ws;
}

const bytes = (s) => Buffer.byteLength(s, "utf8");
const rawWatches = (ws) => ws.sent.filter((s) => JSON.parse(s).type === "watch");

// Answers a watch frame: every room accepted but those in `refused` (room → code).
function answer(ws, frame, refused = {}, watched = 0) {
  ws.receive({
    type: "watching",
    id: frame.id,
    rooms: frame.rooms.filter((r) => !(r in refused)),
    refused: frame.rooms.filter((r) => r in refused).map((room) => ({ room, code: refused[room], message: `${refused[room]}: ${room}` })),
    watched,
  });
}

// A settled-or-not probe of a promise.
function probe(p) {
  const s = { done: false, value: undefined, error: undefined };
  p.then(
    (v) => Object.assign(s, { done: true, value: v }),
    (e) => Object.assign(s, { done: true, error: e }),
  );
  return s;
}

test("packRooms: every frame at most maxBytes in UTF-8 as JSON.stringify writes it, each as full as it can be", () => {
  const rooms = Array.from({ length: 400 }, (_, i) => (i % 7 === 0 ? `café ☕ "${i}"` : `room-${i}`));
  let n = 0;
  for (const max of [200, 1024, DEFAULT_MAX_FRAME_BYTES]) {
    const { frames, tooLong } = packRooms("watch", rooms, max, () => `c${++n}`);
    assert.deepEqual(tooLong, []);
    assert.deepEqual(frames.flatMap((f) => f.rooms), rooms, "every room once, in order");
    for (const [i, f] of frames.entries()) {
      const size = bytes(JSON.stringify(f));
      assert.ok(size <= max, `frame ${i}: ${size} > ${max}`);
      const next = frames[i + 1];
      if (next) assert.ok(size + 1 + bytes(JSON.stringify(next.rooms[0])) > max, `frame ${i} could take one more room`);
    }
    assert.equal(new Set(frames.map((f) => f.id)).size, frames.length, "one id per frame");
  }
  const big = "x".repeat(300);
  const { frames, tooLong } = packRooms("watch", ["a", big, "b"], 256, () => "c1");
  assert.deepEqual(tooLong, [big]);
  assert.deepEqual(frames.flatMap((f) => f.rooms), ["a", "b"]);
});

test("watch: split under the server's max_frame_bytes, the answers merged into one result", async (t) => {
  const { client } = setup(t, {}, { max_frame_bytes: 1024 });
  const ws = await open(client);
  assert.equal(client.config.maxFrameBytes, 1024);
  const rooms = Array.from({ length: 300 }, (_, i) => `room-${i} ☕`);
  const p = probe(client.watch([...rooms, rooms[0]])); // a duplicate is taken once
  await flush();
  const raw = rawWatches(ws);
  assert.ok(raw.length >= 4, `${raw.length} frames`);
  for (const s of raw) assert.ok(bytes(s) <= 1024, `a frame of ${bytes(s)} bytes`);
  const frames = ws.framesOf("watch");
  assert.deepEqual(frames.flatMap((f) => f.rooms), rooms);
  assert.deepEqual(client.watched, new Set(rooms));
  // Answered one by one (the gateway serves one at a time): resolved with the last.
  const last = frames.pop();
  let watched = 0;
  for (const f of frames) answer(ws, f, f === frames[1] ? { [f.rooms[2]]: "forbidden" } : {}, (watched += f.rooms.length - (f === frames[1] ? 1 : 0)));
  await flush();
  assert.equal(p.done, false, "waits for every frame's answer");
  answer(ws, last, { [last.rooms[0]]: "watch_limit" }, watched + last.rooms.length - 1);
  await flush();
  assert.equal(p.done, true);
  const refusedRooms = [frames[1].rooms[2], last.rooms[0]];
  assert.deepEqual(p.value.rooms, rooms.filter((r) => !refusedRooms.includes(r)));
  assert.deepEqual(p.value.refused, [
    { room: refusedRooms[0], code: "forbidden", message: `forbidden: ${refusedRooms[0]}` },
    { room: refusedRooms[1], code: "watch_limit", message: `watch_limit: ${refusedRooms[1]}` },
  ]);
  assert.equal(p.value.watched, 298);
  assert.equal(client.watched.size, 298, "refused rooms leave the watched set");
  assert.equal(client.watched.has(refusedRooms[0]), false);
  // Watching watched rooms again sends nothing and answers at once.
  const again = await client.watch([rooms[1], rooms[3]]);
  assert.deepEqual(again, { rooms: [rooms[1], rooms[3]], refused: [], watched: 298 });
  assert.equal(ws.framesOf("watch").length, raw.length);
});

test("watch: 4096 bytes without fetchConfig; a room too long for any frame is refused without being sent", async (t) => {
  const { client } = setup(t, { fetchConfig: false });
  assert.equal(client.config.maxFrameBytes, 4096);
  const ws = await open(client);
  const rooms = Array.from({ length: 1000 }, (_, i) => `r${i}`);
  const huge = "é".repeat(2100); // 4200 bytes
  const p = probe(client.watch([...rooms, huge]));
  await flush();
  const raw = rawWatches(ws);
  assert.equal(raw.length, 2);
  for (const s of raw) assert.ok(bytes(s) <= 4096);
  assert.ok(bytes(raw[0]) > 4096 - 8, "the first frame is full");
  assert.equal(client.watched.has(huge), false);
  for (const f of ws.framesOf("watch")) answer(ws, f, {}, 1000);
  await flush();
  assert.equal(p.value.rooms.length, 1000);
  assert.equal(p.value.refused.length, 1);
  assert.equal(p.value.refused[0].code, "bad_request");
  assert.match(p.value.refused[0].message, /4202 bytes does not fit in a watch frame of max_frame_bytes 4096/);
});

test("watch: ids are validated as join does; a closed client rejects", async (t) => {
  const { client } = setup(t);
  await assert.rejects(client.watch("42"), { name: "TypeError", message: /watch\(rooms\): rooms must be an array \(or a set\) of room ids, got string/ });
  await assert.rejects(client.watch(["a", ""]), { name: "TypeError", message: /rooms\[1\]: room id must be a non-empty string/ });
  await assert.rejects(client.watch(["a", 42]), { name: "TypeError", message: /rooms\[1\].*got 42/ });
  assert.throws(() => client.unwatch([null]), { name: "TypeError", message: /unwatch\(rooms\): rooms\[0\]/ });
  assert.deepEqual(client.watched, new Set(), "nothing was added");
  assert.deepEqual(await client.watch([]), { rooms: [], refused: [], watched: 0 });
  const ws = await open(client);
  const pending = client.watch(["a"]);
  client.close();
  await assert.rejects(pending, /closed before the gateway answered/);
  await assert.rejects(client.watch(["b"]), /watch\(\): the client is closed/);
  assert.equal(ws.framesOf("watch").length, 1);
});

test("watch before connect: sent on open, after the joins; watch frames are never coalesced in the pacing queue", async (t) => {
  const { client, tick } = setup(t, {}, { max_frame_bytes: 1024 });
  for (let i = 0; i < 25; i++) client.join(`j${i}`);
  const rooms = Array.from({ length: 200 }, (_, i) => `w${i}`);
  const p = probe(client.watch(rooms));
  const ws = await open(client);
  assert.equal(ws.framesOf("join").length, 20, "the burst");
  await tick(2000);
  assert.deepEqual(ws.frames.slice(0, 25).map((f) => f.type), Array(25).fill("join"));
  const frames = ws.framesOf("watch");
  assert.ok(frames.length >= 2);
  assert.deepEqual(frames.flatMap((f) => f.rooms), rooms, "every queued watch frame went out");
  for (const f of frames) answer(ws, f, {}, 200);
  await flush();
  assert.deepEqual(p.value.rooms, rooms);
});

test("refused unavailable / rate_limited: kept watched and sent again with backoff; told as an error when nobody awaits", async (t) => {
  const { client, tick, errors, summaries } = setup(t);
  t.mock.method(Math, "random", () => 0);
  const ws = await open(client);
  const p = probe(client.watch(["a", "b", "c"]));
  await flush();
  answer(ws, ws.framesOf("watch")[0], { b: "rate_limited", c: "unavailable" }, 1);
  await flush();
  assert.deepEqual(p.value.rooms, ["a"]);
  assert.deepEqual(p.value.refused.map((r) => r.code), ["rate_limited", "unavailable"]);
  assert.deepEqual(client.watched, new Set(["a", "b", "c"]), "still watched: retried");
  assert.deepEqual(errors, [], "the caller got them");
  await tick(249);
  assert.equal(ws.framesOf("watch").length, 1);
  await tick(1); // 250..500 ms with random 0
  const retry = ws.framesOf("watch")[1];
  assert.deepEqual(retry.rooms, ["b", "c"]);
  answer(ws, retry, { c: "unavailable" }, 2);
  assert.deepEqual(errors.map((e) => [e.type, e.code, e.room]), [["error", "unavailable", "c"]]);
  await tick(500); // the second step: 500..1000 ms
  const again = ws.framesOf("watch")[2];
  assert.deepEqual(again.rooms, ["c"]);
  answer(ws, again, {}, 3);
  ws.receive({ type: "summary", room: "c", typing: [], total: 0 });
  assert.deepEqual(summaries.map((s) => s.room), ["c"]);
  await tick(60000);
  assert.equal(ws.framesOf("watch").length, 3, "nothing left to retry");
});

test("an error frame answering a watch frame (an older gateway's unknown_type) refuses its rooms", async (t) => {
  const { client, errors } = setup(t);
  const ws = await open(client);
  const p = client.watch(["a", "b"]);
  await flush();
  const f = ws.framesOf("watch")[0];
  ws.receive({ type: "error", code: "unknown_type", message: 'unknown type "watch"', id: f.id });
  const res = await p;
  assert.deepEqual(res.rooms, []);
  assert.deepEqual(res.refused.map((r) => [r.room, r.code]), [["a", "unknown_type"], ["b", "unknown_type"]]);
  assert.equal(errors.length, 1, "the error frame itself, once");
  assert.deepEqual(client.watched, new Set());
});

test("an id-less rate_limited error (a frame dropped undecoded) sends the unanswered watch frames again", async (t) => {
  const { client, tick } = setup(t);
  t.mock.method(Math, "random", () => 0);
  const ws = await open(client);
  const p = probe(client.watch(["a", "b"]));
  await flush();
  ws.receive({ type: "error", code: "rate_limited", message: "too many frames" });
  await tick(250);
  const [first, second] = ws.framesOf("watch");
  assert.deepEqual(second.rooms, ["a", "b"]);
  answer(ws, first, {}, 2); // a stale answer of the first frame is not the retry's
  await flush();
  assert.equal(p.done, false);
  answer(ws, second, {}, 2);
  await flush();
  assert.deepEqual(p.value, { rooms: ["a", "b"], refused: [], watched: 2 });
});

test("summary event and client.summary: the last per room, frozen, typists with their activity; only for watched rooms", async (t) => {
  const { client, summaries } = setup(t);
  const ws = await open(client);
  const p = client.watch(["42", "43"]);
  await flush();
  answer(ws, ws.framesOf("watch")[0], {}, 2);
  await p;
  assert.equal(client.summary("42"), undefined, "none before the first");
  ws.receive({ type: "summary", room: "42", typing: [], total: 0 });
  ws.receive({
    type: "summary",
    room: "42",
    typing: [{ user: "alice", name: "Alice" }, { user: "bob", activity: "thinking", ttl_ms: 30000 }, { user: "cy", activity: "typing" }],
    total: 5,
  });
  ws.receive({ type: "summary", room: "99", typing: [{ user: "carol" }], total: 1 }); // not watched: ignored
  ws.receive({ type: "summary", room: "43", typing: "nope", total: 1 }); // malformed: ignored
  ws.receive({ type: "summary", room: "43", typing: [{ user: "dan", name: "" }, null, { name: "x" }] }); // no total: the list
  assert.deepEqual(
    summaries.map((s) => ({ ...s })),
    [
      { room: "42", typing: [], total: 0 },
      { room: "42", typing: [{ user: "alice", name: "Alice" }, { user: "bob", activity: "thinking" }, { user: "cy" }], total: 5 },
      { room: "43", typing: [{ user: "dan" }], total: 1 },
    ],
  );
  const s = client.summary("42");
  assert.equal(s, summaries[1], "the last one");
  assert.ok(Object.isFrozen(s) && Object.isFrozen(s.typing) && Object.isFrozen(s.typing[0]));
  assert.equal(client.summary("99"), undefined);
  assert.equal(client.rooms.size, 0, "watching joins nothing");
});

test("reconnect: every watched room re-watched after the rejoins; summaries kept until the new ones; a call in flight resolves on the new connection", async (t) => {
  const { client, tick, errors, summaries } = setup(t);
  t.mock.method(Math, "random", () => 0.5);
  const joined = client.join("j");
  const ws1 = await open(client);
  ws1.acceptJoin("j");
  const first = client.watch(["a", "b", "c"]);
  await flush();
  answer(ws1, ws1.framesOf("watch")[0], {}, 3);
  await first;
  ws1.receive({ type: "summary", room: "a", typing: [{ user: "alice", name: "Alice" }], total: 1 });
  ws1.receive({ type: "summary", room: "b", typing: [{ user: "bob" }], total: 1 });
  const inFlight = probe(client.watch(["d"]));
  await flush();
  assert.equal(ws1.framesOf("watch").length, 2);
  ws1.drop(1006);
  assert.equal(joined.state, "joining");
  assert.equal(client.summary("a").typing[0].name, "Alice", "kept while reconnecting");
  await tick(375);
  const ws2 = FakeWebSocket.last;
  assert.notEqual(ws2, ws1);
  ws2.open();
  assert.deepEqual(ws2.frames.map((f) => f.type), ["join", "watch"], "rejoin, then re-watch");
  const rewatch = ws2.framesOf("watch")[0];
  assert.deepEqual(rewatch.rooms, ["a", "b", "c", "d"]);
  assert.equal(inFlight.done, false);
  answer(ws2, rewatch, { b: "forbidden" }, 3); // b is no longer allowed
  await flush();
  assert.deepEqual(inFlight.value, { rooms: ["d"], refused: [], watched: 3 });
  assert.deepEqual(errors.map((e) => [e.code, e.room]), [["forbidden", "b"]], "nobody awaited b: told as an error");
  assert.equal(client.summary("b"), undefined, "a refused room's summary is dropped");
  assert.deepEqual(client.watched, new Set(["a", "c", "d"]));
  assert.equal(client.summary("a").typing[0].name, "Alice", "until the re-watch's first summary");
  ws2.receive({ type: "summary", room: "a", typing: [], total: 0 });
  assert.deepEqual(client.summary("a"), { room: "a", typing: [], total: 0 });
  assert.equal(summaries.length, 3);
  ws2.acceptJoin("j");
  assert.equal(joined.state, "joined");
});

test("unwatch: rooms, or all; summaries stop and are forgotten; a watch still waiting reports unwatched", async (t) => {
  const { client, tick, summaries } = setup(t, {}, { max_frame_bytes: 1024 });
  const ws = await open(client);
  const rooms = Array.from({ length: 150 }, (_, i) => `room ${i}`);
  const p = client.watch(rooms);
  await flush();
  for (const f of ws.framesOf("watch")) answer(ws, f, {}, 150);
  await p;
  ws.receive({ type: "summary", room: "room 1", typing: [{ user: "alice" }], total: 1 });
  client.unwatch(rooms.slice(0, 120).concat(["never watched"]));
  const unwatches = ws.framesOf("unwatch");
  assert.ok(unwatches.length >= 2, "split too");
  for (const s of ws.sent.filter((x) => JSON.parse(x).type === "unwatch")) assert.ok(bytes(s) <= 1024);
  assert.deepEqual(unwatches.flatMap((f) => f.rooms), rooms.slice(0, 120), "only rooms watched");
  assert.equal(client.summary("room 1"), undefined);
  assert.equal(client.watched.size, 30);
  ws.receive({ type: "unwatched", id: unwatches[0].id, rooms: unwatches[0].rooms, watched: 50 });
  ws.receive({ type: "summary", room: "room 1", typing: [{ user: "late" }], total: 1 }); // already on the wire: ignored
  assert.equal(summaries.length, 1);
  const waiting = client.watch(["x", "room 149"]);
  await flush();
  client.unwatch();
  assert.deepEqual(ws.frames.at(-1), { type: "unwatch", id: ws.frames.at(-1).id }, "no rooms: every room");
  assert.deepEqual(await waiting, {
    rooms: ["room 149"],
    refused: [{ room: "x", code: "unwatched", message: "ellipsis: unwatch() was called before the gateway answered" }],
    watched: 50,
  });
  assert.deepEqual(client.watched, new Set());
  const sent = ws.sent.length;
  client.unwatch(); // nothing watched: nothing sent
  client.unwatch(["room 149"]);
  assert.equal(ws.sent.length, sent);
  ws.drop(1006);
  await tick(1000);
  FakeWebSocket.last.open();
  assert.equal(FakeWebSocket.last.framesOf("watch").length, 0, "nothing to re-watch");
});
