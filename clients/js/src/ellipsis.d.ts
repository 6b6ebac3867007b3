// Types of the Ellipsis browser SDK (src/ellipsis.js). Hand-written; the
// unit tests check that every runtime export is declared here and
// types/usage.ts is compiled with `tsc --strict` against it.

/** A user typing in a room (or a thread of it), as the gateway reports it. */
export interface Typist {
  /** The user id (from authentication). */
  user: string;
  /** The display name, when the user has one. */
  name?: string;
  /**
   * What the user is doing, absent for "typing": one of ACTIVITIES, or an
   * operator's (ELLIPSIS_ACTIVITIES), so any string the gateway sends.
   */
  activity?: string;
  /**
   * On a snapshot entry (joined, typing) only: the entry's own ttl in ms when
   * it is not the standard ttl (a platform service's, e.g. an agent
   * thinking); shown until ttl_ms from the snapshot unless refreshed, as for
   * a typing_start's ttl_ms. Typists the SDK hands out never carry it.
   */
  ttl_ms?: number;
}

/** The activities every gateway of protocol v1 accepts (docs/protocol.md, "Threads and activities"). */
export type BuiltinActivity = "typing" | "thinking" | "recording_audio" | "recording_video" | "uploading";

/**
 * Activities an operator added (ELLIPSIS_ACTIVITIES): an app declares its
 * own by augmenting this interface, and they become valid `Activity`s:
 *
 *   declare module "@ellipsis-chat/client" {
 *     interface CustomActivities { reviewing: true }
 *   }
 */
export interface CustomActivities {}

/** An activity this user may show: a built-in one, or one declared in CustomActivities. */
export type Activity = BuiltinActivity | (keyof CustomActivities & string);

/** The scope of a call: the room itself (no thread), or one thread of it. */
export interface ScopeOptions {
  /** A thread of the room (an id with the rules of a room id); absent: the room itself. */
  thread?: string;
}

/** room.keystroke(opts): the scope typed in, and the activity shown (default "typing"). */
export interface KeystrokeOptions extends ScopeOptions {
  activity?: Activity;
}

/** room.stop(opts): the scope to stop in, and why. */
export interface StopOptions extends ScopeOptions {
  reason?: StopReason;
}

/** client.join(room, opts). */
export interface JoinOptions {
  /**
   * false: joined without receiving the room's typing (the join frame says
   * `"typing": false`; no events, no snapshots, no resync); this user's
   * own typing there still goes out. Default true.
   */
  typing?: boolean;
}

/** Who types in one thread of a room (room.threads); never this user. */
export interface ThreadTyping {
  readonly thread: string;
  /** In the order they started. */
  readonly typists: readonly Typist[];
  /** Typists listed plus those a cut snapshot only counted; >= typists.length. */
  readonly total: number;
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

/** A typing frame the timer decided to send: "start", "refresh" and "change" (a new activity) are typing_start. */
export type TypingAction = "start" | "refresh" | "change" | "stop";

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
  /**
   * Resync every room with a `sync` this often; 0 disables. Default 10000.
   * Independently of it, every joined room is resynced at once when the
   * page becomes visible, the browser comes back online, or a timer fires
   * over max(2 × pingMs, 30000) ms late (the machine slept); see the
   * client's "resync" event.
   */
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
  /**
   * Stop typing when the page is hidden or unloaded (pagehide, visibilitychange). Default true.
   * The resync on becoming visible happens either way.
   */
  stopOnHide?: boolean;
  /** WebSocket constructor (Node, tests). Default: globalThis.WebSocket. */
  WebSocket?: new (url: string, protocols?: string | string[]) => WebSocketLike;
  /** fetch (Node, tests). Default: globalThis.fetch. */
  fetch?: (url: string, init?: { cache?: "no-store" }) => Promise<{ ok: boolean; status: number; json(): Promise<any> }>;
  /** Event targets for the page lifecycle. Default: globalThis.window / document. */
  window?: EventTargetLike;
  document?: EventTargetLike & { visibilityState?: "visible" | "hidden" };
  /** Timers and time. Default: systemClock. */
  clock?: Clock;
}

