// Types of the React binding (@ellipsis-chat/client/react). Self-contained:
// they need no @types/react, since the hook returns plain data and functions.
import type { Client, StopReason, Typist } from "./ellipsis.js";

/** Who types in a room: the same frozen object until it changes. */
export interface TypingSnapshot {
  /** Typists, never this user, in the order they started. */
  readonly typists: readonly Readonly<Typist>[];
  /** Typists listed plus those a cut snapshot only counted (for formatTypists' `total`). */
  readonly total: number;
}

/** What useTyping returns; the functions are stable for a (client, roomId). */
export interface UseTyping extends TypingSnapshot {
  /** Call on every keystroke that changes the draft. */
  keystroke(): void;
  /** The message was sent: typing_stop at once. */
  messageSent(): void;
  /** The message box lost focus: typing_stop at once. */
  blur(): void;
  /** Ends this user's typing burst now, if one is on (default reason "cancel"). */
  stop(reason?: StopReason): void;
}

/**
 * Who types in `roomId`, and this user's typing there, on
 * useSyncExternalStore. Joins the room while a mounted component uses it
 * (shared between components; left after the last one unmounts, unless
 * the app joined it itself). A null/undefined client or roomId, or a
 * server render, gives {typists: [], total: 0}.
 */
export declare function useTyping(client: Client | null | undefined, roomId: string | null | undefined): UseTyping;

/** The external store behind useTyping for one (client, room); the same object for the same pair. */
export interface RoomStore {
  subscribe(onChange: () => void): () => void;
  getSnapshot(): TypingSnapshot;
  getServerSnapshot(): TypingSnapshot;
}

export declare function roomStore(client: Client | null | undefined, roomId: string | null | undefined): RoomStore;

/** Holds a room (joins it if needed) until the returned function is called; see useTyping. */
export declare function holdRoom(client: Client, roomId: string): () => void;
