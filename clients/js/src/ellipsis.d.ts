// Types of the Ellipsis browser SDK (src/ellipsis.js). Hand-written; the
// unit tests check that every runtime export is declared here and
// types/usage.ts is compiled with `tsc --strict` against it.

/** A user typing in a room, as the gateway reports it. */
export interface Typist {
  /** The user id (from authentication). */
  user: string;
  /** The display name, when the user has one. */
  name?: string;
}

/** Wall time and timers; tests may pass fakes. */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(id: unknown): void;
}

/** The clock of the page (Date.now, setTimeout), read at call time. */
export declare const systemClock: Clock;

/** Why this user's typing burst ended. */
export type StopReason = "idle" | "sent" | "blur" | "hidden" | "leave" | "cancel";

/** A typing frame the timer decided to send: "start" and "refresh" are typing_start. */
export type TypingAction = "start" | "refresh" | "stop";

export type ConnectionState = "idle" | "connecting" | "open" | "reconnecting" | "closed";

export type RoomState = "joining" | "joined" | "error" | "left";

/** A token, or a function giving a fresh one on every (re)connect. */
export type TokenSource = string | (() => string | Promise<string>);

export interface ClientOptions {
  /** The gateway's base URL (http: or https:). Default: this page's origin. */
  url?: string | URL;
  /**
   * A JWT (auth=jwt); a function is called on every (re)connect. Sent as
   * tokenTransport says; never in the URL by default.
   */
  token?: TokenSource;
  /**
   * How the token travels on the WebSocket handshake (docs/protocol.md,
   * "Where the token travels"):
   * - "protocol" (default): `Sec-WebSocket-Protocol: ellipsis.v1, ellipsis.bearer.<JWT>`;
   *   the gateway selects `ellipsis.v1`. Keeps the token out of URLs and access logs.
   *   A token that is not an RFC 7230 token (a JWT always is) closes the client
   *   for good with an error.
   * - "query": `?access_token=<JWT>`, deprecated, for a gateway older than the
   *   subprotocol (access logs keep it: see docs/security.md).
   * Anything else throws a TypeError from the constructor.
   */
  tokenTransport?: "protocol" | "query";
  /** Development auth (auth=none): the user id. */
  user?: string;
  /** Development auth (auth=none): the display name. */
  name?: string;
  /** Read the timing from GET /v1/config. Default true; false uses the options and defaults. */
  fetchConfig?: boolean;
  /** The server's entry lifetime. Default: the server's ttl_ms, else 5000. */
  ttlMs?: number;
  /** Re-send typing_start this often while typing (must be < ttlMs). Default: the server's refresh_ms, else 4000. */
  refreshMs?: number;
  /** Send typing_stop after this long without a keystroke. Default: the server's idle_stop_ms, else 3000. */
  idleStopMs?: number;
  /** Added to ttl_ms for the local expiry of a typist. Default 1000. */
  graceMs?: number;
  /** Resync every room with a `sync` this often; 0 disables. Default 10000. */
  resyncMs?: number;
  /** Send a ping after this long. Default 25000. */
  pingMs?: number;
  /** No frame this long after a ping: the connection is dead, reconnect. Default 10000. */
  pongTimeoutMs?: number;
  /** First reconnect delay (jittered between half and all of it). Default 500. */
  reconnectMinMs?: number;
  /** Longest reconnect delay. Default 30000. */
  reconnectMaxMs?: number;
  /** The backoff resets once a connection stayed open this long. Default 5000. */
  stableMs?: number;
  /** Outbound pacing (the gateway allows 20/s, burst 40). Default 10. */
  maxFramesPerSecond?: number;
  /** Outbound burst. Default 20. */
  frameBurst?: number;
  /** Stop typing when the page is hidden or unloaded (pagehide, visibilitychange). Default true. */
  stopOnHide?: boolean;
  /** WebSocket constructor (Node, tests). Default: globalThis.WebSocket. */
  WebSocket?: new (url: string) => WebSocketLike;
  /** fetch (Node, tests). Default: globalThis.fetch. */
  fetch?: (url: string, init?: { cache?: string }) => Promise<{ ok: boolean; status: number; json(): Promise<any> }>;
  /** Event targets for the page lifecycle. Default: globalThis.window / document. */
  window?: EventTargetLike;
  document?: EventTargetLike & { visibilityState?: string };
  /** Timers and time. Default: systemClock. */
  clock?: Clock;
}

export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: any) => void) | null;
  onmessage: ((ev: { data: any }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: any) => void) | null;
}

