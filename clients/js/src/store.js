// Who is typing in one scope of a room (the room itself, or one thread of
// it), as the server reports it: fed by joined, typing_start, typing_stop
// and typing snapshots. A snapshot replaces the whole set (never merges).
// Each entry expires locally its own ttl_ms + graceMs after its last start
// (a platform service's start may carry a ttl_ms of up to 60 s), or ttlMs
// + graceMs after a snapshot that listed it, whichever is later, so a lost
// typing_stop cannot leave a name stuck. The connection's own user is
// never listed (self filter). A typist carries its activity ("thinking",
// "recording_audio", ...; absent for "typing").
//
// The gateway lists at most ELLIPSIS_SNAPSHOT_MAX typists in a snapshot
// (default 100) and counts them all in its "total": the store keeps the
// typists counted but not listed as a number (unlisted), so `total` is
// the listed typists plus those. An unlisted typist shows up in the list
// with its next typing_start (a refresh reaches everyone every throttle
// window), which takes it off that number; a typing_stop of a user not
// listed takes one off it; and the number expires like an entry, ttl_ms +
// graceMs after the snapshot.

import { Emitter } from "./emitter.js";
import { systemClock } from "./clock.js";
import { DEFAULT_TTL_MS } from "./typing.js";

/** Extra time a typist stays listed beyond ttl_ms without news: 1000 ms. */
export const DEFAULT_GRACE_MS = 1000;

/** The activity a typist without one is doing (docs/protocol.md, "Threads and activities"). */
export const DEFAULT_ACTIVITY = "typing";

/**
 * @typedef {object} Typist
 * @property {string} user the user id
 * @property {string} [name] the display name, when the user has one
 * @property {string} [activity] what the user is doing, absent for "typing"
 */

/**
 * The activity of an event, snapshot or summary entry as kept: "" for
 * typing (absent).
 * @param {unknown} a
 * @returns {string}
 */
export const activityOf = (a) => (typeof a === "string" && a !== "" && a !== DEFAULT_ACTIVITY ? a : "");

/**
 * A per-scope typist set. Emits "change" (typists: Typist[], total: number)
 * on every change of either.
 */
export class TypistStore extends Emitter {
  /**
   * @param {object} [opts]
   * @param {string} [opts.self] this connection's own user id, never listed
   * @param {number} [opts.ttlMs] entry lifetime when an event carries none
   *   (snapshots), default 5000
   * @param {number} [opts.graceMs] added to every local expiry, default 1000
   * @param {import("./clock.js").Clock} [opts.clock]
   */
  constructor(opts = {}) {
    super();
    this.self = opts.self || "";
    this.ttlMs = opts.ttlMs ?? DEFAULT_TTL_MS;
    this.graceMs = opts.graceMs ?? DEFAULT_GRACE_MS;
    this._clock = opts.clock || systemClock;
    /** @type {Map<string, {user: string, name: string, activity: string, expiresAt: number, timer: unknown}>} */
    this._entries = new Map(); // insertion order = order typists started
    this._unlisted = 0; // counted in the last snapshot's total, not listed
    this._unlistedTimer = null;
  }

  /**
   * The typists now, in the order they started.
   * @returns {Typist[]}
   */
  get typists() {
    return [...this._entries.values()].map(({ user, name, activity }) => {
      const t = name ? { user, name } : { user };
      if (activity) t.activity = activity;
      return t;
    });
  }

  /** Number of typists listed. */
  get size() {
    return this._entries.size;
  }

  /**
   * Number of typists in the room: the listed ones plus those a cut
   * snapshot counted but did not list; never less than `size`.
   */
  get total() {
    return this._entries.size + this._unlisted;
  }

  /**
   * @param {string} user
   * @returns {boolean}
   */
  has(user) {
    return this._entries.has(user);
  }

  /**
   * A typing_start event: adds the user, or extends its expiry (a refresh);
   * a new activity (or name) is a change.
   * @param {string} user
   * @param {string} [name]
   * @param {number} [ttlMs] the event's ttl_ms: the entry expires locally
   *   ttlMs + graceMs from now (absent: the store's ttlMs)
   * @param {string} [activity] the event's activity; absent: "typing"
   */
  start(user, name, ttlMs, activity) {
    const known = this._entries.has(user);
    if (!this._upsert(user, name, ttlMs, activity, false)) return;
    // A user new to the list while a cut snapshot left some unlisted is
    // taken to be one of them (its refresh): the total stays.
    if (!known && this._unlisted > 0) this._setUnlisted(this._unlisted - 1);
    this._changed();
  }

