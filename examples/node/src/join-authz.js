// A join authoriser: the responder a gateway with ELLIPSIS_AUTHZ=nats asks
// before each join (docs/protocol.md, "Join authorisation hook"). Request
// on <prefix>.authz.v1.join: {"v":1,"user":"alice","room":"42"}; only the
// reply {"allow":true} allows. Anything else, or no reply within
// ELLIPSIS_AUTHZ_TIMEOUT (1 s), is a denial: the policy must answer fast.
// The gateway caches allows (30 s) and denials (2 s).
//
//   ELLIPSIS_NATS_URL=nats://127.0.0.1:4222 node src/join-authz.js 'alice=42,lobby;bob=lobby'
//
// The CLI's policy: the rooms listed per user, and every room starting
// with "public-".

import { connect } from "@nats-io/transport-node";
import { checkId, envSettings, isMain, subjects } from "./ids.js";

/** Several replicas in this queue group share the requests. */
export const QUEUE_GROUP = "join-authz";

/**
 * Answers join requests with `policy(user, room)` (boolean, or a promise of
 * one; it must settle well under a second). Malformed requests are denied
 * without asking the policy, and so is a policy that throws. Returns the
 * subscription: `sub.unsubscribe()` or `nc.drain()` stops it.
 * @param {import("@nats-io/transport-node").NatsConnection} nc
 * @param {{prefix?: string, policy: (user: string, room: string) => boolean | Promise<boolean>}} opts
 */
export function serveJoinAuthz(nc, { prefix = "ellipsis", policy }) {
  return nc.subscribe(subjects(prefix).authzJoin, {
    queue: QUEUE_GROUP,
    callback: async (err, msg) => {
      if (err) return;
      let allow = false;
      try {
        const req = msg.json();
        if (req && req.v === 1) {
          checkId("user", req.user);
          checkId("room", req.room);
          allow = (await policy(req.user, req.room)) === true;
        }
      } catch {
        allow = false;
      }
      msg.respond(JSON.stringify({ allow }));
    },
  });
}

/** Reads "alice=42,lobby;bob=lobby" into Map(user → Set(rooms)). */
export function parseAllow(s) {
  const out = new Map();
  for (const part of (s || "").split(";")) {
    const i = part.indexOf("=");
    if (i <= 0) continue;
    const user = part.slice(0, i);
    if (!out.has(user)) out.set(user, new Set());
    for (const r of part.slice(i + 1).split(",")) if (r) out.get(user).add(r);
  }
  return out;
}

if (isMain(import.meta.url)) {
  const members = parseAllow(process.argv[2]);
  const { servers, prefix } = envSettings();
  const nc = await connect({ servers, name: "example-join-authz", timeout: 5000, maxReconnectAttempts: -1 });
  const sub = serveJoinAuthz(nc, { prefix, policy: (user, room) => room.startsWith("public-") || Boolean(members.get(user)?.has(room)) });
  await nc.flush();
  console.log(`authorising joins on ${sub.getSubject()}`);
  for (const sig of ["SIGINT", "SIGTERM"]) process.once(sig, () => nc.drain());
  await nc.closed();
}
