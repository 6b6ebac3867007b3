// (e) The agent that thinks (src/agent.js) against a private stack
// (test/stack.js): a member of the room sees it start thinking in its
// scope, a snapshot while it works lists it there, and its stop follows
// the reply (or a signal, for the script).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { connect } from "@nats-io/transport-node";

import { startStack, dial, natsURL } from "./stack.js";
import { createAgent } from "../src/agent.js";
import { whoIsTyping } from "../src/who-is-typing.js";

const script = fileURLToPath(new URL("../src/agent.js", import.meta.url));

let stack;
let nc;
before(async () => {
  stack = await startStack();
  nc = await connect({ servers: natsURL.split(","), timeout: 5000 });
});
after(async () => {
  if (nc) await nc.close();
  if (stack) await stack.stop();
});

/** Alice, joined to room. */
async function watcher(t, room) {
  const alice = await dial(stack.wsURL, "alice", "Alice");
  t.after(() => alice.close());
  assert.equal((await alice.join(room)).type, "joined");
  return alice;
}

const agentOf = (t, opts = {}) => createAgent(nc, { prefix: stack.prefix, onRefreshError: (s, err) => assert.fail(`refresh in ${JSON.stringify(s)}: ${err.message}`), ...opts });

test("(e) the agent thinks in a thread, is listed under threads, and stops there after its reply", async (t) => {
  const room = "node e ☕ " + Date.now();
  const thread = "t-9";
  const alice = await watcher(t, room);
  const agent = agentOf(t);
  let release;
  const released = new Promise((r) => (release = r));
  let replied;
  const replying = new Promise((r) => (replied = r));
  t.after(() => release()); // a failed assertion below must not leave the answer (and its refreshes) running
  const answered = agent.answer({ room, thread }, {
    thinkMs: 50,
    reply: async (scope) => {
      replied(scope);
      await released;
    },
  });

  const start = await alice.until((f) => f.type === "typing_start" && f.user === "assistant");
  assert.equal(start.room, room);
  assert.equal(start.thread, thread);
  assert.equal(start.activity, "thinking");
  assert.equal(start.name, "Assistant");
  assert.equal(start.ttl_ms, 30000);
  assert.deepEqual(await replying, { room, thread });
  // Still shown while the reply is being posted.
  const snap = await whoIsTyping(nc, { prefix: stack.prefix, room });
  assert.deepEqual(snap, { room, users: [], total: 0, threads: [{ thread, users: [{ user: "assistant", name: "Assistant", activity: "thinking", ttl_ms: 30000 }], total: 1 }] });

  release();
  await answered;
  const stop = await alice.until((f) => f.type === "typing_stop" && f.user === "assistant");
  assert.equal(stop.thread, thread);
  assert.equal(stop.reason, "stopped");
  assert.deepEqual(await whoIsTyping(nc, { prefix: stack.prefix, room }), { room, users: [], total: 0, threads: [] });
});

test("(e) the refreshes keep the agent shown past two ttls; it ends with the posted stop, not an expiry", async (t) => {
  const room = "node e2 " + Date.now();
  const alice = await watcher(t, room);
  const ttlMs = 3000;
  const agent = agentOf(t, { ttlMs, user: "bot-7", name: "Bot", activity: "uploading" });
  let atReply;
  await agent.answer({ room }, { thinkMs: 2 * ttlMs + 500, reply: async () => (atReply = await whoIsTyping(nc, { prefix: stack.prefix, room })) });
  assert.deepEqual(atReply.users, [{ user: "bot-7", name: "Bot", activity: "uploading", ttl_ms: ttlMs }]);
  const start = await alice.until((f) => f.type === "typing_start" && f.user === "bot-7");
  assert.equal(start.thread, undefined);
  assert.equal(start.ttl_ms, ttlMs);
  const stop = await alice.until((f) => f.type === "typing_stop" && f.user === "bot-7");
  assert.equal(stop.reason, "stopped");
});