  /**
   * A typing_stop event (any reason): removes the user, or, when it is not
   * listed, one of the typists a cut snapshot did not list.
   * @param {string} user
   */
  stop(user) {
    if (this._remove(user)) {
      this._changed();
    } else if (user && user !== this.self && this._unlisted > 0) {
      this._setUnlisted(this._unlisted - 1);
      this._changed();
    }
  }

  /**
   * A snapshot (joined, typing): the set becomes exactly `list` (minus self),
   * with each entry's activity. Users already listed keep their place (and
   * their local expiry when it is later than the snapshot's: a service's
   * entry started with a long ttl_ms stays that long); new ones are
   * appended in list order. An entry's `ttl_ms`, when a snapshot carries
   * one, is taken as its lifetime from now.
   * `total` is the snapshot's count of typists (the gateway's, self
   * filtered), larger than the list when the list was cut; without it
   * (an older gateway) the list is everyone.
   * @param {Typist[] | null | undefined} list
   * @param {number} [total]
   */
  replace(list, total) {
    const keep = new Set();
    let changed = false;
    for (const t of list || []) {
      if (!t || typeof t.user !== "string" || t.user === this.self) continue;
      keep.add(t.user);
      if (this._upsert(t.user, t.name, t.ttl_ms, t.activity, true)) changed = true;
    }
    for (const user of [...this._entries.keys()]) {
      if (!keep.has(user) && this._remove(user)) changed = true;
    }
    const unlisted = Number.isFinite(total) ? Math.max(0, Math.floor(total) - keep.size) : 0;
    if (unlisted !== this._unlisted) changed = true;
    this._setUnlisted(unlisted, true);
    if (changed) this._changed();
  }

  /** Forgets everyone (leave). */
  clear() {
    if (this._entries.size === 0 && this._unlisted === 0) return;
    for (const user of [...this._entries.keys()]) this._remove(user);
    this._setUnlisted(0);
    this._changed();
  }

  /** Stops the expiry timers; the store stays as it is. */
  dispose() {
    for (const e of this._entries.values()) this._clock.clearTimeout(e.timer);
    this._clock.clearTimeout(this._unlistedTimer);
    this._unlistedTimer = null;
  }

  // Sets the unlisted count. A snapshot's count (fromSnapshot) expires ttl
  // + grace from now, as a listed entry would; a count taken down by an
  // event keeps its expiry.
  _setUnlisted(n, fromSnapshot = false) {
    this._unlisted = n;
    if (n > 0 && !fromSnapshot) return;
    this._clock.clearTimeout(this._unlistedTimer);
    this._unlistedTimer = null;
    if (n === 0) return;
    this._unlistedTimer = this._clock.setTimeout(() => {
      this._unlistedTimer = null;
      if (this._unlisted === 0) return;
      this._unlisted = 0;
      this._changed();
    }, this.ttlMs + this.graceMs);
  }

  // Returns whether the visible set changed (a new user, a new name or a
  // new activity). A snapshot's entry (keepLonger) never shortens the
  // expiry an earlier start gave.
  _upsert(user, name, ttlMs, activity, keepLonger) {
    if (!user || user === this.self) return false;
    const now = this._clock.now();
    let expiresAt = now + (Number.isFinite(ttlMs) && ttlMs > 0 ? ttlMs : this.ttlMs) + this.graceMs;
    const act = activityOf(activity);
    let e = this._entries.get(user);
    let changed = false;
    if (!e) {
      e = { user, name: name || "", activity: act, expiresAt, timer: null };
      this._entries.set(user, e);
      changed = true;
    } else {
      if (name && name !== e.name) {
        e.name = name;
        changed = true;
      }
      if (act !== e.activity) {
        e.activity = act;
        changed = true;
      }
      if (keepLonger && e.expiresAt > expiresAt) expiresAt = e.expiresAt;
    }
    const ttl = expiresAt - now;
    e.expiresAt = expiresAt;
    this._clock.clearTimeout(e.timer);
    e.timer = this._clock.setTimeout(() => {
      if (this._entries.get(user) === e && this._remove(user)) this._changed();
    }, ttl);
    return changed;
  }

  _remove(user) {
    const e = this._entries.get(user);
    if (!e) return false;
    this._clock.clearTimeout(e.timer);
    this._entries.delete(user);
    return true;
  }

  _changed() {
    this.emit("change", this.typists, this.total);
  }
}
