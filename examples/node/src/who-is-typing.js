// "Who is typing in room R" (docs/protocol.md, "Snapshot request/reply"):
// a NATS request on <prefix>.typing.v1.snapshot with {"v":1,"room":"42"},
// answered by one presence worker with
//   {"v":1,"room":"42","users":[{"user":"alice","name":"Alice"}],"total":1}
// or {"v":1,"error":{"code":"unavailable","message":"..."}}.
//
//   ELLIPSIS_NATS_URL=nats://127.0.0.1:4222 node src/who-is-typing.js <room>

import { connect } from "@nats-io/transport-node";
import { checkId, envSettings, isMain, subjects } from "./ids.js";

/**
 * Returns `{room, users, total}`: users (at most the workers'
 * ELLIPSIS_SNAPSHOT_MAX, sorted by user id) and total (every typist; more
 * than users.length when the list was cut). Throws on an invalid room, on
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
  const users = Array.isArray(reply.users) ? reply.users : [];
  // A worker older than "total" lists everyone.
  const total = Number.isInteger(reply.total) && reply.total >= users.length ? reply.total : users.length;
  return { room: reply.room, users, total };
}

if (isMain(import.meta.url)) {
  const [room] = process.argv.slice(2);
  const { servers, prefix } = envSettings();
  const nc = await connect({ servers, name: "example-who-is-typing", timeout: 5000 });
  try {
    const { users, total } = await whoIsTyping(nc, { prefix, room });
    for (const t of users) console.log(`typing: ${t.user} (${t.name ?? ""})`);
    console.log(`total: ${total}`);
  } finally {
    await nc.close();
  }
}
