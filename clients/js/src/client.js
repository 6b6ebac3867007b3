// One WebSocket to an Ellipsis gateway (docs/protocol.md, v1): connects with a
// token or a development user, reconnects with exponential backoff and
// jitter, rejoins every room (each join brings a fresh snapshot) and
// re-watches every watched room (each brings a fresh summary), keeps the
// connection alive with pings, and paces its frames under the gateway's
// inbound rate limit.

import { Emitter } from "./emitter.js";
import { systemClock } from "./clock.js";
import { DEFAULT_GRACE_MS, activityOf } from "./store.js";
import { Scope, Thread, threadKey, activityKey, ACTIVITIES } from "./scope.js";
import {
  validateTimers,
  DEFAULT_TTL_MS,
  DEFAULT_REFRESH_MS,
  DEFAULT_IDLE_STOP_MS,
} from "./typing.js";

/** Defaults of ClientOptions, in milliseconds where timed. */
export const DEFAULTS = Object.freeze({
  ttlMs: DEFAULT_TTL_MS,
  refreshMs: DEFAULT_REFRESH_MS,
  idleStopMs: DEFAULT_IDLE_STOP_MS,
  graceMs: DEFAULT_GRACE_MS,
  resyncMs: 10000,
  pingMs: 25000,
  pongTimeoutMs: 10000,
  reconnectMinMs: 500,
  reconnectMaxMs: 30000,
  stableMs: 5000,
  maxFramesPerSecond: 10,
  frameBurst: 20,
});

/**
 * A timer that fires this much later than scheduled, past 2 × pingMs, means
 * the machine slept (a laptop lid closed): the gateway may have dropped the
 * connection and events were missed. Browser timers run on a monotonic
 * clock that stops during sleep while Date.now() keeps wall time.
 */
export const WAKE_GAP_FLOOR_MS = 30000;

/**
 * Triggers (visible, online, wake) within this long of a room's last sync
 * are coalesced into it: one sync per room, not a burst.
 */
export const RESYNC_COALESCE_MS = 1000;

// WebSocket subprotocols of the handshake (docs/protocol.md, "Where the token travels"):
// the gateway selects PROTOCOL_V1; BEARER_PREFIX + <JWT> carries the token.
export const PROTOCOL_V1 = "ellipsis.v1";
export const BEARER_PREFIX = "ellipsis.bearer.";
const TOKEN_TRANSPORTS = ["protocol", "query"];
// RFC 7230 section 3.2.6 tchar: what a Sec-WebSocket-Protocol entry may hold.
const TCHARS = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** Error codes after which a join, or a watched room, is retried (with backoff). */
const RETRY_CODES = new Set(["unavailable", "rate_limited", "internal"]);

/**
 * The gateway's largest inbound frame when GET /v1/config does not say
 * (`max_frame_bytes`; ELLIPSIS_MAX_FRAME_BYTES' default), in bytes. A frame
 * over it closes the connection with 1009 (docs/protocol.md, "Frames").
 */
export const DEFAULT_MAX_FRAME_BYTES = 4096;

const utf8 = new TextEncoder();
const byteLength = (s) => utf8.encode(s).length;

/**
 * The distinct room ids of `rooms` (an iterable of strings, not a string),
 * in their order; each must be a non-empty string, as join() requires.
 * @param {Iterable<string>} rooms
 * @param {string} method "watch" | "unwatch", for the error
 * @returns {string[]}
 */
function roomIds(rooms, method) {
  if (rooms == null || typeof rooms === "string" || typeof rooms[Symbol.iterator] !== "function") {
    throw new TypeError(`ellipsis: ${method}(rooms): rooms must be an array (or a set) of room ids, got ${rooms === null ? "null" : typeof rooms}`);
  }
  const out = new Set();
  let i = 0;
  for (const id of rooms) {
    if (typeof id !== "string" || id === "") {
      throw new TypeError(`ellipsis: ${method}(rooms): rooms[${i}]: room id must be a non-empty string, got ${JSON.stringify(id) ?? typeof id}`);
    }
    out.add(id);
    i++;
  }
  return [...out];
}

/**
 * Packs rooms into `{type, rooms, id}` frames of at most maxBytes each, as
 * JSON.stringify writes them in UTF-8 (the gateway closes 1009 over its
 * max_frame_bytes). A room that does not fit in a frame of its own is
 * returned in `tooLong`, never sent.
 * @param {"watch" | "unwatch"} type
 * @param {string[]} rooms
 * @param {number} maxBytes
 * @param {() => string} nextId a fresh request id per frame
 * @returns {{frames: {type: string, rooms: string[], id: string}[], tooLong: string[]}}
 */
export function packRooms(type, rooms, maxBytes, nextId) {
  const frames = [];
  const tooLong = [];
  let frame = null;
  let size = 0;
  for (const room of rooms) {
    const add = byteLength(JSON.stringify(room));
    if (frame && size + 1 + add > maxBytes) frame = null;
    if (!frame) {
      const id = nextId();
      const base = byteLength(JSON.stringify({ type, rooms: [], id }));
      if (base + add > maxBytes) {
        tooLong.push(room);
        continue;
      }
      frame = { type, rooms: [room], id };
      frames.push(frame);
      size = base + add;
      continue;
    }
    frame.rooms.push(room);
    size += 1 + add;
  }
  return { frames, tooLong };
}

/**
 * Reads the user id (`sub`) of a JWT without verifying it, for the self
 * filter. Returns "" when it cannot.
 * @param {string} token
 * @returns {string}
 */
export function tokenSubject(token) {
  try {
    let part = String(token).split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    part += "=".repeat((4 - (part.length % 4)) % 4);
    const bin = atob(part);
    const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
    const sub = JSON.parse(new TextDecoder().decode(bytes)).sub;
    return typeof sub === "string" ? sub : "";
  } catch {
    return "";
  }
}

/**
 * Exponential backoff with "equal jitter": attempt 0 waits between min/2
 * and min, each further attempt doubles it, up to max.
 * @param {number} attempt 0, 1, 2, ...
 * @param {number} minMs
 * @param {number} maxMs
 * @param {() => number} [random] default Math.random
 * @returns {number}
 */
