// Each example against a private stack (test/stack.js): a user types over
// the WebSocket, the example acts over NATS, and the effect is checked end
// to end. (a) and (b) run the example scripts as a platform team would;
// (c) runs the authoriser script beside a gateway with ELLIPSIS_AUTHZ=nats
// (with --hide: a hidden user's typing does not reach the joiner);
// (d) follows the events that the worker publishes with
// ELLIPSIS_NATS_EVENTS=true.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { connect } from "@nats-io/transport-node";

import { startStack, dial, natsURL } from "./stack.js";
import { roomToken, subjects, checkId, checkUserIds, parseAllow, parseHide, serveJoinAuthz, MAX_HIDE_TYPING_FROM } from "../src/index.js";
import { whoIsTyping } from "../src/who-is-typing.js";
import { followRoomEvents } from "../src/room-events.js";

const run = promisify(execFile);
const script = (name) => fileURLToPath(new URL(`../src/${name}`, import.meta.url));

let stack;
let nc;
before(async () => {
  stack = await startStack({ ELLIPSIS_NATS_EVENTS: "true" });
  nc = await connect({ servers: natsURL.split(","), timeout: 5000 });
});
after(async () => {
  if (nc) await nc.close();
  if (stack) await stack.stop();
});

const env = () => ({ ...process.env, ELLIPSIS_NATS_URL: natsURL, ELLIPSIS_SUBJECT_PREFIX: stack.prefix });

/** Alice and Bob in room; Alice types until Bob sees it. */
async function aliceTyping(room) {
  const alice = await dial(stack.wsURL, "alice", "Alice");
  const bob = await dial(stack.wsURL, "bob", "Bob");
  for (const u of [alice, bob]) assert.equal((await u.join(room)).type, "joined");
  alice.send({ type: "typing_start", room });
  await bob.until((f) => f.type === "typing_start" && f.user === "alice" && f.room === room);
  return { alice, bob, close: () => (alice.close(), bob.close()) };
}

test("ids and subject tokens", () => {
  assert.equal(roomToken("42"), "42");
  assert.equal(roomToken("room:42"), "room%3A42");
  assert.equal(roomToken("a.b*c>d"), "a%2Eb%2Ac%3Ed");
  assert.equal(roomToken("50%"), "50%25");
  assert.equal(roomToken("café ☕"), "caf%C3%A9%20%E2%98%95");
  assert.equal(roomToken("A-z_09"), "A-z_09");
  assert.equal(subjects("acme").room("room:42"), "acme.typing.v1.room.room%3A42");
  assert.equal(subjects().allRooms, "ellipsis.typing.v1.room.>");
  assert.throws(() => checkId("room", ""), /room: must be 1\.\.256 bytes, got 0/);
  assert.throws(() => checkId("user", "a\nb"), /user: must not contain control characters/);
  assert.deepEqual(parseAllow("alice=42,lobby;bob=lobby"), new Map([["alice", new Set(["42", "lobby"])], ["bob", new Set(["lobby"])]]));
});

test("(a) message posted → stop typing: Bob sees Alice's typing_stop", async () => {
  const room = "node a ☕ " + Date.now();
  const { bob, close } = await aliceTyping(room);
  try {
    const { stdout } = await run(process.execPath, [script("stop-typing.js"), room, "alice"], { env: env(), timeout: 20000 });
    assert.match(stdout, /stop sent/);
    const stop = await bob.until((f) => f.type === "typing_stop" && f.user === "alice");
    assert.equal(stop.reason, "stopped");
    assert.equal(stop.room, room);
  } finally {
    close();
  }
});

test("(a) a message posted in a thread stops its author there only; (b) lists the thread", async () => {
  const room = "node a thread " + Date.now();
  const { bob, close } = await aliceTyping(room);
  try {
    // Alice types in a thread too (as a threads-aware gateway would send it).
    nc.publish(subjects(stack.prefix).command, JSON.stringify({ v: 1, op: "start", room, thread: "t-1", user: "alice", name: "Alice", conn: "test-alice:1", seq: 1, ts_ms: Date.now() }));
    await nc.flush();
    await bob.until((f) => f.type === "typing_start" && f.user === "alice" && f.thread === "t-1");
    const who = await run(process.execPath, [script("who-is-typing.js"), room], { env: env(), timeout: 20000 });
    assert.equal(who.stdout, 'typing: alice (Alice)\ntotal: 1\ntyping in thread "t-1": alice (Alice)\ntotal in thread "t-1": 1\n');

    const { stdout } = await run(process.execPath, [script("stop-typing.js"), room, "alice", "t-1"], { env: env(), timeout: 20000 });
    assert.match(stdout, /stop sent: user "alice" in thread "t-1" of room/);
    const stop = await bob.until((f) => f.type === "typing_stop" && f.user === "alice");
    assert.equal(stop.thread, "t-1");
    assert.equal(stop.reason, "stopped");
    const snap = await whoIsTyping(nc, { prefix: stack.prefix, room });
    assert.deepEqual(snap, { room, users: [{ user: "alice", name: "Alice" }], total: 1, threads: [] });
  } finally {
    close();
  }
});

