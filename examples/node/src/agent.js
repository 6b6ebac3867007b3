// An agent that thinks before it answers (docs/protocol.md, "Typing
// commands" and "Threads and activities"): a platform service asked to
// answer in a room, or in a thread of it, shows its user as thinking there
// with a conn of its own per answer and its own ttl_ms (up to the workers'
// ELLIPSIS_SERVICE_MAX_TTL, 60 s by default), on <prefix>.typing.v1.cmd:
//   {"v":1,"op":"start","room":"42","thread":"t-9","user":"assistant","name":"Assistant",
//    "conn":"assistant-5f3c9a01:1","activity":"thinking","ttl_ms":30000,"seq":1,"ts_ms":1764480000000}
// refreshes it every ttl/2 while it works (the first time after 2 × the
// workers' 500 ms stop guard, so an answer begun just after a reply in the
// same scope shows all the same), and when its reply is posted sends the
// message-posted stop in the same scope:
//   {"v":1,"op":"stop","room":"42","thread":"t-9","user":"assistant"}
// An answer given up (SIGINT, SIGTERM) stops its own conn only. The Go
// equivalent is examples/go/agent.
//
//   ELLIPSIS_NATS_URL=nats://127.0.0.1:4222 node src/agent.js <room> [thread] [--think-ms 20000] [--ttl-ms 30000] [--reply text] [--chat http://localhost:8080/demo/chat]
//
// Without --chat the reply is printed; with it, it is posted to that chat
// service (examples/go/chat: POST <chat>/rooms/{room}/messages).

import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { connect } from "@nats-io/transport-node";
import { checkId, envSettings, flushWithin, isMain, subjects } from "./ids.js";

export const DEFAULT_TTL_MS = 30000;
/** The workers' default ELLIPSIS_SERVICE_MAX_TTL: a start above the setting is refused by them, never shown. */
export const DEFAULT_MAX_TTL_MS = 60000;
/** The workers' guard after a stop without conn: a start sent within it is dropped as superseded. */
export const STOP_GUARD_MS = 500;
const MAX_CONN_PREFIX_BYTES = 256 - 21; // room for ":" and a counter in a 256-byte conn id

/**
 * Returns an agent publishing through nc. Options: prefix
 * (ELLIPSIS_SUBJECT_PREFIX, "ellipsis"), user and name ("assistant",
 * "Assistant"), activity ("thinking"; [a-z_]{1,32}), ttlMs (30000; whole
 * ms, 1..maxTtlMs), maxTtlMs (the deployment's ELLIPSIS_SERVICE_MAX_TTL,
 * 60000), timeoutMs (each flush, 2000), connPrefix (each answer's conn is
 * "<connPrefix>:<n>"; default "<user>-<8 random hex>", never "gw-…"),
 * onRefreshError(scope, err). Throws a TypeError or RangeError naming the
 * field (user, name, activity, ttl_ms, conn).
 * @param {import("@nats-io/transport-node").NatsConnection} nc
 */
