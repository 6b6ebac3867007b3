// Ellipsis browser SDK: "Alice is typing…" over an Ellipsis gateway.
//
//   import { connect, TypingIndicator } from "/src/ellipsis.js";
//
//   const client = await connect({ user: "alice", name: "Alice" }); // dev stack (auth=none)
//   // or: connect({ url: "https://chat.example.com", token: () => getJwt() })
//   const room = client.join("42");
//   const line = new TypingIndicator(document.querySelector("#typing"));
//   room.on("change", (typists) => line.update(typists));
//   input.addEventListener("input", () => room.keystroke());
//   input.addEventListener("blur", () => room.blur());
//   form.addEventListener("submit", () => room.messageSent());
//
//   // Threads and activities: each scope types on its own.
//   room.keystroke({ thread: "t-9" });            // typing in a thread
//   room.startActivity("recording_audio");        // "Bob is recording a voice message…"
//   room.on("threads", () => line.update(room.typists, room.total, room.threads)); // "Alice is typing in a thread…"
//
// Wire contract: docs/protocol.md (v1). Timing comes from the gateway
// (GET /v1/config) unless given: typing_start on the first keystroke, again
// every refresh_ms while typing, typing_stop after idle_stop_ms without a
// keystroke; a typist shown here disappears ttl_ms (+ a grace) after their
// last start unless refreshed or stopped. No runtime dependencies; types in
// ellipsis.d.ts.

import { Client } from "./client.js";
import { formatTypists } from "./format.js";

export { Client, Room, DEFAULTS, STATES, DEFAULT_MAX_FRAME_BYTES, backoffDelay, tokenSubject } from "./client.js";
export { TypingTimer, validateTimers, DEFAULT_TTL_MS, DEFAULT_REFRESH_MS, DEFAULT_IDLE_STOP_MS } from "./typing.js";
export { TypistStore, DEFAULT_GRACE_MS } from "./store.js";
export { Thread, ACTIVITIES } from "./scope.js";
export { formatTypists, displayName, resolveLocale, splitEllipsis, validateMessages, LOCALES, MESSAGES, DEFAULT_MAX_NAMES } from "./format.js";
export { TypingIndicator, AntiFlicker, TYPING_CSS, DEFAULT_MIN_SHOW_MS } from "./ui.js";
export { Emitter } from "./emitter.js";
export { systemClock } from "./clock.js";

/** The SDK's version (package.json). */
export const VERSION = "0.1.0";

/**
 * Creates a client and connects it; resolves once the connection is open
 * (see Client.connect). The client keeps reconnecting on its own after that.
 * @param {import("./ellipsis.js").ClientOptions} [opts]
 * @returns {Promise<Client>}
 */
export async function connect(opts = {}) {
  const client = new Client(opts);
  await client.connect();
  return client;
}

/**
 * Formats who is typing from display names, in English.
 * @deprecated Use formatTypists(users, {locale, max}).
 * @param {string[]} names
 * @param {{locale?: string, max?: number}} [opts]
 * @returns {string}
 */
export function formatTyping(names, opts) {
  return formatTypists(names, opts);
}
