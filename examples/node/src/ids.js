// Ids and subjects shared by the examples (docs/protocol.md, "Terms and
// ids" and "NATS"). The Go equivalents are shared/protocol and shared/names.

import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

const MAX_ID_BYTES = 256;
/** The most user ids one hide_typing_from list may hold (docs/protocol.md, "Per-viewer filters"; Go: protocol.MaxHideTypingFrom). */
export const MAX_HIDE_TYPING_FROM = 1000;
const encoder = new TextEncoder();

/**
 * Throws unless s is a valid room or user id: 1..256 bytes of UTF-8 without
 * control characters. The error names the field and the limit.
 * @param {string} field
 * @param {unknown} s
 */
export function checkId(field, s) {
  if (typeof s !== "string") throw new TypeError(`${field}: must be a string`);
  const n = encoder.encode(s).length;
  if (n < 1 || n > MAX_ID_BYTES) throw new RangeError(`${field}: must be 1..${MAX_ID_BYTES} bytes, got ${n}`);
  if (/[\u0000-\u001f\u007f-\u009f]/.test(s)) throw new RangeError(`${field}: must not contain control characters`);
  if (s.isWellFormed && !s.isWellFormed()) throw new RangeError(`${field}: must be valid UTF-8 (lone surrogate)`);
}

/**
 * Throws unless ids is a valid hide list (docs/protocol.md, "Per-viewer
 * filters"; the gateway's rules, Go: protocol.ValidateUserIDs): an array
 * of at most 1000 user ids (duplicates count), each valid by checkId. The
 * error names the field, the index and the limit
 * ("hide_typing_from[3]: must be 1..256 bytes, got 300").
 * @param {string} field
 * @param {unknown} ids
 */
export function checkUserIds(field, ids) {
  if (!Array.isArray(ids)) throw new TypeError(`${field}: must be an array of user ids`);
  if (ids.length > MAX_HIDE_TYPING_FROM) throw new RangeError(`${field}: at most ${MAX_HIDE_TYPING_FROM} user ids, got ${ids.length}`);
  ids.forEach((id, i) => checkId(`${field}[${i}]`, id));
}

/** The deployment's subjects for ELLIPSIS_SUBJECT_PREFIX `prefix` ("ellipsis" by default). */
export function subjects(prefix = "ellipsis") {
  return {
    command: `${prefix}.typing.v1.cmd`,
    snapshot: `${prefix}.typing.v1.snapshot`,
    authzJoin: `${prefix}.authz.v1.join`,
    room: (room) => `${prefix}.typing.v1.room.${roomToken(room)}`,
    allRooms: `${prefix}.typing.v1.room.>`,
  };
}

/**
 * The room's subject token: every byte of its UTF-8 outside [A-Za-z0-9_-]
 * becomes %XX (upper-case hex). "room:42" → "room%3A42".
 * @param {string} room
 */
export function roomToken(room) {
  let out = "";
  for (const b of encoder.encode(room)) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9_-]/.test(c) ? c : "%" + b.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

/**
 * Flushes nc, so the NATS server has what was published before; rejects
 * when no flush answer comes within timeoutMs ("<what>: no flush from the
 * NATS server within N ms").
 * @param {import("@nats-io/transport-node").NatsConnection} nc
 * @param {number} timeoutMs
 * @param {string} what
 */
export async function flushWithin(nc, timeoutMs, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no flush from the NATS server within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    await Promise.race([nc.flush(), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** The CLI's settings from the environment: ELLIPSIS_NATS_URL and ELLIPSIS_SUBJECT_PREFIX. */
export function envSettings() {
  return {
    servers: (process.env.ELLIPSIS_NATS_URL || "nats://127.0.0.1:4222").split(","),
    prefix: process.env.ELLIPSIS_SUBJECT_PREFIX || "ellipsis",
  };
}

/** True when the module at `url` is the script node was started with. */
export function isMain(url) {
  return Boolean(process.argv[1]) && resolve(process.argv[1]) === fileURLToPath(url);
}
