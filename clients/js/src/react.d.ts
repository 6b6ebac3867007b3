// Types of the React binding (@ellipsis-chat/client/react). Self-contained:
// they need no @types/react, since the hook returns plain data and functions.
import type { Activity, Client, StopReason, ThreadTyping, Typist } from "./ellipsis.js";

/** Who types in a room (or a thread of it): the same frozen object until it changes. */
export interface TypingSnapshot {
  /** Typists of the view's scope, never this user, in the order they started. */
  readonly typists: readonly Readonly<Typist>[];
  /** Typists listed plus those a cut snapshot only counted (for formatTypists' `total`). */
  readonly total: number;
  /**
   * A channel view (no `thread`): who types in which thread of the room
   * (for formatTypists' `threads`); a thread view: always empty.
   */
  readonly threads: readonly ThreadTyping[];
}

/** useTyping's options. */
export interface UseTypingOptions {
  /** A thread of the room: the view shows and types in that thread only. Absent or null: the room itself. */
  thread?: string | null;
}

/** What useTyping returns; the functions act in the view's scope and are stable for a (client, roomId, thread). */
export interface UseTyping extends TypingSnapshot {
  /** Call on every keystroke that changes the draft; `activity` (default "typing") is what others see. */
  keystroke(opts?: { activity?: Activity }): void;
  /** Shows `activity` (a recording, an upload) until stop(): refreshed, no idle stop. */
  startActivity(activity: Activity): void;
  /** The message was sent: typing_stop at once. */
  messageSent(): void;
  /** The message box lost focus: typing_stop at once. */
  blur(): void;
  /** Ends this user's typing burst now, if one is on (default reason "cancel"). */
  stop(reason?: StopReason): void;
}

/**
 * Who types in `roomId` (or in its thread `opts.thread`), and this user's
 * typing there, on useSyncExternalStore. Joins the room while a mounted
 * component uses it (shared between components, threads included; left
 * after the last one unmounts, unless the app joined it itself). A
 * null/undefined client or roomId, or a server render, gives
 * {typists: [], total: 0, threads: []}. A thread that is not a non-empty
 * string throws a TypeError.
 */
export declare function useTyping(client: Client | null | undefined, roomId: string | null | undefined, opts?: UseTypingOptions): UseTyping;

/** The external store behind useTyping for one (client, room, thread); the same object for the same triple. */
export interface RoomStore {
  subscribe(onChange: () => void): () => void;
  getSnapshot(): TypingSnapshot;
  getServerSnapshot(): TypingSnapshot;
}

export declare function roomStore(client: Client | null | undefined, roomId: string | null | undefined, thread?: string): RoomStore;

/** Holds a room (joins it if needed) until the returned function is called; see useTyping. */
export declare function holdRoom(client: Client, roomId: string): () => void;
