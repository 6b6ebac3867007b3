// The examples as one module, for tests and for copying from.
export { checkId, checkUserIds, MAX_HIDE_TYPING_FROM, roomToken, subjects, flushWithin } from "./ids.js";
export { stopTyping } from "./stop-typing.js";
export { whoIsTyping } from "./who-is-typing.js";
export { serveJoinAuthz, parseAllow, parseHide, QUEUE_GROUP } from "./join-authz.js";
export { followRoomEvents } from "./room-events.js";
export { createAgent, postReply, DEFAULT_TTL_MS, DEFAULT_MAX_TTL_MS, STOP_GUARD_MS } from "./agent.js";
