// Ellipsis browser client: "Alice is typing…" over the Ellipsis gateway.
//
//   import { connect, formatTyping } from "/src/ellipsis.js";
//   const client = await connect({ user: "alice", name: "Alice" });   // or { token }
//   const room = client.join("42");
//   room.onchange = (typists) => { line.textContent = formatTyping(typists.map((t) => t.name || t.user)); };
//   input.oninput = () => room.keystroke();
//   form.onsubmit = () => room.stop();   // the message was sent
//
// Wire contract: PROTOCOL.md. Timing comes from the gateway (GET /v1/config):
// typing_start on the first keystroke, again every refresh_ms while typing,
// typing_stop after idle_stop_ms without a keystroke; a typist shown here
// disappears ttl_ms after their last start unless refreshed.

const ANTI_FLICKER_MS = 500; // a name stays shown at least this long
const RECONNECT_MIN_MS = 500;
const RECONNECT_MAX_MS = 10000;

/**
 * Formats who is typing: at most three names, then a count.
 * [] → "", [A] → "A is typing…", [A,B] → "A and B are typing…",
 * [A,B,C] → "A, B and C are typing…", [A,B,C,D] → "A, B and 2 others are typing…".
 * @param {string[]} names
 * @returns {string}
 */
export function formatTyping(names) {
  const n = names.length;
  if (n === 0) return "";
  if (n === 1) return `${names[0]} is typing…`;
  if (n === 2) return `${names[0]} and ${names[1]} are typing…`;
  if (n === 3) return `${names[0]}, ${names[1]} and ${names[2]} are typing…`;
  return `${names[0]}, ${names[1]} and ${n - 2} others are typing…`;
}

/** Reads the user id (sub) of a JWT without verifying it, for the self filter. */
function jwtSubject(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(part)).sub || "";
  } catch {
    return "";
  }
}

/**
 * Fetches the gateway's timing and opens a connection.
 * @param {{base?: string, user?: string, name?: string, token?: string}} opts
 *   base: the gateway's http(s) URL (default: this page's origin);
 *   user and name: development auth (auth=none); token: a JWT (auth=jwt).
 * @returns {Promise<Client>}
 */
export async function connect(opts = {}) {
  const base = new URL(opts.base || location.origin);
  const res = await fetch(new URL("/v1/config", base));
  if (!res.ok) throw new Error(`ellipsis: GET /v1/config: HTTP ${res.status}`);
  const config = await res.json();
  if (!(config.refresh_ms < config.ttl_ms)) {
    throw new Error(`ellipsis: refresh_ms (${config.refresh_ms}) must be below ttl_ms (${config.ttl_ms}), or indicators flicker`);
  }
  const client = new Client(base, config, opts);
  client.open();
  return client;
}

/** One WebSocket to the gateway, reconnecting with backoff; rooms are rejoined. */
export class Client {
  constructor(base, config, opts) {
    this.config = config;
    this.user = opts.user || (opts.token ? jwtSubject(opts.token) : "");
    this.rooms = new Map(); // room id → Room
    this.onstatus = null; // (status: "connecting"|"open"|"closed", detail) => void
    this.onerror = null; // (errorFrame) => void
    this._url = new URL("/v1/ws", base);
    this._url.protocol = base.protocol === "https:" ? "wss:" : "ws:";
    if (opts.token) this._url.searchParams.set("access_token", opts.token);
    else {
      this._url.searchParams.set("user", opts.user || "");
      if (opts.name) this._url.searchParams.set("name", opts.name);
    }
    this._ws = null;
    this._backoff = RECONNECT_MIN_MS;
    this._closed = false;
    this._nextId = 1;
  }

  open() {
    this._status("connecting");
    const ws = new WebSocket(this._url);
    this._ws = ws;
    ws.onopen = () => {
      this._backoff = RECONNECT_MIN_MS;
      this._status("open");
      for (const room of this.rooms.values()) room._rejoin();
    };
    ws.onmessage = (e) => this._receive(e.data);
    ws.onclose = (e) => {
      if (this._ws !== ws) return;
      this._ws = null;
      for (const room of this.rooms.values()) room._reset();
      if (this._closed) return this._status("closed", e);
      // 1008 (token expired, abuse) needs a new token: do not loop.
      if (e.code === 1008) return this._status("closed", e);
      const wait = this._backoff * (0.5 + Math.random());
      this._backoff = Math.min(this._backoff * 2, RECONNECT_MAX_MS);
      this._status("connecting", e);
      setTimeout(() => !this._closed && this.open(), wait);
    };
  }