export interface EventTargetLike {
  addEventListener(type: string, fn: (ev: any) => void): void;
  removeEventListener(type: string, fn: (ev: any) => void): void;
}

/** The timing a client uses, in milliseconds. */
export interface TimingConfig {
  ttlMs: number;
  refreshMs: number;
  idleStopMs: number;
  /** "none" or "jwt". */
  auth: string;
}

export interface StateEvent {
  state: ConnectionState;
  previous: ConnectionState;
  /** Reconnect attempts since the last stable connection. */
  attempt: number;
  /** "reconnecting": how long until the next attempt. */
  delayMs?: number;
  /** The WebSocket close code, when a close caused this. */
  code?: number;
  reason?: string;
  error?: Error;
}

/** An error frame of the gateway (docs/protocol.md, "Error codes"). */
export interface ErrorFrame {
  type: "error";
  code:
    | "bad_request"
    | "unknown_type"
    | "not_joined"
    | "forbidden"
    | "room_limit"
    | "rate_limited"
    | "unavailable"
    | "internal"
    | (string & {});
  message: string;
  room?: string;
  id?: string;
}

export interface RoomStateEvent {
  state: RoomState;
  code?: string;
  message?: string;
}

export interface TypingStats {
  keystrokes: number;
  /** typing_start frames that began a burst. */
  starts: number;
  /** typing_start frames that refreshed a burst. */
  refreshes: number;
  /** typing_stop frames (idle ones included). */
  stops: number;
  /** typing_stop frames after idleStopMs without a keystroke. */
  idleStops: number;
}

export declare class Emitter<Events extends Record<string, (...args: any[]) => void> = Record<string, (...args: any[]) => void>> {
  /** Calls fn on every event until the returned function is called. */
  on<E extends keyof Events & string>(event: E, fn: Events[E]): () => void;
  once<E extends keyof Events & string>(event: E, fn: Events[E]): () => void;
  off<E extends keyof Events & string>(event: E, fn: Events[E]): void;
  emit<E extends keyof Events & string>(event: E, ...args: Parameters<Events[E]>): void;
}

export interface ClientEvents {
  [event: string]: (...args: any[]) => void;
  state: (ev: StateEvent) => void;
  error: (err: ErrorFrame | Error) => void;
  change: (room: Room, typists: Typist[], total: number) => void;
}

export interface RoomEvents {
  [event: string]: (...args: any[]) => void;
  change: (typists: Typist[], total: number) => void;
  state: (ev: RoomStateEvent) => void;
  error: (frame: ErrorFrame) => void;
}

/** One WebSocket to the gateway; reconnects and rejoins on its own. */
export declare class Client extends Emitter<ClientEvents> {
  constructor(opts?: ClientOptions);
  /** The gateway's base URL (ending in "/"). */
  readonly url: URL;
  /** This connection's user id (dev user or the token's sub). */
  readonly user: string;
  /** The timing in use; null until connect() fetched it. */
  readonly config: TimingConfig | null;
  readonly state: ConnectionState;
  readonly rooms: Map<string, Room>;
  /** Starts connecting; resolves once open, rejects if closed for good first. */
  connect(): Promise<void>;
  /** Joins a room (again after every reconnect); the same Room for the same id. */
  join(room: string): Room;
  room(room: string): Room | undefined;
  keystroke(room: string): void;
  messageSent(room: string): void;
  blur(room: string): void;
  typists(room: string): Typist[];
  /** Stops typing in every room. */
  stopTyping(reason?: StopReason): void;
  /** Closes for good. */
  close(): void;
}

/** A joined room. */
export declare class Room extends Emitter<RoomEvents> {
  readonly client: Client;
  readonly id: string;
  readonly state: RoomState;
  /** Who is typing here, in the order they started; never this user. */
  readonly typists: Typist[];
  /** How many type here (never this user): typists listed plus those a cut snapshot only counted. */
  readonly total: number;
  /** True while this user's typing burst is on. */
  readonly typing: boolean;
  readonly stats: TypingStats;
  /** Call on every keystroke that changes the draft. */
  keystroke(): void;
  /** The message was sent: typing_stop at once. */
  messageSent(): void;
  /** The message box lost focus: typing_stop at once. */
  blur(): void;
  stop(reason?: StopReason): void;
  /** Asks for a fresh snapshot now. */
  sync(): void;
  leave(): void;
}

/** Creates a client and connects it; resolves once open. */
export declare function connect(opts?: ClientOptions): Promise<Client>;

