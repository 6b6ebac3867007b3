// One scope of a joined room: the room itself, or one thread of it
// (docs/protocol.md, "Threads and activities"). A scope has its own
// typists (a TypistStore fed by the events and snapshots naming it) and
// this user's own typing there (a TypingTimer and the activity it shows);
// an event about a thread never touches the room scope, nor the other way.
// A Thread is the app's handle on one thread scope: room.thread(id).

import { Emitter } from "./emitter.js";
import { TypistStore, DEFAULT_ACTIVITY } from "./store.js";
import { TypingTimer } from "./typing.js";

/**
 * The activities every gateway of this protocol accepts (docs/protocol.md,
 * "Threads and activities"); an operator adds more with
 * ELLIPSIS_ACTIVITIES, served in GET /v1/config's `activities`.
 */
export const ACTIVITIES = Object.freeze(["typing", "thinking", "recording_audio", "recording_video", "uploading"]);

/** The form of an activity name: `[a-z_]{1,32}` (ELLIPSIS_ACTIVITIES' rule). */
export const ACTIVITY_PATTERN = /^[a-z_]{1,32}$/;

/** Counters of a scope where this user never typed. */
const zeroStats = () => ({ keystrokes: 0, starts: 0, refreshes: 0, changes: 0, idleStops: 0, stops: 0 });

const show = (v) => (typeof v === "string" ? JSON.stringify(v) : v === null ? "null" : typeof v);

/**
 * Checks the thread option of a call: undefined (the room itself) or a
 * non-empty string (the rules of a room id). Throws a TypeError naming it.
 * @param {unknown} thread
 * @param {string} where the call, for the error ("keystroke")
 * @returns {string} "" for the room itself, else the thread id
 */
export function threadKey(thread, where) {
  if (thread === undefined || thread === null) return "";
  if (typeof thread !== "string" || thread === "") {
    throw new TypeError(`ellipsis: ${where}: thread must be a non-empty string (a thread id, with the rules of a room id), got ${show(thread)}`);
  }
  return thread;
}

/**
 * Checks an activity: a string of `[a-z_]{1,32}`, and one of `accepted`
 * (the gateway's /v1/config `activities`) when that is known. Throws a
 * TypeError (the form) or a RangeError (not accepted) naming it.
 * @param {unknown} activity
 * @param {readonly string[] | null} accepted
 * @param {string} where the call, for the error
 * @returns {string} "" for typing, else the activity
 */
export function activityKey(activity, accepted, where) {
  if (activity === undefined || activity === null) return "";
  if (typeof activity !== "string" || !ACTIVITY_PATTERN.test(activity)) {
    throw new TypeError(`ellipsis: ${where}: activity must be 1..32 characters of a-z and _ (such as "thinking"), got ${show(activity)}`);
  }
  if (accepted && !accepted.includes(activity)) {
    throw new RangeError(`ellipsis: ${where}: activity ${JSON.stringify(activity)} is not one the gateway accepts (${accepted.join(", ")})`);
  }
  return activity === DEFAULT_ACTIVITY ? "" : activity;
}

/** One scope of a room; internal to Room. */
export class Scope {
  /**
   * @param {object} opts
   * @param {string} opts.thread "" for the room itself
   * @param {string} opts.self this connection's user id
   * @param {number} opts.graceMs
   * @param {import("./clock.js").Clock} opts.clock
   * @param {(scope: Scope, action: import("./typing.js").TypingAction) => void} opts.send
   */
  constructor(opts) {
    this.thread = opts.thread;
    this.store = new TypistStore({ self: opts.self, graceMs: opts.graceMs, clock: opts.clock });
    this._clock = opts.clock;
    this._send = opts.send;
    /** @type {TypingTimer | null} */
    this.timer = null;
    /** This user's activity here ("" for typing), sent on every typing_start. */
    this.activity = "";
    /** A thread the gateway (or the client, at max_threads_per_user) refused a start in. */
    this.refused = false;
  }

  /** True while this user's burst is on here. */
  get typing() {
    return !!(this.timer && this.timer.typing);
  }

  /** Counters of this user's typing here. */
  get stats() {
    return this.timer ? { ...this.timer.stats } : zeroStats();
  }

  /**
   * The timing is known (or changed): (re)builds the typing timer.
   * @param {{ttlMs: number, refreshMs: number, idleStopMs: number}} cfg
   */
  configure(cfg) {
    this.store.ttlMs = cfg.ttlMs;
    const prev = this.timer;
    if (prev && prev.refreshMs === cfg.refreshMs && prev.idleStopMs === cfg.idleStopMs) return;
    if (prev) prev.dispose();
    this.timer = new TypingTimer({
      refreshMs: cfg.refreshMs,
      idleStopMs: cfg.idleStopMs,
      ttlMs: cfg.ttlMs,
      clock: this._clock,
      send: (action) => this._send(this, action),
    });
  }

  /**
   * The frame for this scope: `{type, room, thread?, activity?}`; `thread`
   * only for a thread, `activity` only on a start that is not typing
   * (absent means the room itself, and typing).
   * @param {"typing_start" | "typing_stop"} type
   * @param {string} room
   */
  frame(type, room) {
    const f = { type, room };
    if (this.thread) f.thread = this.thread;
    if (type === "typing_start" && this.activity) f.activity = this.activity;
    return f;
  }

  dispose() {
    if (this.timer) this.timer.dispose();
    this.store.dispose();
  }
}

/**
 * A thread of a joined room, from room.thread(id): who types there (never
 * this user), and this user's typing there. The same object for the same
 * id, for as long as the room is joined. Events: "change" (typists,
 * total): the thread's typists, or their total, changed.
 */
export class Thread extends Emitter {
  /**
   * @param {import("./client.js").Room} room
   * @param {string} id
   */
  constructor(room, id) {
    super();
    this.room = room;
    this.id = id;
  }

  /** Who is typing in this thread, in the order they started (never this user). */
  get typists() {
    const s = this.room._scopes.get(this.id);
    return s ? s.store.typists : [];
  }

  /** How many type in this thread: the typists listed plus those a cut snapshot only counted. */
  get total() {
    const s = this.room._scopes.get(this.id);
    return s ? s.store.total : 0;
  }

  /** True while this user's typing burst is on in this thread. */
  get typing() {
    const s = this.room._scopes.get(this.id);
    return !!(s && s.typing);
  }

  /** Counters of this user's typing in this thread (see Room.stats). */
  get stats() {
    const s = this.room._scopes.get(this.id);
    return s ? s.stats : zeroStats();
  }

  /**
   * Call on every keystroke in this thread's message box.
   * @param {{activity?: string}} [opts] see Room.keystroke
   */
  keystroke(opts = {}) {
    this.room.keystroke({ ...opts, thread: this.id });
  }

  /**
   * Shows `activity` in this thread until stop() (see Room.startActivity).
   * @param {string} activity
   */
  startActivity(activity) {
    this.room.startActivity(activity, { thread: this.id });
  }

  /** The message was posted in this thread: typing_stop there at once. */
  messageSent() {
    this.room.messageSent({ thread: this.id });
  }

  /** This thread's message box lost focus: typing_stop there at once. */
  blur() {
    this.room.blur({ thread: this.id });
  }

  /**
   * Ends this user's burst in this thread now, if one is on.
   * @param {import("./typing.js").StopReason} [reason]
   */
  stop(reason = "cancel") {
    this.room.stop({ thread: this.id, reason });
  }
}
