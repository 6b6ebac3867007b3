// React binding: useTyping(client, roomId) on useSyncExternalStore.
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

/** The state with nobody typing: no client, no room, or server render. */
const EMPTY = Object.freeze({ typists: Object.freeze([]), total: 0 });

/** @type {WeakMap<object, Map<string, {count: number, room: object, owned: boolean}>>} */
const holds = new WeakMap();

/** @type {WeakMap<object, {typists: readonly object[], total: number}>} last snapshot per Room */
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
  for (let i = 0; i < a.length; i++) if (a[i].user !== b[i].user || a[i].name !== b[i].name) return false;
  return true;
}

/**
 * The external store behind useTyping, for one (client, room); the same
 * object for the same pair. `subscribe` holds the room (see holdRoom) and
 * calls back on its "change"; `getSnapshot` returns the same frozen
 * {typists, total} until who types or the total changes; the server
 * snapshot is always empty.
 * @param {import("./client.js").Client | null | undefined} client
 * @param {string | null | undefined} roomId
 */
export function roomStore(client, roomId) {
  if (!client || roomId == null || roomId === "") return emptyStore;
  let byRoom = stores.get(client);
  if (!byRoom) stores.set(client, (byRoom = new Map()));
  let store = byRoom.get(roomId);
  if (store) return store;
  store = {
    /** @param {() => void} onChange */
    subscribe(onChange) {
      const release = holdRoom(client, roomId);
      // On the client, so a room left and joined again keeps notifying.
      const off = client.on("change", (room) => {
        if (room.id === roomId) onChange();
      });
      return () => {
        off();
        release();
      };
    },
    getSnapshot() {
      const room = client.room(roomId);
      if (!room) return EMPTY;
      const typists = room.typists;
      const total = room.total;
      if (typists.length === 0 && total === 0) return EMPTY;
      const last = snapshots.get(room);
      if (last && last.total === total && sameTypists(last.typists, typists)) return last;
      const snap = Object.freeze({ typists: Object.freeze(typists.map((t) => Object.freeze(t))), total });
      snapshots.set(room, snap);
      return snap;
    },
    getServerSnapshot: () => EMPTY,
  };
  byRoom.set(roomId, store);
  return store;
}

const emptyStore = Object.freeze({
  subscribe: () => () => {},
  getSnapshot: () => EMPTY,
  getServerSnapshot: () => EMPTY,
});

/**
 * Who types in a room, and this user's typing there, for a React component.
 * Joins the room while at least one mounted component uses it (shared with
 * other components on the same client and room; see holdRoom) and
 * re-renders when its typists change.
 *
 * Returns {typists, total, keystroke, messageSent, blur, stop}: typists
 * (never this user, in the order they started, frozen) and total (typists
 * plus those a cut snapshot only counted; pass it to formatTypists) are the
 * same objects until they change. The functions are stable for a (client,
 * roomId) and do nothing before the room is joined or without one.
 * A null/undefined client or roomId, or a server render, gives
 * {typists: [], total: 0}.
 * @param {import("./client.js").Client | null | undefined} client
 * @param {string | null | undefined} roomId
 */
export function useTyping(client, roomId) {
  const store = useMemo(() => roomStore(client, roomId), [client, roomId]);
  const snap = useSyncExternalStore(store.subscribe, store.getSnapshot, store.getServerSnapshot);
  const room = () => (client && roomId ? client.room(roomId) : undefined);
  const keystroke = useCallback(() => room()?.keystroke(), [client, roomId]);
  const messageSent = useCallback(() => room()?.messageSent(), [client, roomId]);
  const blur = useCallback(() => room()?.blur(), [client, roomId]);
  const stop = useCallback((reason) => room()?.stop(reason), [client, roomId]);
  return useMemo(
    () => ({ typists: snap.typists, total: snap.total, keystroke, messageSent, blur, stop }),
    [snap, keystroke, messageSent, blur, stop],
  );
}