export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: any) => void) | null;
  // The SDK sets these and reads ev.data, ev.code and ev.reason; `any` lets
  // the DOM's WebSocket (MessageEvent, CloseEvent) fit.
  onmessage: ((ev: any) => void) | null;
  onclose: ((ev: any) => void) | null;
  onerror: ((ev: any) => void) | null;
}

export interface EventTargetLike {
  addEventListener(type: string, fn: (ev: any) => void): void;
  removeEventListener(type: string, fn: (ev: any) => void): void;
}

/** The timing (in milliseconds) and the gateway limits a client uses. */
export interface TimingConfig {
  ttlMs: number;
  refreshMs: number;
  idleStopMs: number;
  /** "none" or "jwt". */
  auth: string;
  /**
   * The gateway's largest inbound frame (`max_frame_bytes`), bytes; 4096
   * (DEFAULT_MAX_FRAME_BYTES) without fetchConfig or when the gateway does
   * not say. watch() and unwatch() split their rooms under it.
   */
  maxFrameBytes: number;
  /**
   * The activities the gateway accepts (`activities`); the built-in ones
   * (ACTIVITIES) when it does not say, in which case any well-formed
   * activity is sent.
   */
  activities: readonly string[];
  /**
   * How many threads of a room one connection may type in at once
   * (`max_threads_per_user`, 5); null when the gateway did not say: an
   * older gateway takes no thread, so thread typing is not sent to it
   * (it would show in the room). With fetchConfig: false, null, and
   * thread typing is sent as asked.
   */
  maxThreadsPerUser: number | null;
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
    | "too_many_threads"
    | (string & {});
  message: string;
  room?: string;
  id?: string;
  /** too_many_threads: the thread whose start was refused, when known. */
  thread?: string;
}

/** Why every joined room was resynced at once. */
export type ResyncReason =
  /** document.visibilityState became "visible" (MDN: visibilitychange). */
  | "visible"
  /** The window's "online" event, with the connection open (it is pinged too). */
  | "online"
  /** A timer fired over max(2 × pingMs, 30000) ms late: the machine slept. */
  | "wake";

/**
 * The page came back: a `sync` went out for each room listed. Rooms still
 * joining get their snapshot from the join's reply; a room with a sync in
 * flight, or one sent within the last 1000 ms, is not synced again, so
 * triggers together make one sync per room. The connection is pinged too
 * (no frame within pongTimeoutMs: reconnect, and every rejoin brings a
 * snapshot).
 */
export interface ResyncEvent {
  reason: ResyncReason;
  /** The ids of the rooms synced. */
  rooms: string[];
}

/**
 * Who types in a watched room, as the gateway summarised it
 * (docs/protocol.md, "Watching rooms"). Frozen.
 */
export interface RoomSummary {
  readonly room: string;
  /** The first 3 typists of the room's snapshot order; never this user. */
  readonly typing: readonly Readonly<Typist>[];
  /** How many type in the room in all (never this user); >= typing.length. */
  readonly total: number;
}

/** Room ids for watch() and unwatch(): an array or a set (any iterable but a string at runtime). */
export type RoomIds = readonly string[] | ReadonlySet<string>;

/** A room watch() could not watch. */
export interface WatchRefusal {
  room: string;
  /**
   * "bad_request" (an invalid id, or one too long for a frame), "forbidden",
   * "watch_limit" (over max_watched_rooms): the room left `watched`.
   * "unavailable", "rate_limited", "internal": it stays watched and is sent
   * again with backoff. "unwatched": unwatch() came before the answer.
   * Any other: an error frame's code about the whole frame (an older
   * gateway answers "unknown_type"); the room left `watched`.
   */
  code:
    | "bad_request"
    | "forbidden"
    | "watch_limit"
    | "rate_limited"
    | "unavailable"
    | "internal"
    | "unwatched"
    | (string & {});
  message: string;
}