test("(e) an answer given up stops its own conn: another answer in the scope stays shown", async (t) => {
  const room = "node e3 " + Date.now();
  const alice = await watcher(t, room);
  const agent = agentOf(t);
  const ctl = new AbortController();
  let called = false;
  const answered = agent.answer({ room, thread: "t" }, { thinkMs: 3600000, signal: ctl.signal, reply: () => (called = true) });
  await alice.until((f) => f.type === "typing_start" && f.user === "assistant");
  const other = await agent.show({ room, thread: "t" });
  ctl.abort(new Error("shutting down"));
  await assert.rejects(answered, /shutting down/);
  assert.equal(called, false);
  const snap = await whoIsTyping(nc, { prefix: stack.prefix, room });
  assert.deepEqual(snap.threads.map((th) => [th.thread, th.users.map((u) => u.user)]), [["t", ["assistant"]]]);
  await other.posted();
  await assert.rejects(other.posted(), /already ended/);
  const stop = await alice.until((f) => f.type === "typing_stop" && f.user === "assistant");
  assert.equal(stop.reason, "stopped");
});

test("(e) an answer begun right after a reply in the same scope shows all the same", async (t) => {
  const room = "node e4 " + Date.now();
  const alice = await watcher(t, room);
  const agent = agentOf(t);
  await agent.answer({ room }, { thinkMs: 0, reply: () => {} });
  const showing = await agent.show({ room });
  t.after(() => showing.cancel());
  const stop = await alice.until((f) => f.type === "typing_stop" && f.user === "assistant");
  // A typing_start after the stop: the refresh past the stop guard.
  const after = alice.frames.indexOf(stop);
  await alice.until((f) => f.type === "typing_start" && f.user === "assistant" && alice.frames.indexOf(f) > after);
});

test("(e) bad options and scopes are refused, naming the field", async () => {
  assert.throws(() => createAgent(nc, { ttlMs: 61000 }), /ttl_ms: must be whole ms in 1\.\.60000/);
  assert.throws(() => createAgent(nc, { activity: "Thinking" }), /activity: must be 1\.\.32 bytes/);
  assert.throws(() => createAgent(nc, { connPrefix: "gw-1" }), /conn: prefix/);
  assert.doesNotThrow(() => createAgent(nc, { ttlMs: 90000, maxTtlMs: 120000 }));
  const agent = createAgent(nc);
  await assert.rejects(agent.show({ room: "" }), /room: must be 1\.\.256 bytes/);
  await assert.rejects(agent.show({ room: "r", thread: "x".repeat(257) }), /thread: must be 1\.\.256 bytes/);
  await assert.rejects(agent.answer({ room: "r" }, { thinkMs: -1, reply: () => {} }), /think_ms/);
});

/** Runs the agent script; resolves {proc, out(), exited}. */
function runScript(t, args) {
  const proc = spawn(process.execPath, [script, ...args], {
    env: { ...process.env, ELLIPSIS_NATS_URL: natsURL, ELLIPSIS_SUBJECT_PREFIX: stack.prefix },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  proc.stdout.setEncoding("utf8").on("data", (d) => (out += d));
  proc.stderr.setEncoding("utf8").on("data", (d) => (out += d));
  const exited = once(proc, "exit");
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    await exited;
  });
  return { proc, out: () => out, exited };
}

test("(e) the script thinks in the thread, replies, stops there and exits 0", async (t) => {
  const room = "node e5 " + Date.now();
  const alice = await watcher(t, room);
  const { out, exited } = runScript(t, [room, "t-1", "--think-ms", "300"]);
  const start = await alice.until((f) => f.type === "typing_start" && f.user === "assistant", 20000);
  assert.equal(start.thread, "t-1");
  assert.equal(start.activity, "thinking");
  const stop = await alice.until((f) => f.type === "typing_stop" && f.user === "assistant", 20000);
  assert.equal(stop.thread, "t-1");
  assert.equal(stop.reason, "stopped");
  const [code] = await exited;
  assert.equal(code, 0, out());
  assert.match(out(), /reply in thread "t-1" of room .*\nstop sent in thread "t-1"/);
});

test("(e) the script on SIGTERM stops its conn, posts no reply and exits 130", async (t) => {
  const room = "node e6 " + Date.now();
  const alice = await watcher(t, room);
  const { proc, out, exited } = runScript(t, [room, "--think-ms", "3600000"]);
  await alice.until((f) => f.type === "typing_start" && f.user === "assistant", 20000);
  proc.kill("SIGTERM");
  const stop = await alice.until((f) => f.type === "typing_stop" && f.user === "assistant");
  assert.equal(stop.reason, "stopped");
  const [code] = await exited;
  assert.equal(code, 130, out());
  assert.doesNotMatch(out(), /reply in/);
  assert.match(out(), /interrupted: stop of its conn sent/);
});