export declare const DEFAULTS: Readonly<{
  ttlMs: number;
  refreshMs: number;
  idleStopMs: number;
  graceMs: number;
  resyncMs: number;
  pingMs: number;
  pongTimeoutMs: number;
  reconnectMinMs: number;
  reconnectMaxMs: number;
  stableMs: number;
  maxFramesPerSecond: number;
  frameBurst: number;
}>;
export declare const STATES: readonly ConnectionState[];
/** Exponential backoff with equal jitter: between half and all of min·2^attempt (capped at max). */
export declare function backoffDelay(attempt: number, minMs: number, maxMs: number, random?: () => number): number;
/** The `sub` of a JWT, unverified; "" when unreadable. */
export declare function tokenSubject(token: string): string;

export declare const DEFAULT_TTL_MS: number;
export declare const DEFAULT_REFRESH_MS: number;
export declare const DEFAULT_IDLE_STOP_MS: number;
export declare const DEFAULT_GRACE_MS: number;
export declare const DEFAULT_MIN_SHOW_MS: number;
export declare const DEFAULT_MAX_NAMES: number;

/** Throws a RangeError unless every timer is positive and refreshMs < ttlMs. */
export declare function validateTimers(t: { ttlMs: number; refreshMs: number; idleStopMs: number }): void;

/** This user's typing timers in one room. */
export declare class TypingTimer {
  constructor(opts: {
    refreshMs?: number;
    idleStopMs?: number;
    ttlMs?: number;
    send: (action: TypingAction, reason?: StopReason) => void;
    clock?: Clock;
  });
  readonly refreshMs: number;
  readonly idleStopMs: number;
  readonly typing: boolean;
  readonly stats: TypingStats;
  keystroke(): void;
  messageSent(): void;
  blur(): void;
  stop(reason?: StopReason): void;
  dispose(): void;
}

/** Who is typing in one room; emits "change". */
export declare class TypistStore extends Emitter<{ change: (typists: Typist[], total: number) => void }> {
  constructor(opts?: { self?: string; ttlMs?: number; graceMs?: number; clock?: Clock });
  self: string;
  ttlMs: number;
  graceMs: number;
  readonly typists: Typist[];
  readonly size: number;
  /** Typists listed plus those a cut snapshot counted but did not list; >= size. */
  readonly total: number;
  has(user: string): boolean;
  start(user: string, name?: string, ttlMs?: number): void;
  stop(user: string): void;
  /** A snapshot: the set becomes exactly `list`; `total` counts the typists the list may leave out. */
  replace(list: Typist[] | null | undefined, total?: number): void;
  clear(): void;
  dispose(): void;
}

export interface FormatOptions {
  /** A BCP 47 tag: "en" (default), "vi", "vi-VN"; others fall back to English. */
  locale?: string;
  /** Names shown before the line becomes a count. Default 3. */
  max?: number;
  /** How many type in all; above the names given, the line is "N people are typing…". */
  total?: number;
}

/** "Alice is typing…", "Alice and Bob are typing…", …; Vietnamese: "Alice đang gõ...", … */
export declare function formatTypists(users: ReadonlyArray<string | Typist>, opts?: FormatOptions): string;
/** @deprecated Use formatTypists. */
export declare function formatTyping(names: ReadonlyArray<string | Typist>, opts?: FormatOptions): string;
export declare function displayName(t: string | Typist): string;
export declare function resolveLocale(tag?: string): "en" | "vi";
export declare function splitEllipsis(line: string): { text: string; dots: string };
export declare const LOCALES: readonly string[];

/** Keeps a typist shown at least minShowMs (anti-flicker). */
export declare class AntiFlicker {
  constructor(opts?: { minShowMs?: number; onChange?: (shown: Typist[]) => void; clock?: Clock });
  minShowMs: number;
  onChange: ((shown: Typist[]) => void) | null;
  readonly shown: Typist[];
  update(typists: Typist[]): void;
  dispose(): void;
}

/** Renders the typing line into an aria-live="polite" element, with animated dots and anti-flicker. */
export declare class TypingIndicator {
  constructor(
    element: HTMLElement,
    opts?: FormatOptions & { minShowMs?: number; injectStyles?: boolean; clock?: Clock },
  );
  readonly element: HTMLElement;
  locale: string;
  max: number | undefined;
  /** The line shown now ("" when nobody types). */
  readonly text: string;
  /** `total`: how many type in all (the room's total); omitted, the typists are everyone. */
  update(typists: Typist[], total?: number): void;
  render(): void;
  destroy(): void;
}

export declare const TYPING_CSS: string;
export declare const VERSION: string;