/** The merged answers to one watch() call. */
export interface WatchResult {
  /** The rooms of the call now watched (already watched ones included). */
  rooms: string[];
  refused: WatchRefusal[];
  /** How many rooms the connection watches after the last answer. */
  watched: number;
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
  /** typing_start frames that changed the activity of a burst. */
  changes: number;
  /** typing_stop frames (idle ones included). */
  stops: number;
  /** typing_stop frames after idleStopMs without a keystroke. */
  idleStops: number;
}

/**
 * An event map: event name → listener signature. Interfaces without an index
 * signature satisfy it, so an unknown event name is a compile error.
 */
export type EventMap<Events> = { [K in keyof Events]: (...args: any[]) => void };

export declare class Emitter<Events extends EventMap<Events> = Record<string, (...args: any[]) => void>> {
  /** Calls fn on every event until the returned function is called. */
  on<E extends keyof Events & string>(event: E, fn: Events[E]): () => void;
  once<E extends keyof Events & string>(event: E, fn: Events[E]): () => void;
  off<E extends keyof Events & string>(event: E, fn: Events[E]): void;
  emit<E extends keyof Events & string>(event: E, ...args: Parameters<Events[E]>): void;
}

/** The events of a Client; no others exist (a misspelled name fails to compile). */
export interface ClientEvents {
  state: (ev: StateEvent) => void;
  error: (err: ErrorFrame | Error) => void;
  /** A room's own typists (not its threads') changed. */
  change: (room: Room, typists: Typist[], total: number) => void;
  /** The typists of a thread of a room changed; `threads` is room.threads. */
  threads: (room: Room, threads: ThreadTyping[]) => void;
  /** Every joined room was resynced at once (visible, online, wake). */
  resync: (ev: ResyncEvent) => void;
  /** A watched room's summary; it replaces the room's last one (client.summary(room)). */
  summary: (summary: RoomSummary) => void;
}

/** The events of a Room; no others exist. */
export interface RoomEvents {
  /** The room's own typists (or their total) changed; never for an event about a thread. */
  change: (typists: Typist[], total: number) => void;
  /** The typists of a thread changed; `threads` is room.threads. */
  threads: (threads: ThreadTyping[]) => void;
  state: (ev: RoomStateEvent) => void;
  error: (frame: ErrorFrame) => void;
}

/** The events of a Thread; no others exist. */
export interface ThreadEvents {
  /** The thread's typists (or their total) changed. */
  change: (typists: Typist[], total: number) => void;
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
  /**
   * Joins a room (again after every reconnect); the same Room for the same
   * id. Another `typing` than the joined room's throws (leave it first).
   */
  join(room: string, opts?: JoinOptions): Room;
  room(room: string): Room | undefined;
  keystroke(room: string, opts?: KeystrokeOptions): void;
  messageSent(room: string, opts?: ScopeOptions): void;
  blur(room: string, opts?: ScopeOptions): void;
  /** Who types in the room itself, or in opts.thread. */
  typists(room: string, opts?: ScopeOptions): Typist[];
  /** Stops typing in every room, in every scope. */
  stopTyping(reason?: StopReason): void;
  /**
   * Watches rooms without joining them (again after every reconnect): a
   * "summary" event per room when accepted, then at most once per
   * watch_interval_ms while it changes. Split into frames under
   * config.maxFrameBytes; resolves with the merged answers. Rejects with a
   * TypeError for an id that is not a non-empty string, with an Error on
   * a closed client.
   */
  watch(rooms: RoomIds): Promise<WatchResult>;
  /** Stops watching rooms (every room without an argument); their summaries are forgotten. */
  unwatch(rooms?: RoomIds): void;
  /** The last summary of a watched room; undefined before the first. */
  summary(room: string): RoomSummary | undefined;
  /** The rooms watched (a copy): accepted, or waiting for an answer or a retry. */
  readonly watched: ReadonlySet<string>;
  /** Closes for good. */
  close(): void;
}

