// React binding: useTyping(client, roomId, {thread}) on useSyncExternalStore.
// Imports only `react` (an optional peer dependency, >= 18); the SDK itself
// comes in as the Client the app made.
//
// Rooms are shared: the SDK has one Room per id per Client and Room.leave()
// is for good, so the hook counts its holders per (client, room). The first
// holder joins (unless the app had joined the room itself), the last one
// leaves, in a microtask: React StrictMode unsubscribes and subscribes again
// synchronously in the same commit, so a dev double mount never sends
// leave + join, and two components on one room never leave it under each
// other. A room the app joined itself is never left by the hook.

import { useCallback, useMemo, useSyncExternalStore } from "react";

const NONE = Object.freeze([]);

/** The state with nobody typing: no client, no room, or server render. */
const EMPTY = Object.freeze({ typists: NONE, total: 0, threads: NONE });

/** @type {WeakMap<object, Map<string, {count: number, room: object, owned: boolean}>>} */
const holds = new WeakMap();

/** @type {WeakMap<object, Map<string, {typists: readonly object[], total: number, threads: readonly object[]}>>} last snapshot per Room, per scope ("" the room itself) */
const snapshots = new WeakMap();

/** @type {WeakMap<object, Map<string, ReturnType<typeof roomStore>>>} */
const stores = new WeakMap();

/**
 * Holds a room of `client` until the returned release function is called:
 * joins it if nobody holds it and the app has not joined it; the last
 * release leaves it (in a microtask, cancelled by a new hold meanwhile),
 * unless the app joined it first. Releasing twice is a no-op.
 * @param {import("./client.js").Client} client
 * @param {string} roomId
 * @returns {() => void}
 */
export function holdRoom(client, roomId) {
  let byRoom = holds.get(client);
  if (!byRoom) holds.set(client, (byRoom = new Map()));
  let h = byRoom.get(roomId);
  const current = client.room(roomId);
  if (h && current === h.room) {
    h.count++;
  } else {
    // First holder, or the room was left (and maybe joined again) by the app.
    h = { count: 1, room: null, owned: !current };
    h.room = current || client.join(roomId);
    byRoom.set(roomId, h);
  }
  const held = h;
  let released = false;
  return () => {
    if (released) return;
    released = true;
    held.count--;
    if (held.count > 0) return;
    queueMicrotask(() => {
      if (held.count > 0 || byRoom.get(roomId) !== held) return;
      byRoom.delete(roomId);
      if (held.owned && client.room(roomId) === held.room) held.room.leave();
    });
  };
}

function sameTypists(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i].user !== b[i].user || a[i].name !== b[i].name || a[i].activity !== b[i].activity) return false;
  return true;
}

function sameThreads(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i].thread !== b[i].thread || a[i].total !== b[i].total || !sameTypists(a[i].typists, b[i].typists)) return false;
  return true;
}

const freezeTypists = (typists) => Object.freeze(typists.map((t) => Object.freeze(t)));

// The thread option: undefined/null (the room itself) or a non-empty string.
function threadOf(opts) {
  const thread = opts == null ? undefined : opts.thread;
  if (thread == null) return "";
  if (typeof thread !== "string" || thread === "") throw new TypeError(`ellipsis: useTyping(client, roomId, {thread}): thread must be a non-empty string, got ${JSON.stringify(thread) ?? typeof thread}`);
  return thread;
}

/**
 * The external store behind useTyping, for one (client, room, thread); the
 * same object for the same triple. `subscribe` holds the room (see
 * holdRoom) and calls back on its changes; `getSnapshot` returns the same
 * frozen {typists, total, threads} until who types (or their activity) or
 * a total changes: the room itself and its threads (room.threads) without
 * `thread`, that thread's typists with it (threads then always empty). The
 * server snapshot is always empty.
 * @param {import("./client.js").Client | null | undefined} client
 * @param {string | null | undefined} roomId
 * @param {string} [thread] a thread of the room; "" or absent: the room itself
 */