export function backoffDelay(attempt, minMs, maxMs, random = Math.random) {
  const ceiling = Math.min(maxMs, minMs * 2 ** Math.min(attempt, 30));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/** The states of a Client's connection. */
export const STATES = Object.freeze(["idle", "connecting", "open", "reconnecting", "closed"]);

/**
 * A connection to the gateway. Events (on(event, fn) returns an unsubscribe
 * function):
 * - "state" ({state, previous, attempt, delayMs?, code?, reason?, error?}):
 *   "connecting" → "open" → "reconnecting" (waiting delayMs) → "connecting"
 *   … and "closed" for good (close(), a fatal error).
 * - "error" (frame or Error): error frames from the gateway, and failures.
 * - "change" (room: Room, typists, total): a room's typists (the room
 *   itself, not its threads) changed.
 * - "threads" (room: Room, threads): the typists of a thread of a room
 *   changed (threads: room.threads).
 * - "resync" ({reason, rooms}): the page came back ("visible": the
 *   document became visible; "online": the browser is back online; "wake":
 *   a timer fired over max(2 × pingMs, WAKE_GAP_FLOOR_MS) late, the machine
 *   slept) and a sync went out for the rooms listed (ids); the connection
 *   is checked with a ping too.
 * - "summary" ({room, typing, total}): a watched room's summary (see
 *   watch()); it replaces the room's last one.
 */
export class Client extends Emitter {
  /** @param {import("./ellipsis.js").ClientOptions} [opts] */
  constructor(opts = {}) {
    super();
    this._opts = opts;
    this._clock = opts.clock || systemClock;
    this._WebSocket = opts.WebSocket || globalThis.WebSocket;
    this._fetch = opts.fetch || (globalThis.fetch && globalThis.fetch.bind(globalThis));
    if (opts.tokenTransport !== undefined && !TOKEN_TRANSPORTS.includes(opts.tokenTransport)) {
      throw new TypeError(`ellipsis: tokenTransport must be "protocol" or "query", got ${JSON.stringify(opts.tokenTransport)}`);
    }
    const loc = globalThis.location;
    let base = opts.url ? new URL(String(opts.url), loc && loc.href) : loc ? new URL("/", loc.href) : null;
    if (!base) throw new TypeError("ellipsis: no url given and no page location to default to");
    if (!base.pathname.endsWith("/")) base.pathname += "/";
    /** The gateway's base URL (http: or https:, ending in "/"). */
    this.url = base;
    /** The connection's own user id (dev user, or the token's sub), for the self filter. */
    this.user = opts.user || (typeof opts.token === "string" ? tokenSubject(opts.token) : "");
    this.resyncMs = opts.resyncMs ?? DEFAULTS.resyncMs;
    this.pingMs = opts.pingMs ?? DEFAULTS.pingMs;
    this.pongTimeoutMs = opts.pongTimeoutMs ?? DEFAULTS.pongTimeoutMs;
    this.graceMs = opts.graceMs ?? DEFAULTS.graceMs;
    this.reconnectMinMs = opts.reconnectMinMs ?? DEFAULTS.reconnectMinMs;
    this.reconnectMaxMs = opts.reconnectMaxMs ?? DEFAULTS.reconnectMaxMs;
    /**
     * Timing and limits in use: the server's (GET /v1/config), timers
     * overridden by options. Known once connect() has fetched it (or at
     * once with fetchConfig: false).
     * @type {import("./ellipsis.js").TimingConfig | null}
     */
    this.config = null;
    this._configServed = false; // config came from the gateway's GET /v1/config
    this._activitiesServed = false; // and it listed its activities
    /** @type {import("./ellipsis.js").ConnectionState} */
    this.state = "idle";
    /** @type {Map<string, Room>} */
    this.rooms = new Map();
    this._ws = null;
    this._attempt = 0;
    this._nextId = 1;
    this._timers = { reconnect: null, ping: null, pong: null, stable: null, flush: null, watch: null };
    this._pingDue = 0; // when the ping timer should fire (clock time)
    this._doc = null; // the document listened to, for its visibilityState
    this._queue = [];
    this._tokens = opts.frameBurst ?? DEFAULTS.frameBurst;
    this._tokensAt = 0;
    this._opened = null; // {promise, resolve, reject} for connect()
    this._unlisten = [];
    // Watched rooms (insertion order): state "sending" (to send on open, or
    // sent in frame `frame` and not answered yet), "watched" (accepted on
    // this connection) or "retry" (refused unavailable / rate_limited /
    // internal: sent again when timers.watch fires).
    /** @type {Map<string, {state: "sending" | "watched" | "retry", frame: string | null}>} */
    this._watch = new Map();
    /** @type {Map<string, import("./ellipsis.js").RoomSummary>} */
    this._summaries = new Map();
    this._watchFrames = new Map(); // request id → rooms of a watch frame unanswered on this connection
    this._watchCalls = new Set(); // watch() promises waiting for answers
    this._watchCount = 0; // rooms watched on the connection, from the last watching / unwatched
    this._watchAttempt = 0; // backoff step of the retries of refused rooms
    if (opts.fetchConfig === false) this._setConfig({}); // throws RangeError
  }

  /**
   * Starts connecting (fetching the timing first unless fetchConfig is false)
   * and resolves once the connection is open. Rejects if the client is
   * closed for good first: close(), or timers that fail validation
   * (RangeError). Calling it again returns the same promise.
   * @returns {Promise<void>}
   */
  connect() {
    if (this.state === "closed" && !(this._opened && this._opened.failed)) {
      return Promise.reject(new Error("ellipsis: client is closed"));
    }
    if (this._opened) return this._opened.promise;
    if (typeof this._WebSocket !== "function") {
      // Not retried: no reconnect can fix it.
      return Promise.reject(new TypeError("ellipsis: no WebSocket: pass a constructor in the WebSocket option (Node 20 has no global WebSocket; Node 22 and browsers do)"));
    }
    let resolve, reject;
    const promise = new Promise((res, rej) => ((resolve = res), (reject = rej)));
    promise.catch(() => {}); // a caller not awaiting connect() is told through "state"
    this._opened = { promise, resolve, reject, failed: false };
    this._listenPage();
    this._open();
    return promise;
  }

  /**
   * Joins a room (now, and again after every reconnect) and returns it; the
   * same Room for the same id. `typing: false` joins without receiving the
   * room's typing (the join frame says `"typing": false`: no events, no
   * snapshots; this user's own typing there still goes out), e.g. for a
   * user who turned typing indicators off. The option is the room's for as
   * long as it is joined: join() again with another `typing` throws (leave
   * it first); join(id) without options returns the room as it is.
   * @param {string} id
   * @param {{typing?: boolean}} [opts]
   * @returns {Room}
   * @throws {TypeError} an empty id, an option of the wrong type
   * @throws {Error} another `typing` than the joined room's
   */
  join(id, opts = {}) {
    if (typeof id !== "string" || id === "") throw new TypeError("ellipsis: room id must be a non-empty string");
    if (opts === null || typeof opts !== "object") throw new TypeError(`ellipsis: join(room, opts): opts must be an object {typing?: boolean}, got ${opts === null ? "null" : typeof opts}`);
    if (opts.typing !== undefined && typeof opts.typing !== "boolean") {
      throw new TypeError(`ellipsis: join(room, {typing}): typing must be true or false, got ${JSON.stringify(opts.typing) ?? typeof opts.typing}`);
    }
    let room = this.rooms.get(id);
    if (room && opts.typing !== undefined && opts.typing !== room.receivesTyping) {
      throw new Error(`ellipsis: room ${JSON.stringify(id)} is joined with typing: ${room.receivesTyping}; leave() it before joining with typing: ${opts.typing}`);
    }
    if (!room) {
      room = new Room(this, id, opts);
      this.rooms.set(id, room);
      if (this.state === "open") room._sendJoin();
    }
    return room;
  }

  /**
   * A joined room, or undefined.
   * @param {string} id
   */
  room(id) {
    return this.rooms.get(id);
  }

  /**
   * Call on every keystroke in that room's message box (see Room.keystroke).
   * @param {string} room
   * @param {{thread?: string, activity?: string}} [opts]
   */
  keystroke(room, opts) {
    this._joined(room).keystroke(opts);
  }

  /**
   * The message was sent (in the room, or in opts.thread): typing_stop there at once.
   * @param {string} room
   * @param {{thread?: string}} [opts]
   */
  messageSent(room, opts) {
    this._joined(room).messageSent(opts);
  }

  /**
   * The message box (of the room, or of opts.thread) lost focus: typing_stop there at once.
   * @param {string} room
   * @param {{thread?: string}} [opts]
   */
  blur(room, opts) {
    this._joined(room).blur(opts);
  }

  /**
   * Who is typing in a room itself, or in one thread of it (never this user).
   * @param {string} room
   * @param {{thread?: string}} [opts]
   */
  typists(room, opts = {}) {
    const r = this._joined(room);
    return opts && opts.thread !== undefined ? r.thread(opts.thread).typists : r.typists;
  }

  /**
   * Stops typing in every room, in every scope (typing_stop where a burst is on).
   * @param {import("./typing.js").StopReason} [reason]
   */
  stopTyping(reason = "cancel") {
    for (const room of this.rooms.values()) room.stopAll(reason);
  }

  /**
   * Watches rooms without joining them: the gateway sends a "summary"
   * event per room (who types there: the first 3 typists and the total,
   * never this user) when it is accepted, then at most once per
   * watch_interval_ms (2000) while it changes (docs/protocol.md, "Watching
   * rooms"). Adds to the watched set (see `watched`); sent now when
   * open, else on connect, and again after every reconnect. Rooms go out in
   * `watch` frames of at most config.maxFrameBytes bytes (max_frame_bytes,
   * 4096), the answers merged into one result:
   * - rooms: the ids now watched (already watched ones included);
   * - refused: [{room, code, message}], code "forbidden", "watch_limit",
   *   "bad_request" (an invalid id, or one too long for a frame), or
   *   "unavailable" / "rate_limited" (those rooms stay watched and are sent
   *   again with backoff, as a join is), or "unwatched" (unwatch() came
   *   first); a room refused otherwise leaves the watched set;
   * - watched: how many rooms the connection watches after the last answer.
   * Resolves once every room of the call is answered, whatever reconnects
   * happen meanwhile. Rejects with a TypeError when rooms is not an
   * iterable of non-empty strings (as join() requires), and with an Error
   * when the client is closed (or is closed before the answers).
   * @param {Iterable<string>} rooms
   * @returns {Promise<import("./ellipsis.js").WatchResult>}
   */
  watch(rooms) {
    if (this.state === "closed") return Promise.reject(new Error("ellipsis: watch(): the client is closed"));
    let ids;
    try {
      ids = roomIds(rooms, "watch");
    } catch (err) {
      return Promise.reject(err);
    }
    let resolve, reject;
    const promise = new Promise((res, rej) => ((resolve = res), (reject = rej)));
    promise.catch(() => {}); // a caller not awaiting watch() is told through "summary" and "error"
    const call = { waiting: new Set(), rooms: [], refused: [], resolve, reject };
    const fresh = [];
    for (const id of ids) {
      const w = this._watch.get(id);
      if (w && w.state === "watched") {
        call.rooms.push(id);
        continue;
      }
      call.waiting.add(id);
      if (!w) {
        this._watch.set(id, { state: "sending", frame: null });
        fresh.push(id);
      }
    }
    this._watchCalls.add(call);
    if (this.state === "open") this._sendWatch(fresh);
    this._settleWatchCalls();
    return promise;
  }

  /**
   * Stops watching rooms (all of them without an argument): their
   * summaries stop and are forgotten at once, and an `unwatch` goes out
   * when open. A watch() still waiting for one of them reports it refused
   * "unwatched". Throws a TypeError when rooms is given and is not an
   * iterable of non-empty strings.
   * @param {Iterable<string>} [rooms]
   */
  unwatch(rooms) {
    if (this.state === "closed") return;
    const ids = rooms === undefined ? [...this._watch.keys()] : roomIds(rooms, "unwatch").filter((id) => this._watch.has(id));
    if (!ids.length) return;
    for (const id of ids) this._dropWatch(id, { room: id, code: "unwatched", message: "ellipsis: unwatch() was called before the gateway answered" });
    this._settleWatchCalls();
    if (this.state !== "open") return; // the next connection watches only what is left
    if (rooms === undefined) {
      this._send({ type: "unwatch", id: this._id() });
      return;
    }
    // A room too long for a frame was never sent, so it is not watched there.
    for (const f of packRooms("unwatch", ids, this.config.maxFrameBytes, () => this._id()).frames) this._send(f);
  }

  /**
   * The last summary of a watched room ({room, typing, total}, frozen), or
   * undefined before its first (or once it is unwatched or refused). Kept
   * across a reconnect until the re-watch's first summary replaces it.
   * @param {string} room
   * @returns {import("./ellipsis.js").RoomSummary | undefined}
   */
  summary(room) {
    return this._summaries.get(room);
  }

  /**
   * The rooms watched (a copy, in the order first watched): accepted, or
   * waiting for the gateway's answer or a retry.
   * @returns {Set<string>}
   */
  get watched() {
    return new Set(this._watch.keys());
  }

  /** Closes the connection for good (typing is stopped first). */
  close() {
    if (this.state === "closed") return;
    this.stopTyping("cancel");
    this._flushQueue(true);
    for (const room of this.rooms.values()) room._dispose();
    for (const off of this._unlisten) off();
    this._unlisten = [];
    const ws = this._ws;
    this._detach();
    if (ws) {
      try {
        ws.close(1000, "client closed");
      } catch {
        /* already closing */
      }
    }
    this._clearTimers();
    this._setState("closed", {});
    if (this._opened) this._opened.reject(new Error("ellipsis: client closed"));
    this._rejectWatchCalls(new Error("ellipsis: watch(): the client was closed before the gateway answered"));
  }

  // ---- connection ----

  _joined(id) {
    const room = this.rooms.get(id);
    if (!room) throw new Error(`ellipsis: room ${JSON.stringify(id)} is not joined; call join() first`);
    return room;
  }

  _setConfig(server, served = false) {
    const o = this._opts;
    const acts = Array.isArray(server.activities) ? server.activities.filter((a) => typeof a === "string" && a !== "") : null;
    const cfg = {
      ttlMs: o.ttlMs ?? server.ttl_ms ?? DEFAULTS.ttlMs,
      refreshMs: o.refreshMs ?? server.refresh_ms ?? DEFAULTS.refreshMs,
      idleStopMs: o.idleStopMs ?? server.idle_stop_ms ?? DEFAULTS.idleStopMs,
      auth: server.auth || (o.token ? "jwt" : "none"),
      maxFrameBytes: Number.isInteger(server.max_frame_bytes) && server.max_frame_bytes > 0 ? server.max_frame_bytes : DEFAULT_MAX_FRAME_BYTES,
      // "typing" is always accepted, whatever a gateway lists.
      activities: Object.freeze(acts ? [...new Set(["typing", ...acts])] : [...ACTIVITIES]),
      maxThreadsPerUser: Number.isInteger(server.max_threads_per_user) && server.max_threads_per_user > 0 ? server.max_threads_per_user : null,
    };
    validateTimers(cfg); // throws RangeError
    this.config = cfg;
    this._configServed = served;
    this._activitiesServed = !!acts;
    for (const room of this.rooms.values()) room._configure();
  }

  // Does the gateway take `thread` on typing frames? Not one whose GET
  // /v1/config said no max_threads_per_user (older than threads: it would
  // show a thread's typing in the room). Without a served config
  // (fetchConfig: false) it is taken to, unless `said` asks whether the
  // gateway said so.
  _takesThreads(said = false) {
    if (this.config && this.config.maxThreadsPerUser !== null) return true;
    return !said && !this._configServed;
  }

  async _loadConfig() {
    if (!this._fetch) throw new Error("ellipsis: no fetch() to read /v1/config; pass fetchConfig: false and the timers");
    const res = await this._fetch(new URL("v1/config", this.url).href, { cache: "no-store" });
    if (!res.ok) throw new Error(`ellipsis: GET /v1/config: HTTP ${res.status}`);
    const body = await res.json();
    try {
      this._setConfig(body, true);
    } catch (err) {
      err.fatal = true;
      throw err;
    }
  }

  /**
   * The WebSocket URL and subprotocols of one connect (docs/protocol.md,
   * "Where the token travels"). With a token and tokenTransport "protocol" (the
   * default) the token travels in Sec-WebSocket-Protocol as
   * "ellipsis.bearer.<JWT>" next to "ellipsis.v1", never in the URL that
   * access logs keep; "query" sends the deprecated ?access_token= for a
   * gateway older than that.
   * @returns {Promise<{href: string, protocols: string[] | undefined}>}
   */
  async _wsTarget() {
    const u = new URL("v1/ws", this.url);
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    const { token, user, name } = this._opts;
    let protocols;
    if (token) {
      const raw = typeof token === "function" ? await token() : token;
      // A token endpoint's trailing newline is not part of the JWT.
      const t = typeof raw === "string" ? raw.trim() : raw;
      if (!t || typeof t !== "string") throw new Error("ellipsis: token() gave no token");
      this.user = tokenSubject(t) || this.user;
      if ((this._opts.tokenTransport ?? "protocol") === "query") {
        u.searchParams.set("access_token", t);
      } else {
        // A subprotocol is an RFC 7230 token; a JWT's base64url and "."
        // always are, anything else would make new WebSocket() throw.
        if (!TCHARS.test(t)) {
          const err = new Error("ellipsis: the token is not a JWT: it has characters not allowed in Sec-WebSocket-Protocol (RFC 7230 token); check what the token option returns (tokenTransport: \"query\" sends any other kind of token in the URL)");
          // A fixed token stays wrong; a token function may answer an error
          // page once (a 502 from the token endpoint) and a JWT next time,
          // so the client retries it with backoff.
          err.fatal = typeof token !== "function";
          throw err;
        }
        protocols = [PROTOCOL_V1, BEARER_PREFIX + t];
      }
    } else if (user) {
      u.searchParams.set("user", user);
      if (name) u.searchParams.set("name", name);
    }
    for (const room of this.rooms.values()) for (const scope of room._scopes.values()) scope.store.self = this.user;
    return { href: u.href, protocols };
  }

  async _open() {
    if (this.state === "closed") return;
    this._timers.reconnect = null;
    this._setState("connecting", { attempt: this._attempt });
    let target;
    try {
      if (!this.config) await this._loadConfig();
      target = await this._wsTarget();
    } catch (err) {
      if (this.state === "closed") return;
      this.emit("error", err);
      if (err && err.fatal) return this._fail(err);
      return this._scheduleReconnect({ error: err });
    }
    if (this.state === "closed") return;
    let ws;
    try {
      ws = target.protocols ? new this._WebSocket(target.href, target.protocols) : new this._WebSocket(target.href);
    } catch (err) {
      this.emit("error", err);
      return this._scheduleReconnect({ error: err });
    }
    this._ws = ws;
    ws.onopen = () => this._onOpen(ws);
    ws.onmessage = (e) => this._onMessage(ws, e.data);
    ws.onclose = (e) => this._onClose(ws, e.code, e.reason);
    ws.onerror = () => {}; // a close event follows
  }

  _onOpen(ws) {
    if (ws !== this._ws) return;
    this._tokens = this._opts.frameBurst ?? DEFAULTS.frameBurst;
    this._tokensAt = this._clock.now();
    this._setState("open", { attempt: this._attempt });
    // Reset the backoff only once the connection proved stable: a gateway
    // that accepts and drops at once must not be hammered.
    this._timers.stable = this._clock.setTimeout(() => (this._attempt = 0), this._opts.stableMs ?? DEFAULTS.stableMs);
    this._armPing();
    for (const room of this.rooms.values()) room._sendJoin();
    this._sendWatch([...this._watch.keys()]);
    if (this._opened) this._opened.resolve();
  }

  _onClose(ws, code, reason) {
    if (ws !== this._ws) return;
    this._detach();
    this._lost({ code, reason });
  }

  // The connection is gone (closed, or dropped by us): forget per-connection
  // state and reconnect.
  _lost(detail) {
    this._clearTimers();
    this._flushQueue(true);
    for (const room of this.rooms.values()) room._disconnected();
    this._watchDisconnected();
    if (this.state === "closed") return;
    // 1008: token expired or sustained abuse; a fixed token will not do
    // better next time.
    if (detail.code === 1008 && typeof this._opts.token === "string") {
      const err = new Error(`ellipsis: closed by the gateway: ${detail.reason || "policy violation"} (1008)`);
      this.emit("error", err);
      return this._fail(err, detail);
    }
    this._scheduleReconnect(detail);
  }

  _fail(err, detail = {}) {
    this._clearTimers();
    for (const off of this._unlisten) off();
    this._unlisten = [];
    this._setState("closed", { ...detail, error: err });
    if (this._opened) {
      this._opened.failed = true;
      this._opened.reject(err);
    }
    this._rejectWatchCalls(err);
  }

  _scheduleReconnect(detail) {
    const delayMs = backoffDelay(this._attempt, this.reconnectMinMs, this.reconnectMaxMs);
    this._attempt++;
    this._setState("reconnecting", { ...detail, attempt: this._attempt, delayMs });
    this._timers.reconnect = this._clock.setTimeout(() => this._open(), delayMs);
  }

  // Reconnect now if waiting (the browser came back online).
  _reconnectNow() {
    if (this.state !== "reconnecting") return;
    this._clock.clearTimeout(this._timers.reconnect);
    this._open();
  }

  _detach() {
    const ws = this._ws;
    if (!ws) return;
    ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    this._ws = null;
  }

  _clearTimers() {
    for (const k of Object.keys(this._timers)) {
      this._clock.clearTimeout(this._timers[k]);
      this._timers[k] = null;
    }
  }

  _setState(state, detail) {
    const previous = this.state;
    this.state = state;
    this.emit("state", { state, previous, attempt: this._attempt, ...detail });
  }

  // Keepalive: a ping every pingMs; no frame at all within pongTimeoutMs
  // after it means the connection is dead (a proxy or NAT dropped it
  // silently): drop it and reconnect.
  _armPing() {
    this._clock.clearTimeout(this._timers.ping);
    this._pingDue = this._clock.now() + this.pingMs;
    this._timers.ping = this._clock.setTimeout(() => {
      this._timers.ping = null;
      if (this.state !== "open") return;
      if (this._checkGap(this._pingDue)) return; // _wake pinged
      this._ping();
    }, this.pingMs);
  }

  // Sends a ping now, unless one is unanswered; no frame within
  // pongTimeoutMs drops the connection.
  _ping() {
    if (this.state !== "open" || this._timers.pong !== null) return;
    this._clock.clearTimeout(this._timers.ping);
    this._timers.ping = null;
    this._write({ type: "ping", id: this._id() });
    this._timers.pong = this._clock.setTimeout(() => {
      const ws = this._ws;
      this._detach();
      if (ws) {
        try {
          ws.close(4000, "keepalive timeout");
        } catch {
          /* ignore */
        }
      }
      this._lost({ code: 4000, reason: "keepalive timeout" });
    }, this.pongTimeoutMs);
  }

  // ---- back from the background ----

  // True (and every room resynced) when a timer due at `due` fired so late
  // that the machine must have slept. A hidden page's timers are throttled
  // on purpose (Chrome runs them as rarely as once a minute), so lateness
  // then means nothing; "visible" covers its return.
  _checkGap(due) {
    if (this._doc && this._doc.visibilityState === "hidden") return false;
    const late = this._clock.now() - due;
    if (!(late > Math.max(2 * this.pingMs, WAKE_GAP_FLOOR_MS))) return false;
    this._wake("wake");
    return true;
  }

  // The page came back (reason "visible" | "online" | "wake"): a fresh
  // snapshot for every joined room, and a ping, since the connection may
  // have died silently meanwhile (a hidden page's keepalive is throttled
  // too). Rooms still joining get theirs from the join's reply; a room
  // with a sync in flight or sent within RESYNC_COALESCE_MS is not synced
  // again, so triggers arriving together make one sync per room.
  _wake(reason) {
    if (this.state !== "open") return;
    this._ping();
    const rooms = [];
    for (const room of this.rooms.values()) if (room._resyncNow()) rooms.push(room.id);
    if (rooms.length) this.emit("resync", { reason, rooms });
  }

  _onMessage(ws, data) {
    if (ws !== this._ws) return;
    // Any frame proves the connection alive.
    if (this._timers.pong !== null) {
      this._clock.clearTimeout(this._timers.pong);
      this._timers.pong = null;
      this._armPing();
    }
    let f;
    try {
      f = JSON.parse(data);
    } catch {
      return;
    }
    if (!f || typeof f !== "object") return;
    if (f.type === "error") {
      this.emit("error", f);
      // A frame over the gateway's inbound limit is dropped undecoded: its
      // rate_limited error names no room and no id. A join in flight may
      // be the dropped frame, so each is retried (joining twice is harmless).
      if (f.code === "rate_limited" && typeof f.room !== "string" && !(f.id && this._watchFrames.has(f.id))) {
        for (const room of this.rooms.values()) room._maybeDropped();
        this._watchMaybeDropped();
      }
      if (f.id && this._watchFrames.has(f.id)) return this._watchFailed(f);
    }
    if (f.type === "pong") return;
    if (f.type === "watching") return this._onWatching(f);
    if (f.type === "unwatched") {
      if (Number.isInteger(f.watched)) this._watchCount = f.watched;
      return;
    }
    if (f.type === "summary") return this._onSummary(f);
    const room = typeof f.room === "string" ? this.rooms.get(f.room) : undefined;
    if (room) room._receive(f);
  }

  _id() {
    return `c${this._nextId++}`;
  }

  // ---- outbound, paced under the gateway's inbound limit ----

  // Sends now if the pacing allows, else queues (coalescing: one pending
  // frame per room and kind, per scope for typing frames (the room itself
  // and each thread), the latest typing frame wins).
  _send(frame) {
    if (this.state !== "open" || !this._ws) return false;
    this._refill();
    if (this._queue.length === 0 && this._tokens >= 1) {
      this._tokens--;
      return this._write(frame);
    }
    const kind = frame.type.startsWith("typing_") ? "typing" : frame.type;
    // watch / unwatch frames name no room: each is queued as it is.
    const i =
      frame.room === undefined
        ? -1
        : this._queue.findIndex((q) => q.room === frame.room && (q.type.startsWith("typing_") ? "typing" : q.type) === kind && (kind !== "typing" || q.thread === frame.thread));
    // A start's id (a thread's, for its too_many_threads answer) stays on the start replacing it.
    if (i >= 0 && kind === "typing") this._queue[i] = frame.type === "typing_start" && this._queue[i].id && !frame.id ? { ...frame, id: this._queue[i].id } : frame;
    else if (i < 0) this._queue.push(frame);
    this._scheduleFlush();
    return true;
  }

  _refill() {
    const rate = this._opts.maxFramesPerSecond ?? DEFAULTS.maxFramesPerSecond;
    const burst = this._opts.frameBurst ?? DEFAULTS.frameBurst;
    const now = this._clock.now();
    this._tokens = Math.min(burst, this._tokens + ((now - this._tokensAt) * rate) / 1000);
    this._tokensAt = now;
  }

  _scheduleFlush() {
    if (this._timers.flush !== null) return;
    const rate = this._opts.maxFramesPerSecond ?? DEFAULTS.maxFramesPerSecond;
    const wait = Math.max(1, Math.ceil(((1 - this._tokens) * 1000) / rate));
    this._timers.flush = this._clock.setTimeout(() => {
      this._timers.flush = null;
      this._flushQueue(false);
    }, wait);
  }

  _flushQueue(drop) {
    if (drop) {
      this._queue = [];
      return;
    }
    this._refill();
    while (this._queue.length && this._tokens >= 1) {
      this._tokens--;
      this._write(this._queue.shift());
    }
    if (this._queue.length) this._scheduleFlush();
  }

  _write(frame) {
    const ws = this._ws;
    if (!ws || ws.readyState !== 1) return false;
    try {
      ws.send(JSON.stringify(frame));
      return true;
    } catch {
      return false;
    }
  }

  // ---- watched rooms ----

  // Sends watch frames for rooms (open connection), split under the
  // gateway's frame limit; a room too long for any frame is refused here.
  _sendWatch(rooms) {
    if (!rooms.length || this.state !== "open") return;
    const max = this.config.maxFrameBytes;
    const { frames, tooLong } = packRooms("watch", rooms, max, () => this._id());
    for (const f of frames) {
      this._watchFrames.set(f.id, f.rooms);
      for (const room of f.rooms) {
        const w = this._watch.get(room);
        if (w) Object.assign(w, { state: "sending", frame: f.id });
      }
      this._send(f);
    }
    for (const room of tooLong) {
      const message = `ellipsis: room id of ${byteLength(JSON.stringify(room))} bytes does not fit in a watch frame of max_frame_bytes ${max}`;
      this._watchAnswer(room, null, { room, code: "bad_request", message });
    }
    if (tooLong.length) this._settleWatchCalls();
  }

  _onWatching(f) {
    if (f.id) this._watchFrames.delete(f.id);
    if (Number.isInteger(f.watched)) this._watchCount = f.watched;
    let retry = false;
    for (const room of Array.isArray(f.rooms) ? f.rooms : []) {
      if (typeof room === "string") this._watchAnswer(room, f.id);
    }
    for (const r of Array.isArray(f.refused) ? f.refused : []) {
      if (!r || typeof r.room !== "string") continue;
      const refusal = { room: r.room, code: String(r.code ?? "internal"), message: String(r.message ?? "") };
      if (this._watchAnswer(r.room, f.id, refusal) && RETRY_CODES.has(refusal.code)) retry = true;
    }
    if (!retry) this._watchAttempt = 0;
    this._settleWatchCalls();
  }

  // An error frame answering a watch frame (an older gateway's
  // unknown_type, a bad_request): every room of it is refused with it. The
  // error was emitted already.
  _watchFailed(f) {
    const rooms = this._watchFrames.get(f.id);
    this._watchFrames.delete(f.id);
    const refusal = { code: String(f.code), message: String(f.message ?? "") };
    for (const room of rooms) this._watchAnswer(room, f.id, { room, ...refusal }, true);
    this._settleWatchCalls();
  }

  // One room's answer (refusal null: accepted) from the frame `frame`
  // (null: not from the gateway). Ignored for a room no longer watched or
  // sent again since. True when it applied.
  _watchAnswer(room, frame, refusal = null, emitted = false) {
    const w = this._watch.get(room);
    if (!w || (frame && w.frame !== frame)) return false;
    let awaited = false;
    for (const call of this._watchCalls) {
      if (!call.waiting.delete(room)) continue;
      awaited = true;
      if (refusal) call.refused.push(refusal);
      else call.rooms.push(room);
    }
    if (!refusal) {
      Object.assign(w, { state: "watched", frame: null });
      return true;
    }
    // Nobody awaits this answer (a re-watch after a reconnect, a retry):
    // the refusal is told as an error frame about the room.
    if (!awaited && !emitted) this.emit("error", { type: "error", ...refusal });
    if (RETRY_CODES.has(refusal.code)) {
      Object.assign(w, { state: "retry", frame: null });
      this._scheduleWatchRetry();
    } else {
      this._watch.delete(room);
      this._summaries.delete(room);
    }
    return true;
  }

  // Stops watching a room locally; a watch() waiting for it gets `refusal`.
  _dropWatch(room, refusal) {
    this._watch.delete(room);
    this._summaries.delete(room);
    for (const call of this._watchCalls) if (call.waiting.delete(room)) call.refused.push(refusal);
  }

  _settleWatchCalls() {
    for (const call of this._watchCalls) {
      if (call.waiting.size) continue;
      this._watchCalls.delete(call);
      call.resolve({ rooms: call.rooms, refused: call.refused, watched: this._watchCount });
    }
  }

  _rejectWatchCalls(err) {
    for (const call of this._watchCalls) call.reject(err);
    this._watchCalls.clear();
  }

  // Refused rooms waiting to be sent again: one timer for them all,
  // backing off as a join's retries do.
  _scheduleWatchRetry() {
    if (this._timers.watch !== null) return;
    const delay = backoffDelay(this._watchAttempt++, this.reconnectMinMs, this.reconnectMaxMs);
    this._timers.watch = this._clock.setTimeout(() => {
      this._timers.watch = null;
      const rooms = [];
      for (const [room, w] of this._watch) if (w.state === "retry") rooms.push(room);
      this._sendWatch(rooms);
    }, delay);
  }

  // An id-less rate_limited error: the gateway dropped a frame undecoded,
  // maybe a watch frame in flight; their rooms are sent again with backoff
  // (watching a room twice is harmless). A late answer still counts.
  _watchMaybeDropped() {
    if (!this._watchFrames.size) return;
    for (const rooms of this._watchFrames.values()) {
      for (const room of rooms) {
        const w = this._watch.get(room);
        if (w && w.state === "sending") w.state = "retry";
      }
    }
    this._scheduleWatchRetry();
  }

  // The connection is gone: nothing is watched on the next one until it
  // is sent there (on open). Summaries stay until the re-watch's replace them.
  _watchDisconnected() {
    this._watchFrames.clear();
    this._watchCount = 0;
    for (const w of this._watch.values()) Object.assign(w, { state: "sending", frame: null });
  }

  _onSummary(f) {
    if (typeof f.room !== "string" || !this._watch.has(f.room) || !Array.isArray(f.typing)) return;
    const typing = f.typing
      .filter((t) => t && typeof t.user === "string" && t.user !== "")
      .map(({ user, name, activity }) => {
        const t = typeof name === "string" && name ? { user, name } : { user };
        const a = activityOf(activity);
        if (a) t.activity = a;
        return Object.freeze(t);
      });
    const total = Number.isFinite(f.total) ? Math.max(typing.length, Math.floor(f.total)) : typing.length;
    const summary = Object.freeze({ room: f.room, typing: Object.freeze(typing), total });
    this._summaries.set(f.room, summary);
    this.emit("summary", summary);
  }

  // ---- page lifecycle ----

  _listenPage() {
    const stopOnHide = this._opts.stopOnHide !== false;
    const win = this._opts.window ?? globalThis.window;
    const doc = this._opts.document ?? globalThis.document;
    this._doc = doc && typeof doc.addEventListener === "function" ? doc : null;
    const add = (target, type, fn) => {
      if (!target || typeof target.addEventListener !== "function") return;
      target.addEventListener(type, fn);
      this._unlisten.push(() => target.removeEventListener(type, fn));
    };
    // A tab that goes away (closed, navigated, hidden) is no longer typing.
    if (stopOnHide) add(win, "pagehide", () => this.stopTyping("hidden"));
    // A tab back in front may have missed events (a throttled or frozen
    // background tab, a link that died meanwhile): resync at once rather
    // than showing stale typists until the next periodic resync.
    add(doc, "visibilitychange", () => {
      if (doc.visibilityState === "hidden") {
        if (stopOnHide) this.stopTyping("hidden");
      } else if (doc.visibilityState === "visible") {
        this._wake("visible");
      }
    });
    // Back online: reconnect now if waiting; if the socket looks open,
    // resync and ping it (it may be half-dead after the network change).
    add(win, "online", () => {
      if (this.state === "reconnecting") this._reconnectNow();
      else this._wake("online");
    });
  }
}

/**
 * A joined room: who is typing there, per scope (the room itself and each
 * thread of it, each a TypistStore fed by the gateway), and this user's own
 * typing per scope (a TypingTimer each). Events:
 * - "change" (typists, total): the room scope's typists, or their total,
 *   changed (never for an event about a thread).
 * - "threads" (threads): the typists of a thread changed; `threads` is
 *   room.threads.
 * - "state" ({state, code?, message?}): "joining" | "joined" | "error" | "left".
 * - "error" (frame): an error frame about this room (too_many_threads
 *   carries the `thread` the client refused, when the client refused it).
 */
export class Room extends Emitter {
  /**
   * @param {Client} client
   * @param {string} id
   * @param {{typing?: boolean}} [opts]
   */
  constructor(client, id, opts = {}) {
    super();
    this.client = client;
    this.id = id;
    /**
     * False when joined with {typing: false}: the gateway sends no typing of
     * this room (typists stay empty); this user's own typing still goes out.
     */
    this.receivesTyping = opts.typing !== false;
    /** @type {"joining" | "joined" | "error" | "left"} */
    this.state = "joining";
    this._clock = client._clock;
    /** @type {Map<string, Scope>} "" = the room itself, else a thread id; threads in the order first seen */
    this._scopes = new Map();
    /** @type {Map<string, Thread>} the handles room.thread() gave */
    this._handles = new Map();
    /** @type {Map<string, string>} request id of a thread's start → the thread (for too_many_threads) */
    this._startIds = new Map();
    this._threadSnapshots = false; // a snapshot of this room carried `threads`
    this._inSnapshot = false; // a snapshot is being applied: "threads" waits for its end
    this._threadsChanged = false;
    this._scope("", true);
    this._joinId = null;
    this._joinAttempt = 0;
    this._retry = null;
    this._resync = null;
    this._resyncDue = 0;
    this._syncId = null; // the sync in flight (its id), until its reply
    this._syncAt = -Infinity; // when the last sync went out (clock time)
  }

  /** Who is typing in the room itself now, in the order they started (never this user). */
  get typists() {
    return this._scopes.get("").store.typists;
  }

  /**
   * How many type in the room itself now (never this user): the typists
   * listed plus those the gateway counted in a cut snapshot (it lists at
   * most ELLIPSIS_SNAPSHOT_MAX, default 100) and no event has listed since.
   */
  get total() {
    return this._scopes.get("").store.total;
  }

  /**
   * Who types in the room's threads (never this user): one entry
   * {thread, typists, total} per thread with someone typing, in the order
   * the threads were first seen. For a channel view's "Alice is typing in
   * a thread…" (formatTypists' `threads`).
   * @returns {{thread: string, typists: import("./store.js").Typist[], total: number}[]}
   */
  get threads() {
    const out = [];
    for (const s of this._scopes.values()) {
      if (s.thread && s.store.total > 0) out.push({ thread: s.thread, typists: s.store.typists, total: s.store.total });
    }
    return out;
  }

  /**
   * The handle of one thread of this room (who types there, and this
   * user's typing there); the same object for the same id while the room
   * is joined. Throws a TypeError for an id that is not a non-empty string.
   * @param {string} id
   * @returns {Thread}
   */
  thread(id) {
    const key = threadKey(id, "thread(id)");
    if (!key) throw new TypeError("ellipsis: thread(id): id must be a non-empty string (a thread id, with the rules of a room id)");
    let h = this._handles.get(key);
    if (!h) {
      h = new Thread(this, key);
      this._handles.set(key, h);
    }
    return h;
  }

  /** True while this user's typing burst is on in the room itself. */
  get typing() {
    return this._scopes.get("").typing;
  }

  /** Counters of this user's typing in the room itself: keystrokes, starts, refreshes, changes, stops, idleStops. */
  get stats() {
    return this._scopes.get("").stats;
  }

  /**
   * Call on every keystroke that changes the draft: in the room itself, or
   * with `thread` in that thread of it (each scope has its own typing_start,
   * refresh and idle stop). `activity` (default "typing") is what receivers
   * see ("thinking", "recording_audio", "recording_video", "uploading", or
   * one the gateway's ELLIPSIS_ACTIVITIES adds); another activity than the
   * one shown sends a typing_start at once (a state change).
   * A thread start past the gateway's max_threads_per_user (5) threads this
   * connection types in, in this room, is not sent: the room emits an
   * "error" {code: "too_many_threads", room, thread, message} once, until
   * one of the other threads' bursts ends.
   * @param {{thread?: string, activity?: string}} [opts]
   * @throws {TypeError | RangeError} a bad thread or activity, naming it
   */
  keystroke(opts = {}) {
    const scope = this._own(opts, "keystroke");
    if (!scope) return;
    const activity = activityKey(opts.activity, this._activities(), "keystroke");
    if (!scope.typing && !this._admit(scope)) return;
    const changed = scope.typing && activity !== scope.activity;
    scope.activity = activity;
    scope.timer.keystroke();
    if (changed) scope.timer.change();
  }

  /**
   * Shows this user doing `activity` (in the room itself, or in `thread`)
   * from now until stop(), messageSent(), blur() or the page is hidden:
   * a typing_start now (or at once, when another activity was shown), then
   * one every refresh_ms, with no idle stop. For an activity without
   * keystrokes: recording a voice message or a video, uploading. A
   * keystroke afterwards turns it back into typing, with the idle stop.
   * @param {string} activity
   * @param {{thread?: string}} [opts]
   * @throws {TypeError | RangeError} a bad thread or activity, naming it
   */
  startActivity(activity, opts = {}) {
    if (activity === undefined || activity === null) throw new TypeError("ellipsis: startActivity(activity): activity is required (such as \"recording_audio\")");
    const scope = this._own(opts, "startActivity");
    if (!scope) return;
    const act = activityKey(activity, this._activities(), "startActivity");
    if (!scope.typing && !this._admit(scope)) return;
    const changed = scope.typing && act !== scope.activity;
    scope.activity = act;
    scope.timer.hold();
    if (changed) scope.timer.change();
  }

  /**
   * The message was posted (in the room itself, or in `thread`): typing_stop
   * there at once.
   * @param {{thread?: string}} [opts]
   */
  messageSent(opts = {}) {
    const scope = this._find(opts, "messageSent");
    if (!scope) return;
    scope.refused = false;
    if (scope.timer) scope.timer.messageSent();
    this._maybeDrop(scope);
  }

  /**
   * The message box (of the room itself, or of `thread`) lost focus:
   * typing_stop there at once.
   * @param {{thread?: string}} [opts]
   */
  blur(opts = {}) {
    const scope = this._find(opts, "blur");
    if (scope && scope.timer) scope.timer.blur();
  }

  /**
   * Ends this user's typing burst now, if one is on: in the room itself
   * (`stop(reason)`), or in a thread (`stop({thread, reason})`). Bursts in
   * the other scopes go on; client.stopTyping() and leave() end them all.
   * @param {import("./typing.js").StopReason | {thread?: string, reason?: import("./typing.js").StopReason}} [arg]
   */
  stop(arg = "cancel") {
    const opts = typeof arg === "string" ? { reason: arg } : arg || {};
    const scope = this._find(opts, "stop");
    if (scope && scope.timer) scope.timer.stop(opts.reason ?? "cancel");
  }

  /**
   * Ends this user's bursts in every scope of the room (the room itself
   * and every thread).
   * @param {import("./typing.js").StopReason} [reason]
   */
  stopAll(reason = "cancel") {
    for (const scope of [...this._scopes.values()]) if (scope.timer) scope.timer.stop(reason);
  }

  /**
   * Asks the gateway for a fresh snapshot now (its `typing` reply replaces
   * the typists). At most one sync per room is in flight: while one waits
   * for its reply (at most pongTimeoutMs; past that it counts as lost),
   * this sends nothing. Returns true when a sync went out (or was queued
   * under the outbound pacing); false too for a room joined with
   * {typing: false}, which has no typists to refresh.
   * @returns {boolean}
   */
  sync() {
    if (this.state !== "joined" || !this.receivesTyping) return false;
    const now = this._clock.now();
    if (this._syncId !== null && now - this._syncAt < this.client.pongTimeoutMs) return false;
    const id = this.client._id();
    if (!this.client._send({ type: "sync", room: this.id, id })) return false;
    this._syncId = id;
    this._syncAt = now;
    return true;
  }

  // A trigger (visible, online, wake) asks for a snapshot: one unless a
  // sync is in flight or went out within RESYNC_COALESCE_MS; the periodic
  // resync then restarts its period. True when a sync went out.
  _resyncNow() {
    if (this.state !== "joined") return false;
    if (this._clock.now() - this._syncAt < RESYNC_COALESCE_MS) return false;
    if (!this.sync()) return false;
    this._armResync(false);
    return true;
  }

  /** Leaves the room for good: stops typing in every scope, sends leave, forgets the typists. */
  leave() {
    if (this.state === "left") return;
    this.stopAll("leave");
    if (this.state === "joined" || this._joinId) this.client._send({ type: "leave", room: this.id, id: this.client._id() });
    this._dispose();
    for (const scope of this._scopes.values()) scope.store.clear();
    this.client.rooms.delete(this.id);
    this._setState("left");
  }

  // ---- scopes ----

  // The scope of a thread key ("" the room itself); made when `create`.
  _scope(key, create) {
    let scope = this._scopes.get(key);
    if (scope || !create) return scope;
    scope = new Scope({
      thread: key,
      self: this.client.user,
      graceMs: this.client.graceMs,
      clock: this._clock,
      send: (s, action) => this._sendTyping(s, action),
    });
    scope.store.on("change", (typists, total) => {
      if (!key) {
        this.emit("change", typists, total);
        this.client.emit("change", this, typists, total);
        return;
      }
      const h = this._handles.get(key);
      if (h) h.emit("change", typists, total);
      this._maybeDrop(scope);
      // A snapshot changes many threads at once: one "threads" after it.
      if (this._inSnapshot) {
        this._threadsChanged = true;
        return;
      }
      const threads = this.threads;
      this.emit("threads", threads);
      this.client.emit("threads", this, threads);
    });
    if (this.client.config) scope.configure(this.client.config);
    this._scopes.set(key, scope);
    return scope;
  }

  // The scope for this user's own typing per opts.thread, made when
  // missing; null when the room was left or the timing is not known.
  _own(opts, where) {
    if (opts === null || typeof opts !== "object") throw new TypeError(`ellipsis: ${where}: options must be an object {thread?, activity?}, got ${opts === null ? "null" : typeof opts}`);
    const key = threadKey(opts.thread, where);
    if (this.state === "left") return null;
    const scope = this._scope(key, true);
    if (!scope.timer && this.client.config) scope.configure(this.client.config);
    return scope.timer ? scope : null;
  }

  // An existing scope per opts.thread (calls that only end typing).
  _find(opts, where) {
    if (opts === null || typeof opts !== "object") throw new TypeError(`ellipsis: ${where}: options must be an object {thread?}, got ${opts === null ? "null" : typeof opts}`);
    return this._scopes.get(threadKey(opts.thread, where));
  }

  // The activities the gateway accepts, when it said (GET /v1/config).
  _activities() {
    const cfg = this.client.config;
    return cfg && this.client._activitiesServed ? cfg.activities : null;
  }

  // May a burst begin in this scope? The room itself always; a thread
  // while this connection types in fewer than max_threads_per_user other
  // threads of the room, and unless the gateway refused it (until another
  // thread's burst ends, or a message is posted there).
  _admit(scope) {
    if (!scope.thread) return true;
    if (scope.refused) return false;
    const max = this.client.config ? this.client.config.maxThreadsPerUser : null;
    if (!(max > 0)) return true;
    let on = 0;
    for (const s of this._scopes.values()) if (s.thread && s.typing) on++;
    if (on < max) return true;
    scope.refused = true;
    const err = {
      type: "error",
      code: "too_many_threads",
      room: this.id,
      thread: scope.thread,
      message: `ellipsis: not typing in thread ${JSON.stringify(scope.thread)}: this connection types in ${on} threads of room ${JSON.stringify(this.id)} already (max_threads_per_user ${max})`,
    };
    this.client.emit("error", err);
    this.emit("error", err);
    return false;
  }

  // A thread scope with nobody typing, no burst of this user and no
  // handle is forgotten (a busy room's threads come and go).
  _maybeDrop(scope) {
    if (!scope.thread || scope.typing || scope.refused || scope.store.total > 0 || this._handles.has(scope.thread)) return;
    if (this._scopes.get(scope.thread) !== scope) return;
    this._scopes.delete(scope.thread);
    scope.dispose();
  }

  // A thread burst ended: a thread refused at the limit may start again.
  _threadFreed() {
    for (const s of this._scopes.values()) {
      if (!s.refused) continue;
      s.refused = false;
      this._maybeDrop(s);
    }
  }

  // The timing is known (or changed): build the typing timers.
  _configure() {
    const cfg = this.client.config;
    if (!cfg) return;
    for (const scope of this._scopes.values()) scope.configure(cfg);
  }

  // Typing frames only go out once the join is acknowledged on this
  // connection; a burst begun before that is announced on "joined". A
  // thread's frames go out only to a gateway that takes threads: one whose
  // GET /v1/config did not say max_threads_per_user takes none, and would
  // show the thread's typing in the room itself.
  _sendTyping(scope, action) {
    const type = action === "stop" ? "typing_stop" : "typing_start";
    if (scope.thread && action === "stop") {
      this._threadFreed();
      queueMicrotask(() => this._maybeDrop(scope));
    }
    if (this.state !== "joined") return;
    if (scope.thread && !this.client._takesThreads()) return;
    const f = scope.frame(type, this.id);
    // A thread's start that may be refused (too_many_threads) carries an
    // id, so the refusal names its thread.
    if (scope.thread && (action === "start" || action === "change")) f.id = this._startId(scope.thread);
    this.client._send(f);
  }

  _startId(thread) {
    const id = this.client._id();
    this._startIds.set(id, thread);
    // Only the latest starts can still be answered: keep 32.
    if (this._startIds.size > 32) this._startIds.delete(this._startIds.keys().next().value);
    return id;
  }

  _sendJoin() {
    if (this.state === "left") return;
    this.client._clock.clearTimeout(this._retry);
    this._retry = null;
    this._joinId = this.client._id();
    if (this.state !== "joining") this._setState("joining");
    const f = { type: "join", room: this.id, id: this._joinId };
    if (!this.receivesTyping) f.typing = false;
    this.client._send(f);
  }

  _disconnected() {
    this._joinId = null;
    this._syncId = null; // the rejoin's snapshot replaces its answer
    this._startIds.clear();
    this._clock.clearTimeout(this._retry);
    this._clock.clearTimeout(this._resync);
    this._retry = this._resync = null;
    // The server dropped this connection's typing; a burst still on is
    // announced again after the rejoin. Typists stay until the snapshot of
    // the rejoin replaces them, or they expire locally.
    if (this.state === "joined") this._setState("joining");
  }

  _dispose() {
    this._clock.clearTimeout(this._retry);
    this._clock.clearTimeout(this._resync);
    this._retry = this._resync = null;
    for (const scope of this._scopes.values()) scope.dispose();
  }

  // Periodic resync, the first at a random point of the period so the
  // rooms of a connection spread their syncs. None for a room joined with
  // {typing: false}.
  _armResync(first) {
    const every = this.client.resyncMs;
    if (!(every > 0) || !this.receivesTyping) return;
    this._clock.clearTimeout(this._resync);
    const wait = first ? every / 2 + Math.random() * (every / 2) : every;
    this._resyncDue = this._clock.now() + wait;
    this._resync = this._clock.setTimeout(() => {
      this._resync = null;
      if (this.client._checkGap(this._resyncDue)) {
        // Every room was resynced; one that declined (a sync in flight or
        // just sent) keeps its period.
        if (this._resync === null) this._armResync(false);
        return;
      }
      this.sync();
      this._armResync(false);
    }, wait);
  }

  // A snapshot (joined, typing): the room scope becomes `users`, each
  // thread listed in `threads` its own list. A thread not listed has
  // nobody typing, when the gateway lists threads in snapshots (its
  // /v1/config says max_threads_per_user, or a snapshot of this room
  // carried `threads`); an older gateway lists the room only, and a
  // thread's typists there are left to their events and local expiry.
  _snapshot(users, total, threads) {
    if (!this.receivesTyping) return;
    this._scope("", true).store.replace(users, total);
    this._inSnapshot = true;
    this._threadsChanged = false;
    try {
      this._snapshotThreads(threads);
    } finally {
      this._inSnapshot = false;
    }
    if (!this._threadsChanged) return;
    const list = this.threads;
    this.emit("threads", list);
    this.client.emit("threads", this, list);
  }

  _snapshotThreads(threads) {
    const listed = new Set();
    if (Array.isArray(threads)) {
      this._threadSnapshots = true;
      for (const t of threads) {
        if (!t || typeof t.thread !== "string" || t.thread === "" || listed.has(t.thread)) continue;
        listed.add(t.thread);
        this._scope(t.thread, true).store.replace(Array.isArray(t.users) ? t.users : [], t.total);
      }
    } else if (!this._threadSnapshots && !this.client._takesThreads(true)) {
      return;
    }
    for (const scope of [...this._scopes.values()]) {
      if (scope.thread && !listed.has(scope.thread)) scope.store.replace([], 0);
    }
  }

  _receive(f) {
    switch (f.type) {
      case "joined": {
        // Not the reply to the join in flight (a room left and joined again).
        if (this.state === "left" || (f.id && this._joinId && f.id !== this._joinId)) return;
        this._joinId = null;
        this._joinAttempt = 0;
        this._setState("joined");
        this._snapshot(f.typing, f.total, f.threads);
        this._armResync(true);
        for (const scope of this._scopes.values()) if (scope.typing) this._sendTyping(scope, "start");
        return;
      }
      case "typing":
        if (f.id && f.id === this._syncId) this._syncId = null;
        this._snapshot(f.users, f.total, f.threads);
        return;
      case "typing_start":
      case "typing_stop": {
        if (!this.receivesTyping || typeof f.user !== "string") return;
        const key = typeof f.thread === "string" ? f.thread : "";
        if (f.type === "typing_start") this._scope(key, true).store.start(f.user, f.name, f.ttl_ms, f.activity);
        else this._scope(key, false)?.store.stop(f.user);
        return;
      }
      case "error":
        this._error(f);
        return;
    }
  }

  // An id-less rate_limited error arrived: retry the join in flight, if
  // any, with backoff, as after an answered rate_limited.
  _maybeDropped() {
    if (this.state !== "joining" || this._joinId === null || this._retry !== null) return;
    this._joinId = null;
    this._retryJoin();
  }

  _retryJoin() {
    const c = this.client;
    const delay = backoffDelay(this._joinAttempt++, c.reconnectMinMs, c.reconnectMaxMs);
    this._retry = this._clock.setTimeout(() => {
      this._retry = null;
      if (c.state === "open") this._sendJoin();
    }, delay);
  }

  _error(f) {
    if (f.code === "too_many_threads" && f.id && this._startIds.has(f.id)) {
      // The gateway refused a thread's start: end that burst here without
      // a stop (nothing started there), and keep it off until a slot frees.
      const thread = this._startIds.get(f.id);
      this._startIds.delete(f.id);
      const scope = this._scopes.get(thread);
      if (scope) {
        if (scope.timer) scope.timer.dispose();
        scope.refused = true;
      }
      this.emit("error", { ...f, thread });
      return;
    }
    this.emit("error", f);
    if (f.id && f.id === this._syncId) this._syncId = null; // refused (rate_limited) or failed
    const isJoinReply = f.id && f.id === this._joinId;
    if (f.code === "not_joined" && this.state === "joined") {
      this._setState("joining");
      this._sendJoin(); // the gateway forgot us: join again
      return;
    }
    if (!isJoinReply) return;
    this._joinId = null;
    if (RETRY_CODES.has(f.code)) {
      this._retryJoin();
      return;
    }
    // forbidden, room_limit, bad_request: joining again will not help.
    this._setState("error", { code: f.code, message: f.message });
  }

  _setState(state, detail = {}) {
    this.state = state;
    this.emit("state", { state, ...detail });
  }
}