/**
 * A joined room: its own typists and its threads', each scope (the room
 * itself, each thread) with its own typing of this user.
 */
export declare class Room extends Emitter<RoomEvents> {
  readonly client: Client;
  readonly id: string;
  readonly state: RoomState;
  /** False when joined with {typing: false}: typists stay empty. */
  readonly receivesTyping: boolean;
  /** Who is typing in the room itself, in the order they started; never this user. */
  readonly typists: Typist[];
  /** How many type in the room itself (never this user): typists listed plus those a cut snapshot only counted. */
  readonly total: number;
  /** Who types in which thread: one entry per thread with someone typing (for formatTypists' `threads`). */
  readonly threads: ThreadTyping[];
  /** The handle of one thread; the same object for the same id. */
  thread(id: string): Thread;
  /** True while this user's typing burst is on in the room itself. */
  readonly typing: boolean;
  /** This user's typing in the room itself. */
  readonly stats: TypingStats;
  /**
   * Call on every keystroke that changes the draft (of the room itself, or
   * of opts.thread); opts.activity (default "typing") is what others see,
   * a change is sent at once. Throws a TypeError / RangeError on a bad
   * thread or activity.
   */
  keystroke(opts?: KeystrokeOptions): void;
  /** Shows `activity` (a recording, an upload) until stop(): refreshed, no idle stop. */
  startActivity(activity: Activity, opts?: ScopeOptions): void;
  /** The message was sent (in the room itself, or in opts.thread): typing_stop there at once. */
  messageSent(opts?: ScopeOptions): void;
  /** The message box lost focus: typing_stop at once. */
  blur(opts?: ScopeOptions): void;
  /** Ends the burst in the room itself (a reason), or in a thread ({thread, reason}). */
  stop(reason?: StopReason | StopOptions): void;
  /** Ends this user's bursts in every scope of the room. */
  stopAll(reason?: StopReason): void;
  /**
   * Asks for a fresh snapshot now (its reply replaces the typists). At most
   * one sync per room is in flight (an unanswered one counts as lost after
   * pongTimeoutMs): returns false, sending nothing, while one is, or when
   * the room is not joined; true when a sync went out (or was queued).
   */
  sync(): boolean;
  leave(): void;
}

/** One thread of a joined room (room.thread(id)): who types there, and this user's typing there. */
export declare class Thread extends Emitter<ThreadEvents> {
  readonly room: Room;
  readonly id: string;
  /** Who is typing in this thread, in the order they started; never this user. */
  readonly typists: Typist[];
  readonly total: number;
  /** True while this user's burst is on in this thread. */
  readonly typing: boolean;
  readonly stats: TypingStats;
  keystroke(opts?: { activity?: Activity }): void;
  startActivity(activity: Activity): void;
  messageSent(): void;
  blur(): void;
  stop(reason?: StopReason): void;
}

/** The built-in activities: typing, thinking, recording_audio, recording_video, uploading. */
export declare const ACTIVITIES: readonly BuiltinActivity[];

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
/** The gateway's frame limit when GET /v1/config gives none (ELLIPSIS_MAX_FRAME_BYTES' default): 4096 bytes. */
export declare const DEFAULT_MAX_FRAME_BYTES: number;
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
  /** True while hold() keeps the burst on without an idle stop. */
  readonly held: boolean;
  readonly stats: TypingStats;
  keystroke(): void;
  /** On (typing_start) and kept on, refreshed, without an idle stop, until stop() or a keystroke. */
  hold(): void;
  /** The burst's activity changed: a typing_start ("change") now, the refresh re-armed. */
  change(): void;
  messageSent(): void;
  blur(): void;
  stop(reason?: StopReason): void;
  dispose(): void;
}