  /** Joins a room (now, and again after every reconnect) and returns it. */
  join(id) {
    let room = this.rooms.get(id);
    if (!room) {
      room = new Room(this, id);
      this.rooms.set(id, room);
      room._rejoin();
    }
    return room;
  }

  /** Closes the connection for good. */
  close() {
    this._closed = true;
    if (this._ws) this._ws.close(1000);
  }

  _send(frame) {
    if (this._ws && this._ws.readyState === WebSocket.OPEN) {
      this._ws.send(JSON.stringify(frame));
      return true;
    }
    return false;
  }

  _id() {
    return `c${this._nextId++}`;
  }

  _status(status, detail) {
    if (this.onstatus) this.onstatus(status, detail);
  }

  _receive(data) {
    let f;
    try {
      f = JSON.parse(data);
    } catch {
      return;
    }
    if (f.type === "error") {
      if (this.onerror) this.onerror(f);
      return;
    }
    const room = this.rooms.get(f.room);
    if (!room) return;
    switch (f.type) {
      case "joined":
        room._replace(f.typing);
        break;
      case "typing":
        room._replace(f.users);
        break;
      case "typing_start":
        room._start(f.user, f.name, f.ttl_ms);
        break;
      case "typing_stop":
        room._stop(f.user);
        break;
    }
  }
}

/** A joined room: who is typing there, and this user's own typing. */
export class Room {
  constructor(client, id) {
    this.client = client;
    this.id = id;
    this.onchange = null; // (typists: {user, name}[]) => void
    this._typists = new Map(); // user → {user, name, shownAt, expiry, hide}
    this._typing = false; // this user is typing (start sent)
    this._refresh = null; // interval re-sending typing_start
    this._idle = null; // timeout sending typing_stop
  }

  /** The users typing now, in the order they started, never this user. */
  get typists() {
    return [...this._typists.values()].map(({ user, name }) => ({ user, name }));
  }

  /** Call on every keystroke in the message box. */
  keystroke() {
    const { refresh_ms, idle_stop_ms } = this.client.config;
    if (!this._typing && this.client._send({ type: "typing_start", room: this.id })) {
      this._typing = true;
      this._refresh = setInterval(() => this.client._send({ type: "typing_start", room: this.id }), refresh_ms);
    }
    clearTimeout(this._idle);
    this._idle = setTimeout(() => this.stop(), idle_stop_ms);
  }

  /** Call when the message is sent (and on blur, if you like). */
  stop() {
    clearTimeout(this._idle);
    clearInterval(this._refresh);
    if (this._typing) this.client._send({ type: "typing_stop", room: this.id });
    this._typing = false;
  }

  /** Leaves the room for good. */
  leave() {
    this.stop();
    this.client._send({ type: "leave", room: this.id, id: this.client._id() });
    this.client.rooms.delete(this.id);
    this._replace([]);
  }

  _rejoin() {
    this.client._send({ type: "join", room: this.id, id: this.client._id() });
  }

  // The connection dropped: the server forgot our typing; theirs is stale
  // but is replaced by the snapshot on rejoin (entries still expire).
  _reset() {
    this.stop();
  }

  _replace(list) {
    const keep = new Set();
    for (const t of list || []) {
      keep.add(t.user);
      this._start(t.user, t.name, undefined, true);
    }
    for (const user of this._typists.keys()) if (!keep.has(user)) this._stop(user, true);
    this._changed();
  }

  _start(user, name, ttlMs, quiet) {
    if (user === this.client.user) return; // self filter (the server filters too)
    const ttl = ttlMs || this.client.config.ttl_ms;
    let t = this._typists.get(user);
    if (!t) {
      t = { user, name: name || "", shownAt: Date.now(), expiry: null, hide: null };
      this._typists.set(user, t);
    } else if (name) t.name = name;
    clearTimeout(t.hide);
    t.hide = null;
    clearTimeout(t.expiry);
    t.expiry = setTimeout(() => this._stop(user), ttl);
    if (!quiet) this._changed();
  }

  _stop(user, quiet) {
    const t = this._typists.get(user);
    if (!t || t.hide) return;
    clearTimeout(t.expiry);
    const wait = t.shownAt + ANTI_FLICKER_MS - Date.now();
    const remove = () => {
      if (this._typists.get(user) !== t) return;
      this._typists.delete(user);
      this._changed();
    };
    if (wait > 0) t.hide = setTimeout(remove, wait);
    else {
      this._typists.delete(user);
      if (!quiet) this._changed();
    }
  }

  _changed() {
    if (this.onchange) this.onchange(this.typists);
  }
}