export function createAgent(nc, opts = {}) {
  const {
    prefix = "ellipsis",
    user = "assistant",
    name = "Assistant",
    activity = "thinking",
    ttlMs = DEFAULT_TTL_MS,
    maxTtlMs = DEFAULT_MAX_TTL_MS,
    timeoutMs = 2000,
    onRefreshError,
  } = opts;
  const connPrefix = opts.connPrefix ?? `${user}-${randomBytes(4).toString("hex")}`;
  checkId("user", user);
  if (typeof name !== "string" || new TextEncoder().encode(name).length > 256) throw new RangeError("name: must be a string of at most 256 bytes");
  if (typeof activity !== "string" || !/^[a-z_]{1,32}$/.test(activity)) throw new RangeError(`activity: must be 1..32 bytes of a-z and _, got ${JSON.stringify(activity)}`);
  if (!Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > maxTtlMs) throw new RangeError(`ttl_ms: must be whole ms in 1..${maxTtlMs} (ELLIPSIS_SERVICE_MAX_TTL), got ${ttlMs}`);
  checkId("conn", connPrefix);
  if (new TextEncoder().encode(connPrefix).length > MAX_CONN_PREFIX_BYTES || connPrefix.startsWith("gw-")) {
    throw new RangeError(`conn: prefix must be at most ${MAX_CONN_PREFIX_BYTES} bytes and not start with "gw-" (a gateway's), got ${JSON.stringify(connPrefix)}`);
  }
  const subject = subjects(prefix).command;
  let n = 0;

  const send = async (cmd) => {
    nc.publish(subject, JSON.stringify(cmd));
    await flushWithin(nc, timeoutMs, `agent: ${cmd.op} in ${where(cmd)}`);
  };

  /**
   * Shows the agent in scope ({room, thread?}) until posted() or cancel()
   * of the returned showing; resolves once the first start is flushed.
   * Throws on an invalid room or thread (naming it) or a failed flush.
   */
  async function show({ room, thread }) {
    checkId("room", room);
    if (thread !== undefined) checkId("thread", thread);
    const conn = `${connPrefix}:${++n}`;
    let seq = 0;
    const start = () => send({ v: 1, op: "start", room, thread, user, name, conn, activity, seq: ++seq, ts_ms: Date.now(), ttl_ms: ttlMs });
    await start();
    let timer;
    let inFlight = Promise.resolve();
    let ended;
    // Each refresh re-arms the next one; none runs or re-arms once the
    // showing has ended, so an ended showing holds no timer.
    const tick = (ms) => {
      timer = setTimeout(() => {
        if (ended) return;
        inFlight = start().catch((err) => onRefreshError?.({ room, thread }, err));
        tick(ttlMs / 2);
      }, ms);
    };
    tick(Math.min(ttlMs / 2, 2 * STOP_GUARD_MS));
    const end = (posted) => {
      if (ended) return Promise.reject(new Error("agent: the showing has already ended"));
      clearTimeout(timer);
      ended = inFlight.then(() =>
        send(posted ? { v: 1, op: "stop", room, thread, user } : { v: 1, op: "stop", room, thread, user, conn, seq: ++seq, ts_ms: Date.now() }),
      );
      return ended;
    };
    return {
      conn,
      /** The reply was posted: the message-posted stop (no conn) ends the agent's typing in the scope at once. */
      posted: () => end(true),
      /** Given up without a reply: a stop of this showing's conn only. */
      cancel: () => end(false),
    };
  }

  /**
   * The whole hook: shows the agent in scope, thinks thinkMs (a stand-in
   * for the work), awaits reply(scope) (which posts the reply message),
   * then sends the message-posted stop. When signal aborts first, or reply
   * throws, the showing is cancelled (its conn's stop) and the abort
   * reason or reply's error is thrown.
   * @param {{room: string, thread?: string}} scope
   * @param {{thinkMs: number, reply: (scope: {room: string, thread?: string}) => Promise<void> | void, signal?: AbortSignal}} how
   */
  async function answer(scope, { thinkMs, reply, signal }) {
    if (!Number.isInteger(thinkMs) || thinkMs < 0) throw new RangeError(`think_ms: must be whole ms >= 0, got ${thinkMs}`);
    signal?.throwIfAborted();
    const showing = await show(scope);
    try {
      await new Promise((resolve, reject) => {
        const timer = setTimeout(done, thinkMs);
        function done() {
          signal?.removeEventListener("abort", abort);
          resolve();
        }
        function abort() {
          clearTimeout(timer);
          reject(signal.reason);
        }
        if (signal?.aborted) return abort();
        signal?.addEventListener("abort", abort, { once: true });
      });
      await reply(scope);
    } catch (err) {
      try {
        await showing.cancel();
      } catch (stopErr) {
        throw new AggregateError([err, stopErr], `${err.message}; and its stop failed: ${stopErr.message}`);
      }
      throw err;
    }
    await showing.posted();
  }

  return { user, name, ttlMs, show, answer };
}

function where({ room, thread }) {
  return thread === undefined ? `room ${JSON.stringify(room)}` : `thread ${JSON.stringify(thread)} of room ${JSON.stringify(room)}`;
}

/** Posts text as user/name in scope to the chat service at base (answered 201), within timeoutMs. */
export async function postReply(base, { room, thread }, { user, name, text, timeoutMs = 5000 }) {
  const url = `${base.replace(/\/$/, "")}/rooms/${encodeURIComponent(room)}/messages`;
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ user, name, text, thread }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  if (res.status !== 201) throw new Error(`post the reply to ${url}: HTTP ${res.status}: ${(await res.text()).slice(0, 512)}`);
}

if (isMain(import.meta.url)) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      "think-ms": { type: "string", default: "20000" },
      "ttl-ms": { type: "string", default: String(DEFAULT_TTL_MS) },
      reply: { type: "string", default: "Here is what I came up with." },
      chat: { type: "string" },
    },
  });
  const [room, thread] = positionals;
  const scope = { room, thread };
  const { servers, prefix } = envSettings();
  const nc = await connect({ servers, name: "example-agent", timeout: 5000 });
  const agent = createAgent(nc, {
    prefix,
    ttlMs: Number(values["ttl-ms"]),
    onRefreshError: (s, err) => console.error(`agent: refresh in ${where(s)}: ${err.message}`),
  });
  const ctl = new AbortController();
  for (const sig of ["SIGINT", "SIGTERM"]) process.once(sig, () => ctl.abort(new Error(sig)));
  let code = 0;
  try {
    console.log(`thinking in ${where(scope)} for ${values["think-ms"]} ms`);
    await agent.answer(scope, {
      thinkMs: Number(values["think-ms"]),
      signal: ctl.signal,
      reply: async (s) => {
        if (values.chat) await postReply(values.chat, s, { user: agent.user, name: agent.name, text: values.reply });
        console.log(`reply in ${where(s)}: ${values.reply}`);
      },
    });
    console.log(`stop sent in ${where(scope)}`);
  } catch (err) {
    if (ctl.signal.aborted && err === ctl.signal.reason) {
      console.log(`interrupted: stop of its conn sent in ${where(scope)}`);
      code = 130;
    } else {
      console.error(`agent: ${err.message}`);
      code = 1;
    }
  } finally {
    await nc.close();
  }
  process.exit(code);
}
