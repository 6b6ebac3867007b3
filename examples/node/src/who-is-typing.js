// "Who is typing in room R" (docs/protocol.md, "Snapshot request/reply"):
// a NATS request on <prefix>.typing.v1.snapshot with {"v":1,"room":"42"},
// answered by one presence worker with
//   {"v":1,"room":"42","users":[{"user":"alice","name":"Alice"}],"total":1}
// or {"v":1,"error":{"code":"unavailable","message":"..."}}. With threads
// ("Threads and activities"), "users" and "total" are the room itself and
// "threads" (absent when no thread has a typist) lists the threads:
//   "threads":[{"thread":"t-9","users":[{"user":"assistant","name":"Assistant","activity":"thinking"}],"total":1}]
// An entry carries "activity" unless it is typing.
//
//   ELLIPSIS_NATS_URL=nats://127.0.0.1:4222 node src/who-is-typing.js <room>

import { connect } from "@nats-io/transport-node";
import { checkId, envSettings, isMain, subjects } from "./ids.js";

/**
 * Returns `{room, users, total, threads}`: users (at most the workers'
 * ELLIPSIS_SNAPSHOT_MAX, sorted by user id) and total (every typist; more
 * than users.length when the list was cut) of the room itself, and threads
 * (`[{thread, users, total}]`, sorted by thread; [] when no thread has a
 * typist). Entries are `{user, name?, activity?}`. Throws on an invalid room, on
 * no worker answering within `timeoutMs` (default 2000), and on a worker's
 * error reply (err.code "unavailable": retry with backoff; "bad_request";
 * "internal").
 * @param {import("@nats-io/transport-node").NatsConnection} nc
 * @param {{prefix?: string, room: string, timeoutMs?: number}} opts
 */
export async function whoIsTyping(nc, { prefix = "ellipsis", room, timeoutMs = 2000 }) {
  checkId("room", room);
  const msg = await nc.request(subjects(prefix).snapshot, JSON.stringify({ v: 1, room }), { timeout: timeoutMs });
  const reply = msg.json();
  if (reply.error) {
    const err = new Error(`who is typing in ${JSON.stringify(room)}: ${reply.error.code}: ${reply.error.message}`);
    err.code = reply.error.code;
    throw err;
  }
  if (reply.v !== 1) throw new Error(`who is typing: reply v must be 1, got ${reply.v}`);
  const threads = Array.isArray(reply.threads) ? reply.threads.map((t) => scope(t, { thread: t.thread })) : [];
  return { room: reply.room, ...scope(reply, {}), threads };
}

/** A scope of a reply as {…head, users, total}; a worker older than "total" lists everyone. */
function scope(s, head) {
  const users = Array.isArray(s.users) ? s.users : [];
  const total = Number.isInteger(s.total) && s.total >= users.length ? s.total : users.length;
  return { ...head, users, total };
}

if (isMain(import.meta.url)) {
  const [room] = process.argv.slice(2);
  const { servers, prefix } = envSettings();
  const nc = await connect({ servers, name: "example-who-is-typing", timeout: 5000 });
  try {
    const { users, total, threads } = await whoIsTyping(nc, { prefix, room });
    for (const t of users) console.log(`${t.activity ?? "typing"}: ${t.user} (${t.name ?? ""})`);
    console.log(`total: ${total}`);
    for (const th of threads) {
      for (const t of th.users) console.log(`${t.activity ?? "typing"} in thread ${JSON.stringify(th.thread)}: ${t.user} (${t.name ?? ""})`);
      console.log(`total in thread ${JSON.stringify(th.thread)}: ${th.total}`);
    }
  } finally {
    await nc.close();
  }
}
