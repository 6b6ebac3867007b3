// Test doubles for the unit tests: a scriptable WebSocket, fetch, and page
// event targets. Timers are node:test's mock.timers (setTimeout + Date).

import { mock } from "node:test";

/**
 * Installs node:test's fake setTimeout/setInterval/Date (at 1_000_000 ms)
 * and returns {tick(ms)}. Node 20's mock.timers.tick(n) sets Date to the end
 * of the whole step before running the timers due and does not run timers
 * that those schedule within the step; ticking 1 ms at a time gives every
 * callback its exact time and runs nested timers too.
 */
export function fakeTimers(t) {
  t.mock.timers.enable({ apis: ["setTimeout", "setInterval", "Date"], now: 1_000_000 });
  return {
    tick(ms) {
      for (let i = 0; i < ms; i++) t.mock.timers.tick(1);
    },
  };
}

/** Lets pending promise callbacks run (setImmediate is left real). */
export function flush() {
  return new Promise((resolve) => setImmediate(resolve));
}

/** A WebSocket double: every instance is recorded in FakeWebSocket.all. */
export class FakeWebSocket {
  static all = [];
  static reset() {
    FakeWebSocket.all = [];
  }
  static get last() {
    return FakeWebSocket.all[FakeWebSocket.all.length - 1];
  }

  constructor(url, protocols) {
    this.url = new URL(url);
    /** The subprotocols offered (undefined when none were passed). */
    this.protocols = protocols;
    this.readyState = 0;
    this.sent = [];
    this.closed = null;
    this.onopen = this.onmessage = this.onclose = this.onerror = null;
    FakeWebSocket.all.push(this);
  }

  /** Frames sent by the client, parsed. */
  get frames() {
    return this.sent.map((s) => JSON.parse(s));
  }

  /** Sent frames of one type. */
  framesOf(type) {
    return this.frames.filter((f) => f.type === type);
  }

  send(data) {
    if (this.readyState !== 1) throw new Error("send on a socket that is not open");
    this.sent.push(data);
  }

  close(code = 1000, reason = "") {
    this.closed = { code, reason };
    this.readyState = 3;
  }

  // ---- the server side ----
  open() {
    this.readyState = 1;
    this.onopen && this.onopen({});
  }

  receive(frame) {
    this.onmessage && this.onmessage({ data: typeof frame === "string" ? frame : JSON.stringify(frame) });
  }

  drop(code = 1006, reason = "") {
    this.readyState = 3;
    this.onclose && this.onclose({ code, reason });
  }

  /** Answers the last join of room with a joined snapshot. */
  acceptJoin(room, typing = []) {
    const join = this.framesOf("join").filter((f) => f.room === room).pop();
    if (!join) throw new Error(`no join for ${room}`);
    this.receive({ type: "joined", room, typing, id: join.id });
  }
}

/** A fetch double answering GET /v1/config. */
export function configFetch(config = { ttl_ms: 5000, refresh_ms: 4000, idle_stop_ms: 3000, auth: "none" }) {
  const fn = mock.fn(async (url) => {
    if (!String(url).endsWith("/v1/config")) return { ok: false, status: 404, json: async () => ({}) };
    return { ok: true, status: 200, json: async () => config };
  });
  return fn;
}

/** A minimal EventTarget for window/document. */
export class FakeTarget {
  constructor() {
    this.listeners = new Map();
    this.visibilityState = "visible";
  }
  addEventListener(type, fn) {
    if (!this.listeners.has(type)) this.listeners.set(type, new Set());
    this.listeners.get(type).add(fn);
  }
  removeEventListener(type, fn) {
    this.listeners.get(type)?.delete(fn);
  }
  dispatch(type, ev = {}) {
    for (const fn of this.listeners.get(type) || []) fn(ev);
  }
  count(type) {
    return this.listeners.get(type)?.size || 0;
  }
}

/**
 * A discrete-event clock for the SDK's `clock` option: advance(ms) runs
 * every timer due, in time order (ties in scheduling order), each at its
 * own time, timers scheduled meanwhile included, and lets promise
 * callbacks run after each one. Exact and fast over long spans (the
 * keystroke replay covers hours of typing).
 */
export class FakeClock {
  constructor(now = 1_000_000) {
    this._now = now;
    this._seq = 0;
    /** @type {Map<number, {at: number, seq: number, fn: () => void}>} */
    this._timers = new Map();
  }
  now() {
    return this._now;
  }
  setTimeout(fn, ms) {
    const seq = ++this._seq;
    this._timers.set(seq, { at: this._now + Math.max(0, Number(ms) || 0), seq, fn });
    return seq;
  }
  clearTimeout(id) {
    this._timers.delete(id);
  }
  /** Number of pending timers. */
  get pending() {
    return this._timers.size;
  }
  _next(end) {
    let best = null;
    for (const t of this._timers.values()) {
      if (t.at <= end && (!best || t.at < best.at || (t.at === best.at && t.seq < best.seq))) best = t;
    }
    return best;
  }
  /** Runs the timers due within ms, synchronously. */
  tick(ms) {
    const end = this._now + ms;
    for (let t; (t = this._next(end)); ) {
      this._timers.delete(t.seq);
      this._now = t.at;
      t.fn();
    }
    this._now = end;
  }
  /**
   * The machine slept for ms: wall time (now()) jumps, and every pending
   * timer is delayed by as much, as a browser's are (their deadlines run
   * on a monotonic clock that stops during sleep). Runs no timer.
   */
  sleep(ms) {
    this._now += ms;
    for (const t of this._timers.values()) t.at += ms;
  }
  /** Like tick, letting promise callbacks run after each timer. */
  async advance(ms) {
    const end = this._now + ms;
    await flush();
    for (let t; (t = this._next(end)); ) {
      this._timers.delete(t.seq);
      this._now = t.at;
      t.fn();
      await flush();
    }
    this._now = end;
  }
}
