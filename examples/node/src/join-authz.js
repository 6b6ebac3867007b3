// A join authoriser: the responder a gateway with ELLIPSIS_AUTHZ=nats asks
// before each join (docs/protocol.md, "Join authorisation hook"). Request
// on <prefix>.authz.v1.join: {"v":1,"user":"alice","room":"42"}; a reply
// with "allow" true allows, and may carry "hide_typing_from", the users
// whose typing the user never gets in that room (docs/protocol.md,
// "Per-viewer filters"):
//
//   {"allow":true}
//   {"allow":true,"hide_typing_from":["bob","carol"]}
//
// Anything else ({"allow":false}, a reply the gateway cannot read, an
// allow whose list is not at most 1000 valid user ids), or no reply within
// ELLIPSIS_AUTHZ_TIMEOUT (1 s), is a denial: the policy must answer fast.
// The gateway caches allows, with their list (30 s), and denials (2 s).
//
//   ELLIPSIS_NATS_URL=nats://127.0.0.1:4222 node src/join-authz.js 'alice=42,lobby;bob=lobby'
//   node src/join-authz.js 'alice=42' --hide 'alice=bob,carol'
//
// The CLI's policy: the rooms listed per user, and every room starting
// with "public-"; --hide lists, per user, whose typing that user does not
// get in the rooms they join (the second line: alice, in 42 and public-*
// rooms, gets no typing of bob or carol). --hide is checked at start with
// the gateway's rules; a bad one exits 2 naming the user and the rule.
// Ids holding "=", "," or ";" cannot be written in these arguments.

import { connect } from "@nats-io/transport-node";
import { parseArgs } from "node:util";
import { checkId, checkUserIds, envSettings, isMain, subjects } from "./ids.js";

/** Several replicas in this queue group share the requests. */
export const QUEUE_GROUP = "join-authz";

const DENY = JSON.stringify({ allow: false });

/**
 * Answers join requests with `policy(user, room)`: `true` (allow), `false`
 * (deny), or `{allow: true, hideTypingFrom: ["bob"]}` (allow, hiding those
 * users' typing from the user in the room), or a promise of one; it must
 * settle well under a second. Malformed requests are denied without
 * asking the policy, and so is a policy that throws. An allow whose
 * hideTypingFrom breaks the rules of checkUserIds is answered as a denial,
 * which is how the gateway would take that reply (fail closed); check a
 * configured list at start, as parseHide does. Returns the subscription:
 * `sub.unsubscribe()` or `nc.drain()` stops it.
 * @param {import("@nats-io/transport-node").NatsConnection} nc
 * @param {{prefix?: string, policy: (user: string, room: string) => Decision | Promise<Decision>}} opts
 * @typedef {boolean | {allow: boolean, hideTypingFrom?: string[]}} Decision
 */
export function serveJoinAuthz(nc, { prefix = "ellipsis", policy }) {
  return nc.subscribe(subjects(prefix).authzJoin, {
    queue: QUEUE_GROUP,
    callback: async (err, msg) => {
      if (err) return;
      let reply = DENY;
      try {
        const req = msg.json();
        if (req && req.v === 1) {
          checkId("user", req.user);
          checkId("room", req.room);
          reply = replyFor(await policy(req.user, req.room));
        }
      } catch {
        reply = DENY;
      }
      msg.respond(reply);
    },
  });
}

/** The reply JSON for a policy's decision; throws on a bad hide list. */
function replyFor(decision) {
  if (decision === true) return JSON.stringify({ allow: true });
  if (decision === null || typeof decision !== "object" || decision.allow !== true) return DENY;
  const hide = decision.hideTypingFrom ?? [];
  checkUserIds("hide_typing_from", hide);
  return JSON.stringify(hide.length ? { allow: true, hide_typing_from: hide } : { allow: true });
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

/**
 * Reads the --hide argument, "alice=bob,carol;dave=eve", into Map(user →
 * array of the users whose typing they do not get). A user named twice
 * gets both lists, in order; empty parts (";;", a trailing ",") are
 * skipped. Each user is checked with checkId and each list with
 * checkUserIds (the gateway's rules: at most 1000 ids, each 1..256 bytes
 * of UTF-8 without control characters). Throws naming the part and the
 * rule: `--hide "alice=": no hidden users after "="`,
 * `--hide "alice": hide_typing_from: at most 1000 user ids, got 1001`.
 * @param {string | undefined} s
 * @returns {Map<string, string[]>}
 */
export function parseHide(s) {
  const out = new Map();
  for (const part of (s || "").split(";")) {
    if (!part) continue;
    const i = part.indexOf("=");
    if (i < 0) throw new Error(`--hide ${JSON.stringify(part)}: no "=" between the user and the hidden users`);
    const user = part.slice(0, i);
    try {
      checkId("user", user);
    } catch (err) {
      throw new Error(`--hide ${JSON.stringify(part)}: ${err.message}`);
    }
    const ids = part.slice(i + 1).split(",").filter(Boolean);
    if (!ids.length) throw new Error(`--hide ${JSON.stringify(part)}: no hidden users after "="`);
    out.set(user, [...(out.get(user) ?? []), ...ids]);
  }
  for (const [user, ids] of out) {
    try {
      checkUserIds("hide_typing_from", ids);
    } catch (err) {
      throw new Error(`--hide ${JSON.stringify(user)}: ${err.message}`);
    }
  }
  return out;
}

if (isMain(import.meta.url)) {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { hide: { type: "string" } } });
  const members = parseAllow(positionals[0]);
  let hide;
  try {
    hide = parseHide(values.hide);
  } catch (err) {
    console.error(`join-authz: ${err.message}`);
    process.exit(2);
  }
  const { servers, prefix } = envSettings();
  const nc = await connect({ servers, name: "example-join-authz", timeout: 5000, maxReconnectAttempts: -1 });
  const sub = serveJoinAuthz(nc, {
    prefix,
    policy: (user, room) =>
      room.startsWith("public-") || Boolean(members.get(user)?.has(room)) ? { allow: true, hideTypingFrom: hide.get(user) } : false,
  });
  await nc.flush();
  console.log(`authorising joins on ${sub.getSubject()}`);
  for (const sig of ["SIGINT", "SIGTERM"]) process.once(sig, () => nc.drain());
  await nc.closed();
}