export function roomStore(client, roomId, thread = "") {
  if (!client || roomId == null || roomId === "") return emptyStore;
  let byRoom = stores.get(client);
  if (!byRoom) stores.set(client, (byRoom = new Map()));
  const key = thread ? `${roomId}\u0000${thread}` : roomId;
  let store = byRoom.get(key);
  if (store) return store;
  store = {
    /** @param {() => void} onChange */
    subscribe(onChange) {
      const release = holdRoom(client, roomId);
      // On the client, so a room left and joined again keeps notifying.
      const offs = [client.on("threads", (room) => room.id === roomId && onChange())];
      if (!thread) offs.push(client.on("change", (room) => room.id === roomId && onChange()));
      return () => {
        for (const off of offs) off();
        release();
      };
    },
    getSnapshot() {
      const room = client.room(roomId);
      if (!room) return EMPTY;
      const typists = thread ? room.thread(thread).typists : room.typists;
      const total = thread ? room.thread(thread).total : room.total;
      const threads = thread ? NONE : room.threads;
      if (typists.length === 0 && total === 0 && threads.length === 0) return EMPTY;
      let byScope = snapshots.get(room);
      if (!byScope) snapshots.set(room, (byScope = new Map()));
      const last = byScope.get(thread);
      if (last && last.total === total && sameTypists(last.typists, typists) && sameThreads(last.threads, threads)) return last;
      const snap = Object.freeze({
        typists: freezeTypists(typists),
        total,
        threads: threads.length ? Object.freeze(threads.map((t) => Object.freeze({ thread: t.thread, typists: freezeTypists(t.typists), total: t.total }))) : NONE,
      });
      byScope.set(thread, snap);
      return snap;
    },
    getServerSnapshot: () => EMPTY,
  };
  byRoom.set(key, store);
  return store;
}

const emptyStore = Object.freeze({
  subscribe: () => () => {},
  getSnapshot: () => EMPTY,
  getServerSnapshot: () => EMPTY,
});

/**
 * Who types in a room (or in one thread of it), and this user's typing
 * there, for a React component. Joins the room while at least one mounted
 * component uses it (shared with other components on the same client and
 * room, threads included; see holdRoom) and re-renders when its typists
 * change.
 *
 * Returns {typists, total, threads, keystroke, startActivity, messageSent,
 * blur, stop}. Without `thread` (a channel view): typists and total of the
 * room itself, and threads (room.threads: who types in which thread, for
 * formatTypists' `threads`: "Alice is typing in a thread…"); with `thread`
 * (a thread view): that thread's typists and total, threads empty. typists
 * are never this user, in the order they started, frozen; all of them are
 * the same objects until they change. The functions act in the view's
 * scope (keystroke({activity}), startActivity(activity)), are stable for a
 * (client, roomId, thread) and do nothing before the room is joined or
 * without one. A null/undefined client or roomId, or a server render,
 * gives {typists: [], total: 0, threads: []}.
 * @param {import("./client.js").Client | null | undefined} client
 * @param {string | null | undefined} roomId
 * @param {{thread?: string | null}} [opts]
 * @throws {TypeError} a thread that is not a non-empty string
 */
export function useTyping(client, roomId, opts) {
  const thread = threadOf(opts);
  const store = useMemo(() => roomStore(client, roomId, thread), [client, roomId, thread]);
  const snap = useSyncExternalStore(store.subscribe, store.getSnapshot, store.getServerSnapshot);
  // The scope typed in: the room itself, or its thread.
  const scope = () => {
    const room = client && roomId ? client.room(roomId) : undefined;
    return room && thread ? room.thread(thread) : room;
  };
  const keystroke = useCallback((o) => scope()?.keystroke(o && o.activity !== undefined ? { activity: o.activity } : undefined), [client, roomId, thread]);
  const startActivity = useCallback((activity) => scope()?.startActivity(activity), [client, roomId, thread]);
  const messageSent = useCallback(() => scope()?.messageSent(), [client, roomId, thread]);
  const blur = useCallback(() => scope()?.blur(), [client, roomId, thread]);
  const stop = useCallback((reason) => scope()?.stop(reason), [client, roomId, thread]);
  return useMemo(
    () => ({ typists: snap.typists, total: snap.total, threads: snap.threads, keystroke, startActivity, messageSent, blur, stop }),
    [snap, keystroke, startActivity, messageSent, blur, stop],
  );
}
