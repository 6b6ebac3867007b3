// A consumer of the typing events on NATS (docs/protocol.md, "Room events
// on NATS"; the presence workers publish them with
// ELLIPSIS_NATS_EVENTS=true). Every typing_start and typing_stop, expired
// ones included, goes to <prefix>.typing.v1.room.<token> (token: the room
// id with every byte outside [A-Za-z0-9_-] as %XX, upper-case hex), with
// the same bytes as the room's Redis Pub/Sub event:
//   {"v":1,"type":"typing_start","room":"42","user":"alice","name":"Alice","ttl_ms":5000,"ts_ms":1764480000000}
// NATS core: at most once; one user's connection's events in order,
// across users only per worker shard (docs/protocol.md, "Order"). After a
// gap, ask the snapshot (who-is-typing.js) for the current state.
//
//   ELLIPSIS_NATS_URL=nats://127.0.0.1:4222 node src/room-events.js [room]   # no room: every room

import { connect } from "@nats-io/transport-node";
import { envSettings, isMain, subjects } from "./ids.js";

/**
 * Calls onEvent(event) for each typing event of `room`, or of every room
 * when room is undefined. A payload that is not a v1 typing event goes to
 * onBad(data, err) (when given) and is skipped. Returns the subscription.
 * @param {import("@nats-io/transport-node").NatsConnection} nc
 * @param {{prefix?: string, room?: string, onEvent: (ev: any) => void, onBad?: (data: Uint8Array, err: Error) => void}} opts
 */
export function followRoomEvents(nc, { prefix = "ellipsis", room, onEvent, onBad }) {
  const s = subjects(prefix);
  return nc.subscribe(room === undefined ? s.allRooms : s.room(room), {
    callback: (err, msg) => {
      if (err) return;
      let ev;
      try {
        ev = msg.json();
        if (!ev || ev.v !== 1 || (ev.type !== "typing_start" && ev.type !== "typing_stop")) {
          throw new Error(`not a v1 typing event: v ${ev?.v}, type ${ev?.type}`);
        }
      } catch (e) {
        if (onBad) onBad(msg.data, e);
        return;
      }
      onEvent(ev);
    },
  });
}

if (isMain(import.meta.url)) {
  const room = process.argv[2];
  const { servers, prefix } = envSettings();
  const nc = await connect({ servers, name: "example-room-events", timeout: 5000, maxReconnectAttempts: -1 });
  const sub = followRoomEvents(nc, {
    prefix,
    room,
    onEvent: (ev) => console.log(JSON.stringify(ev)),
    onBad: (_data, err) => console.error(`room-events: skipped: ${err.message}`),
  });
  await nc.flush();
  console.error(`following ${sub.getSubject()}`);
  for (const sig of ["SIGINT", "SIGTERM"]) process.once(sig, () => nc.drain());
  await nc.closed();
}
