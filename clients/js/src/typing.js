// This user's own typing in one room: the seed's client timers.
//
//   first keystroke           → typing_start
//   every refreshMs after it,
//   while still typing        → typing_start again (a refresh; keeps the
//                               server's entry, which lives ttlMs, alive)
//   idleStopMs without a key  → typing_stop
//   message sent, blur,
//   page hidden, leave        → typing_stop at once
//   hold() (an activity with
//   no keys: a recording)     → typing_start, refreshed every refreshMs
//                               with no idle stop, until stop() or a key
//   change() (a new activity
//   while on)                 → typing_start at once, refresh re-armed
//
// "Still typing" means no idle stop yet, i.e. a keystroke came less than
// idleStopMs ago. The refresh is a timer, not a reaction to the next
// keystroke: a keystroke-driven refresh lets the entry lapse when the
// typist pauses just before the refresh is due (with the defaults, a key at
// 3.9 s and the next at 6.5 s would leave a gap between the ttl at 5 s and
// the refresh at 6.5 s, and receivers would see the name flicker).

import { systemClock } from "./clock.js";

/**
 * Seed defaults (docs/protocol.md, "Timing"), in milliseconds: what GET
 * /v1/config serves with the gateway's default settings (shared/config's
 * table), used until the client has read it. A Go test,
 * TestSDKDefaultsAreTheServedConfig (services/gateway/sdk_defaults_test.go), holds them equal
 * and reads each as `export const NAME = <ms>;`.
 */
export const DEFAULT_TTL_MS = 5000;
export const DEFAULT_REFRESH_MS = 4000;
export const DEFAULT_IDLE_STOP_MS = 3000;

/**
 * Checks the client timers: every one a positive finite number of
 * milliseconds, and refreshMs < ttlMs (else the server's entry expires
 * between two refreshes and the indicator flickers). Throws a RangeError
 * listing every problem at once.
 * @param {{ttlMs: number, refreshMs: number, idleStopMs: number}} t
 */
export function validateTimers(t) {
  const problems = [];
  for (const key of ["ttlMs", "refreshMs", "idleStopMs"]) {
    const v = t[key];
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) {
      problems.push(`${key} must be a positive number of milliseconds, got ${String(v)}`);
    }
  }
  if (problems.length === 0 && !(t.refreshMs < t.ttlMs)) {
    problems.push(`refreshMs (${t.refreshMs}) must be below the server's ttl_ms (${t.ttlMs}), or typing indicators flicker`);
  }
  if (problems.length) throw new RangeError(`ellipsis: invalid typing timers: ${problems.join("; ")}`);
}

/**
 * @typedef {"start" | "refresh" | "change" | "stop"} TypingAction
 * @typedef {"idle" | "sent" | "blur" | "hidden" | "leave" | "cancel"} StopReason
 */

/** The timer state machine of one scope's draft (a room, or a thread of it). */
export class TypingTimer {
  /**
   * @param {object} opts
   * @param {number} [opts.refreshMs] default 4000
   * @param {number} [opts.idleStopMs] default 3000
   * @param {number} [opts.ttlMs] the server's entry lifetime, default 5000;
   *   only used to validate refreshMs
   * @param {(action: TypingAction, reason?: StopReason) => void} opts.send
   *   called for every frame to send: "start", "refresh" and "change" are
   *   a typing_start, "stop" a typing_stop
   * @param {import("./clock.js").Clock} [opts.clock]
   */
  constructor(opts) {
    this.refreshMs = opts.refreshMs ?? DEFAULT_REFRESH_MS;
    this.idleStopMs = opts.idleStopMs ?? DEFAULT_IDLE_STOP_MS;
    validateTimers({ ttlMs: opts.ttlMs ?? DEFAULT_TTL_MS, refreshMs: this.refreshMs, idleStopMs: this.idleStopMs });
    this._send = opts.send;
    this._clock = opts.clock || systemClock;
    this._typing = false;
    this._idle = null;
    this._refresh = null;
    this._lastKey = 0;
    this._hold = false; // on without an idle stop (hold())
    /** Counters of what this timer decided. */
    this.stats = { keystrokes: 0, starts: 0, refreshes: 0, changes: 0, idleStops: 0, stops: 0 };
  }

  /** True while the burst is held on by hold() (no idle stop). */
  get held() {
    return this._hold;
  }

  /** True between a typing_start and the typing_stop that ends the burst. */
  get typing() {
    return this._typing;
  }

  /** Call on every keystroke that changes the draft. */
  keystroke() {
    this.stats.keystrokes++;
    this._lastKey = this._clock.now();
    if (this._typing && this._hold) {
      // Keys again after a held activity: the idle stop applies from now.
      this._hold = false;
      this._armIdle(this.idleStopMs);
      return;
    }
    if (!this._typing) {
      this._typing = true;
      this.stats.starts++;
      this._armRefresh();
      this._armIdle(this.idleStopMs);
      this._send("start");
    }
    // The idle timer is not re-armed on every key (a browser types tens of
    // keys a second): when it fires early it re-arms itself for the rest.
  }

  /**
   * Turns the burst on (typing_start, unless on already) and keeps it on,
   * refreshed every refreshMs, without an idle stop, until stop() (or the
   * message is sent, the box blurred, the page hidden) or a keystroke
   * (after which the idle stop applies again). For an activity that has
   * no keys: recording a voice message, uploading.
   */
  hold() {
    this._hold = true;
    this._clock.clearTimeout(this._idle);
    this._idle = null;
    if (this._typing) return;
    this._typing = true;
    this.stats.starts++;
    this._armRefresh();
    this._send("start");
  }

  /**
   * The burst's state changed while on (a new activity): typing_start now
   * ("change"), and the next refresh refreshMs after it. Nothing when no
   * burst is on.
   */
  change() {
    if (!this._typing) return;
    this.stats.changes++;
    this._armRefresh();
    this._send("change");
  }

  /** The message was sent: typing_stop at once. */
  messageSent() {
    this.stop("sent");
  }

  /** The message box lost focus: typing_stop at once. */
  blur() {
    this.stop("blur");
  }

  /**
   * Ends the burst now if one is on (typing_stop), for `reason`.
   * @param {StopReason} [reason]
   */
  stop(reason = "cancel") {
    if (!this._typing) return;
    this._typing = false;
    this._hold = false;
    this._clear();
    this.stats.stops++;
    if (reason === "idle") this.stats.idleStops++;
    this._send("stop", reason);
  }

  /** Stops the timers without sending anything (the burst is off). */
  dispose() {
    this._typing = false;
    this._hold = false;
    this._clear();
  }

  _armIdle(ms) {
    this._clock.clearTimeout(this._idle);
    this._idle = this._clock.setTimeout(() => {
      this._idle = null;
      if (this._hold) return;
      const left = this._lastKey + this.idleStopMs - this._clock.now();
      if (left > 0) this._armIdle(left);
      else this.stop("idle");
    }, ms);
  }

  _armRefresh() {
    this._clock.clearTimeout(this._refresh);
    this._refresh = this._clock.setTimeout(() => {
      this._refresh = null;
      if (!this._typing) return;
      // Idle stop due at this very tick: stop rather than refresh first.
      if (!this._hold && this._clock.now() - this._lastKey >= this.idleStopMs) return this.stop("idle");
      this.stats.refreshes++;
      this._armRefresh();
      this._send("refresh");
    }, this.refreshMs);
  }

  _clear() {
    this._clock.clearTimeout(this._idle);
    this._clock.clearTimeout(this._refresh);
    this._idle = this._refresh = null;
  }
}