test("(a) an invalid id is refused, naming the field", async () => {
  await assert.rejects(run(process.execPath, [script("stop-typing.js"), "", "alice"], { env: env(), timeout: 20000 }), /room: must be 1\.\.256 bytes/);
});

test("(b) who is typing in room R: the snapshot lists Alice", async () => {
  const room = "node b:" + Date.now();
  assert.deepEqual(await whoIsTyping(nc, { prefix: stack.prefix, room }), { room, users: [], total: 0, threads: [] });
  const { close } = await aliceTyping(room);
  try {
    const { stdout } = await run(process.execPath, [script("who-is-typing.js"), room], { env: env(), timeout: 20000 });
    assert.equal(stdout, "typing: alice (Alice)\ntotal: 1\n");
    const snap = await whoIsTyping(nc, { prefix: stack.prefix, room });
    assert.deepEqual(snap, { room, users: [{ user: "alice", name: "Alice" }], total: 1, threads: [] });
  } finally {
    close();
  }
});

/** Starts a stack with ELLIPSIS_AUTHZ=nats and the join-authz script with args beside it, both stopped when t ends. */
async function startAuthz(t, args) {
  const authzStack = await startStack({ ELLIPSIS_AUTHZ: "nats" });
  t.after(() => authzStack.stop());
  const proc = spawn(process.execPath, [script("join-authz.js"), ...args], {
    env: { ...process.env, ELLIPSIS_NATS_URL: natsURL, ELLIPSIS_SUBJECT_PREFIX: authzStack.prefix },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = once(proc, "exit");
  t.after(async () => {
    if (proc.exitCode === null) proc.kill("SIGTERM");
    await exited;
  });
  let out = "";
  proc.stdout.setEncoding("utf8");
  await new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`join-authz did not start: ${out}`)), 20000);
    proc.stdout.on("data", (d) => {
      out += d;
      if (out.includes("authorising joins on")) {
        clearTimeout(timer);
        res();
      }
    });
    proc.on("exit", (code) => rej(new Error(`join-authz exited ${code}: ${out}`)));
  });
  return authzStack;
}

test("(c) join authoriser: the gateway lets Alice into her room and nowhere else", async (t) => {
  const authzStack = await startAuthz(t, ["alice=team:42"]);
  const alice = await dial(authzStack.wsURL, "alice", "Alice");
  const bob = await dial(authzStack.wsURL, "bob", "Bob");
  try {
    assert.equal((await alice.join("team:42")).type, "joined");
    assert.equal((await alice.join("public-hall")).type, "joined");
    const denied = await alice.join("team:7");
    assert.equal(denied.type, "error");
    assert.equal(denied.code, "forbidden");
    const bobDenied = await bob.join("team:42");
    assert.equal(bobDenied.code, "forbidden");
  } finally {
    alice.close();
    bob.close();
  }
});

// Bob's typing is hidden from Alice by the authoriser's reply: her joined
// snapshot leaves him out, and she gets none of his events, while Carol
// (no list) does. Carol sees Bob's stop before Dave's start is sent, and
// the gateway forwards a room's events in order, so Alice would have got
// Bob's stop before Dave's start.
test("(c) join authoriser --hide: a hidden user's typing does not reach the joining user", async (t) => {
  const authzStack = await startAuthz(t, ["", "--hide", "alice=bob,mallory"]);
  const room = "public-hall";
  const [bob, carol, dave] = await Promise.all(["bob", "carol", "dave"].map((u) => dial(authzStack.wsURL, u)));
  const users = [bob, carol, dave];
  try {
    for (const u of users) assert.equal((await u.join(room)).type, "joined");
    bob.send({ type: "typing_start", room });
    await carol.until((f) => f.type === "typing_start" && f.user === "bob");

    const alice = await dial(authzStack.wsURL, "alice", "Alice");
    users.push(alice);
    const joined = await alice.join(room);
    assert.equal(joined.type, "joined");
    assert.deepEqual([joined.typing, joined.total], [[], 0]);

    bob.send({ type: "typing_stop", room });
    await carol.until((f) => f.type === "typing_stop" && f.user === "bob");
    dave.send({ type: "typing_start", room });
    await carol.until((f) => f.type === "typing_start" && f.user === "dave");
    await alice.until((f) => f.type === "typing_start" && f.user === "dave");
    assert.deepEqual(alice.frames.filter((f) => f.user === "bob"), []);
  } finally {
    for (const u of users) u.close();
  }
});

