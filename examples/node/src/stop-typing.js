// "Message posted → stop typing" (docs/protocol.md, "Typing commands").
// When a user's message is posted, the chat service publishes
//   {"v":1,"op":"stop","room":"42","user":"alice"}
// on <prefix>.typing.v1.cmd. Without "conn" the stop ends every connection
// (every device) of the user in the room, and a start a gateway sent
// before it (or within 500 ms after) is dropped, so the indicator never
// outlives the message. A message posted in a thread names it:
//   {"v":1,"op":"stop","room":"42","thread":"t-9","user":"alice"}
// ends her typing in that thread only (without "thread": the room itself).
//
//   ELLIPSIS_NATS_URL=nats://127.0.0.1:4222 node src/stop-typing.js <room> <user> [thread]

import { connect } from "@nats-io/transport-node";
import { checkId, envSettings, flushWithin, isMain, subjects } from "./ids.js";

/**
 * Publishes the stop command for (room, user), in `thread` of the room
 * when given (the message was posted there), and flushes, so the NATS
 * server has it when the promise resolves. Throws on an invalid id
 * (naming the field) or a failed flush (`timeoutMs`, default 2000).
 * @param {import("@nats-io/transport-node").NatsConnection} nc
 * @param {{prefix?: string, room: string, thread?: string, user: string, timeoutMs?: number}} opts
 */
export async function stopTyping(nc, { prefix = "ellipsis", room, thread, user, timeoutMs = 2000 }) {
  checkId("room", room);
  if (thread !== undefined) checkId("thread", thread);
  checkId("user", user);
  nc.publish(subjects(prefix).command, JSON.stringify({ v: 1, op: "stop", room, thread, user }));
  await flushWithin(nc, timeoutMs, "stop typing");
}

if (isMain(import.meta.url)) {
  const [room, user, thread] = process.argv.slice(2);
  const { servers, prefix } = envSettings();
  const nc = await connect({ servers, name: "example-stop-typing", timeout: 5000 });
  try {
    await stopTyping(nc, { prefix, room, thread, user });
    const where = thread === undefined ? "" : ` in thread ${JSON.stringify(thread)} of room`;
    console.log(`stop sent: user ${JSON.stringify(user)}${where || " in room"} ${JSON.stringify(room)}`);
  } finally {
    await nc.close();
  }
}