/** Who is typing in one scope (a room, or a thread of it); emits "change". */
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
  /** A typing_start event; `ttlMs` is its ttl_ms (the entry expires ttlMs + graceMs from now), `activity` its activity. */
  start(user: string, name?: string, ttlMs?: number, activity?: string): void;
  stop(user: string): void;
  /** A snapshot: the set becomes exactly `list`; `total` counts the typists the list may leave out. */
  replace(list: Typist[] | null | undefined, total?: number): void;
  clear(): void;
  dispose(): void;
}

/** A plural category of Intl.PluralRules (Unicode CLDR plural rules). */
export type PluralCategory = "zero" | "one" | "two" | "few" | "many" | "other";

/**
 * One message in its plural forms: the form is picked with
 * `new Intl.PluralRules(locale).select(n)`; a category without a form uses
 * `other` (required). Which categories a language has:
 * `new Intl.PluralRules("pl").resolvedOptions().pluralCategories`
 * (en, de: one, other; pl: one, few, many, other; ja, vi: other).
 */
export interface PluralMessage {
  zero?: string;
  one?: string;
  two?: string;
  few?: string;
  many?: string;
  other: string;
}

/**
 * The strings of one language, for a translator to fill (no code). Each is
 * a PluralMessage; placeholders are `{names}` (the names joined with
 * Intl.ListFormat, type "conjunction": "Alice, Bob und Carol") and
 * `{count}` (a number written with Intl.NumberFormat: "1.400"). Another
 * `{word}` is an error; a name that reads "{count}" stays as it is.
 *
 *   const de = {
 *     typing: { one: "{names} tippt…", other: "{names} tippen…" },
 *     others: { one: "{count} weitere Person", other: "{count} weitere Personen" },
 *     count:  { one: "{count} Person tippt…", other: "{count} Personen tippen…" },
 *   };
 *
 * A line ending in "…" or "..." gets TypingIndicator's animated dots.
 */
export interface TypingMessages {
  /** The line with names; plural by how many people it names. `{names}`, `{count}`. */
  typing: PluralMessage;
  /**
   * The last list item when more type than `max`: "{count} others", plural
   * by their number. `{count}`. Without it, such a line is `count`.
   */
  others?: PluralMessage;
  /** The line with only a number (too many names, or a cut snapshot). `{count}`. */
  count: PluralMessage;
  /**
   * The subject of a count line of an activity but typing: "{count}
   * people" ("3 people are thinking…"). `{count}`. Without it, such a line
   * is `count`.
   */
  people?: PluralMessage;
  /**
   * The line of each activity but typing, as `typing` is: `{ thinking: {
   * one: "{names} is thinking…", … } }`. Keys are activity names
   * (`[a-z_]{1,32}`). `{names}`, `{count}`. An activity without one uses `busy`.
   */
  activities?: { readonly [activity: string]: PluralMessage };
  /** The line of an activity without its own ("{names} is busy…"). `{names}`, `{count}`. Without it: `typing`. */
  busy?: PluralMessage;
  /**
   * A channel view's clause about the typists of one thread: "{line} in a
   * thread…", `{line}` the clause of those typists without its ellipsis
   * ("Alice is typing"), plural by `{count}` people. Without it, a channel
   * view tells nothing of threads.
   */
  thread?: PluralMessage;
  /** As `thread`, for typists in several threads ("{line} in threads…", the clause a count). Without it: `thread`. */
  threads?: PluralMessage;
}

export interface FormatOptions {
  /**
   * A BCP 47 tag ("de", "de-AT", "pt-BR"; "_" is read as "-"). Default "en".
   * Without `messages`, a built-in table: the tag's language ("vi-VN" → vi),
   * else English. English without a region lists as CLDR en-001
   * ("Alice, Bob and Carol"), "en-US" with the serial comma.
   * Invalid: TypeError / RangeError naming `locale`.
   */
  locale?: string;
  /** The strings for `locale` (a language not built in). Invalid: TypeError naming the field. */
  messages?: TypingMessages;
  /** Names shown before the rest become "N others" (or the count). Default 3; below 1 counts as 1. */
  max?: number;
  /** How many type in all (a room's `total`); above the names given, the line is the count. */
  total?: number;
  /**
   * A channel view: the room's threads (room.threads); their typists add
   * one clause, "Alice is typing in a thread…" ("2 people are typing in
   * threads…" in several). A thread view passes that thread's typists as
   * `users` and no `threads`.
   */
  threads?: ReadonlyArray<{ thread: string; typists: ReadonlyArray<Typist>; total?: number }>;
}