test("parseHide and checkUserIds: the gateway's rules, errors naming the part", () => {
  assert.deepEqual(parseHide("alice=bob,carol;;dave=eve,;alice=mallory"), new Map([["alice", ["bob", "carol", "mallory"]], ["dave", ["eve"]]]));
  assert.deepEqual(parseHide(undefined), new Map());
  assert.throws(() => parseHide("alice"), /^Error: --hide "alice": no "=" between the user and the hidden users$/);
  assert.throws(() => parseHide("=bob"), /^Error: --hide "=bob": user: must be 1\.\.256 bytes, got 0$/);
  assert.throws(() => parseHide("alice=,"), /^Error: --hide "alice=,": no hidden users after "="$/);
  assert.throws(() => parseHide("alice=bob,c\u0007"), /^Error: --hide "alice": hide_typing_from\[1\]: must not contain control characters$/);
  assert.throws(() => parseHide("alice=" + "x".repeat(257)), /hide_typing_from\[0\]: must be 1\.\.256 bytes, got 257$/);
  assert.throws(() => parseHide("alice=" + "b,".repeat(MAX_HIDE_TYPING_FROM + 1)), /^Error: --hide "alice": hide_typing_from: at most 1000 user ids, got 1001$/);
  assert.equal(parseHide("alice=" + "b,".repeat(MAX_HIDE_TYPING_FROM)).get("alice").length, 1000);
  assert.throws(() => checkUserIds("hide_typing_from", "bob"), /hide_typing_from: must be an array of user ids/);
});

test("(c) join authoriser: an allow carries its list; a list the gateway would refuse is a denial", async (t) => {
  const lists = { r: ["bob", "carol"], empty: [], long: Array(1001).fill("u"), "bad-id": ["bob", ""], "not-array": "bob" };
  const sub = serveJoinAuthz(nc, { prefix: stack.prefix, policy: (user, room) => ({ allow: true, hideTypingFrom: lists[room] }) });
  t.after(() => sub.unsubscribe());
  const want = {
    r: { allow: true, hide_typing_from: ["bob", "carol"] },
    empty: { allow: true },
    long: { allow: false },
    "bad-id": { allow: false },
    "not-array": { allow: false },
  };
  for (const [room, reply] of Object.entries(want)) {
    const msg = await nc.request(subjects(stack.prefix).authzJoin, JSON.stringify({ v: 1, user: "alice", room }), { timeout: 10000 });
    assert.deepEqual(msg.json(), reply, room);
  }
});

test(
  "(d) room events on NATS: a follower of the room and one of every room see Alice start and stop",
  async (t) => {
    const room = "node d: café ☕ " + Date.now();
    const seen = { one: [], all: [] };
    const bad = [];
    const subs = [
      followRoomEvents(nc, { prefix: stack.prefix, room, onEvent: (ev) => seen.one.push(ev), onBad: (_d, e) => bad.push(e.message) }),
      followRoomEvents(nc, { prefix: stack.prefix, onEvent: (ev) => ev.room === room && seen.all.push(ev), onBad: (_d, e) => bad.push(e.message) }),
    ];
    t.after(() => subs.forEach((s) => s.unsubscribe()));
    await nc.flush();
    const alice = await dial(stack.wsURL, "alice", "Alice");
    t.after(() => alice.close());
    await alice.join(room);
    alice.send({ type: "typing_start", room });
    alice.send({ type: "typing_stop", room });
    const deadline = Date.now() + 10000;
    while (Date.now() < deadline && (seen.one.length < 2 || seen.all.length < 2)) await new Promise((r) => setTimeout(r, 20));
    for (const [name, evs] of Object.entries(seen)) {
      assert.equal(evs.length, 2, `${name}: ${JSON.stringify(evs)}`);
      assert.deepEqual(
        evs.map((e) => [e.type, e.room, e.user]),
        [
          ["typing_start", room, "alice"],
          ["typing_stop", room, "alice"],
        ],
      );
      assert.equal(evs[0].name, "Alice");
      assert.ok(evs[0].ttl_ms > 0 && evs[1].ts_ms > 0);
      assert.equal(evs[1].reason, "stopped");
    }
    assert.deepEqual(bad, []);
  },
);
