// Who is typing in one room, as the server reports it: fed by joined,
// typing_start, typing_stop and typing snapshots. A snapshot replaces the
// whole set (never merges). Each entry expires locally ttl_ms + graceMs
// after its last start or snapshot, so a lost typing_stop cannot leave a
// name stuck. The connection's own user is never listed (self filter).

import { Emitter } from "./emitter.js";
import { systemClock } from "./clock.js";
import { DEFAULT_TTL_MS } from "./typing.js";

/** Extra time a typist stays listed beyond ttl_ms without news: 1000 ms. */
export const DEFAULT_GRACE_MS = 1000;

/**
 * @typedef {object} Typist
 * @property {string} user the user id
 * @property {string} [name] the display name, when the user has one
 */

/** A per-room typist set. Emits "change" (typists: Typist[]) on every change. */
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
    /** @type {Map<string, {user: string, name: string, expiresAt: number, timer: unknown}>} */
    this._entries = new Map(); // insertion order = order typists started
  }

  /**
   * The typists now, in the order they started.
   * @returns {Typist[]}
   */
  get typists() {
    return [...this._entries.values()].map(({ user, name }) => (name ? { user, name } : { user }));
  }

  /** Number of typists. */
  get size() {
    return this._entries.size;
  }

  /**
   * @param {string} user
   * @returns {boolean}
   */
  has(user) {
    return this._entries.has(user);
  }

  /**
   * A typing_start event: adds the user, or extends its expiry (a refresh).
   * @param {string} user
   * @param {string} [name]
   * @param {number} [ttlMs] the event's ttl_ms
   */
  start(user, name, ttlMs) {
    if (this._upsert(user, name, ttlMs)) this._changed();
  }

  /**
   * A typing_stop event (any reason): removes the user.
   * @param {string} user
   */
  stop(user) {
    if (this._remove(user)) this._changed();
  }

  /**
   * A snapshot (joined, typing): the set becomes exactly `list` (minus self).
   * Users already listed keep their place; new ones are appended in list order.
   * @param {Typist[] | null | undefined} list
   */
  replace(list) {
    const keep = new Set();
    let changed = false;
    for (const t of list || []) {
      if (!t || typeof t.user !== "string" || t.user === this.self) continue;
      keep.add(t.user);
      if (this._upsert(t.user, t.name, undefined)) changed = true;
    }
    for (const user of [...this._entries.keys()]) {
      if (!keep.has(user) && this._remove(user)) changed = true;
    }
    if (changed) this._changed();
  }

  /** Forgets everyone (leave). */
  clear() {
    if (this._entries.size === 0) return;
    for (const user of [...this._entries.keys()]) this._remove(user);
    this._changed();
  }

  /** Stops the expiry timers; the store stays as it is. */
  dispose() {
    for (const e of this._entries.values()) this._clock.clearTimeout(e.timer);
  }

  // Returns whether the visible set changed (a new user or a new name).
  _upsert(user, name, ttlMs) {
    if (!user || user === this.self) return false;
    const ttl = (ttlMs > 0 ? ttlMs : this.ttlMs) + this.graceMs;
    const expiresAt = this._clock.now() + ttl;
    let e = this._entries.get(user);
    let changed = false;
    if (!e) {
      e = { user, name: name || "", expiresAt, timer: null };
      this._entries.set(user, e);
      changed = true;
    } else if (name && name !== e.name) {
      e.name = name;
      changed = true;
    }
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
    this.emit("change", this.typists);
  }
}