/**
 * "Alice is typing…", "Alice and Bob are typing…", "Alice, Bob and 2 others
 * are typing…"; Vietnamese: "Alice đang gõ...", "5 người đang gõ..."; any
 * language with `messages`. Activities: "Assistant is thinking…", "Alice is
 * typing and Assistant is thinking…"; a channel view's threads: "Alice is
 * typing in a thread…". Throws on an invalid locale or messages.
 */
export declare function formatTypists(users: ReadonlyArray<string | Typist>, opts?: FormatOptions): string;
/** @deprecated Use formatTypists. */
export declare function formatTyping(names: ReadonlyArray<string | Typist>, opts?: FormatOptions): string;
export declare function displayName(t: string | Typist): string;
/** The built-in table for a tag: its language when built in, else "en". Lenient: never throws. */
export declare function resolveLocale(tag?: string): "en" | "vi";
export declare function splitEllipsis(line: string): { text: string; dots: string };
/** Throws a TypeError naming the field ("messages.typing.one") unless `m` is a valid TypingMessages. */
export declare function validateMessages(m: unknown): asserts m is TypingMessages;
/** The built-in locales: "en", "vi". */
export declare const LOCALES: readonly ("en" | "vi")[];
/** The built-in tables (frozen); a start for a table of your own: `{ ...MESSAGES.en, count: … }`. */
export declare const MESSAGES: Readonly<{ en: Readonly<TypingMessages>; vi: Readonly<TypingMessages> }>;

/** Keeps a typist shown at least minShowMs (anti-flicker). */
export declare class AntiFlicker {
  constructor(opts?: { minShowMs?: number; onChange?: (shown: Typist[]) => void; clock?: Clock });
  minShowMs: number;
  onChange: ((shown: Typist[]) => void) | null;
  readonly shown: Typist[];
  /** Entries are (thread, user) pairs: a typist may carry the `thread` it types in. */
  update(typists: ReadonlyArray<Typist & { thread?: string }>): void;
  dispose(): void;
}

export interface TypingIndicatorOptions {
  /** As formatTypists' `locale`. Default "en". */
  locale?: string;
  /** As formatTypists' `messages`. */
  messages?: TypingMessages;
  /** Names shown before the rest become "N others". Default 3. */
  max?: number;
  /** A name stays shown at least this long, in ms. Default 500. */
  minShowMs?: number;
  /** Add TYPING_CSS to the document. Default true. */
  injectStyles?: boolean;
  clock?: Clock;
}

/** Renders the typing line into an aria-live="polite" element, with animated dots and anti-flicker. */
export declare class TypingIndicator {
  /** Throws a TypeError / RangeError on an invalid locale or messages, naming the field. */
  constructor(element: HTMLElement, opts?: TypingIndicatorOptions);
  readonly element: HTMLElement;
  /** Set, then render(); an invalid tag throws and leaves it as it was. */
  locale: string;
  /** Set, then render(); an invalid table throws and leaves it as it was. */
  messages: TypingMessages | undefined;
  max: number | undefined;
  /** The line shown now ("" when nobody types). */
  readonly text: string;
  /**
   * `total`: how many type in all (the scope's total); omitted, the typists
   * are everyone. `threads` (a channel view): the room's threads
   * (room.threads), told as "Alice is typing in a thread…".
   */
  update(typists: readonly Typist[], total?: number, threads?: ReadonlyArray<ThreadTyping>): void;
  render(): void;
  destroy(): void;
}

export declare const TYPING_CSS: string;
export declare const VERSION: string;
