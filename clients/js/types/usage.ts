// Compiled with `tsc --strict` (npm run test:types) against the package's
// own types, as a consumer would import it. Lines marked @ts-expect-error
// must fail to compile.
import {
  connect,
  Client,
  Room,
  formatTypists,
  TypingIndicator,
  TypingTimer,
  TypistStore,
  validateTimers,
  MESSAGES,
  type TypingMessages,
  type Typist,
  type StateEvent,
  type ErrorFrame,
  type ClientOptions,
  type RoomSummary,
  type WatchResult,
  type WatchRefusal,
} from "@ellipsis-chat/client";

async function main(input: HTMLInputElement, line: HTMLElement): Promise<void> {
  const opts: ClientOptions = { url: "https://chat.example.com", token: async () => "jwt", resyncMs: 10_000 };
  const client: Client = await connect(opts);
  const room: Room = client.join("42");
  const indicator = new TypingIndicator(line, { locale: "vi", max: 3 });
  const off: () => void = room.on("change", (typists: Typist[], total: number) => indicator.update(typists, total));
  client.on("state", (ev: StateEvent) => console.log(ev.state, ev.delayMs ?? 0));
  client.on("error", (err: ErrorFrame | Error) => console.log(err.message));
  client.on("resync", (ev) => console.log(ev.reason === "wake", ev.rooms.length));
  const synced: boolean = room.sync();
  console.log(synced);
  input.addEventListener("input", () => room.keystroke());
  input.addEventListener("blur", () => client.blur("42"));
  room.messageSent();
  const text: string = formatTypists(room.typists, { locale: "en", max: 3, total: room.total });
  const n: number = room.stats.refreshes + room.stats.starts;
  console.log(text, n, client.config?.ttlMs, room.state === "joined");
  off();

  const dev = new Client({ user: "alice", name: "Alice" });
  await dev.connect();

  const timer = new TypingTimer({ refreshMs: 4000, send: (action) => console.log(action) });
  timer.keystroke();
  const store = new TypistStore({ self: "me" });
  store.replace([{ user: "bob", name: "Bob" }]);
  store.replace([{ user: "bob", name: "Bob" }], 140);
  const everyone: number = store.total;
  console.log(everyone);
  validateTimers({ ttlMs: 5000, refreshMs: 4000, idleStopMs: 3000 });

  // @ts-expect-error a room id is a string
  client.join(42);
  // @ts-expect-error unknown locale option type
  formatTypists(["a"], { locale: 1 });
  // @ts-expect-error state is read-only
  room.state = "left";
}
void main;

// Watching many rooms: summaries for a room list.
async function roomList(client: Client, list: Map<string, HTMLElement>): Promise<void> {
  client.on("summary", (s: RoomSummary) => {
    const el = list.get(s.room);
    if (el) el.textContent = formatTypists(s.typing, { total: s.total });
  });
  const res: WatchResult = await client.watch([...list.keys()]);
  const refused: WatchRefusal[] = res.refused;
  console.log(res.rooms.length, res.watched, refused.map((r) => `${r.room}: ${r.code} ${r.message}`));
  await client.watch(new Set(["42"])); // any iterable of ids
  const last: RoomSummary | undefined = client.summary("42");
  console.log(last?.total ?? 0, last?.typing[0]?.name, client.watched.has("42"), client.config?.maxFrameBytes);
  new TypingIndicator(document.body).update(last?.typing ?? [], last?.total);
  client.unwatch(["42"]);
  client.unwatch();
  // @ts-expect-error a summary is read-only
  if (last) last.total = 0;
  // @ts-expect-error watched is a read-only set
  client.watched.add("43");
}
void roomList;

// Mistakes the types catch (each line must fail, or tsc reports an unused directive).
function mistakes(client: Client, room: Room, line: HTMLElement): void {
  // @ts-expect-error misspelled event name
  room.on("chnage", () => {});
  // @ts-expect-error misspelled client event name
  client.once("stat", () => {});
  // @ts-expect-error wrong handler signature: "change" gives (typists: Typist[], total: number)
  room.on("change", (typists: string) => console.log(typists));
  // @ts-expect-error wrong handler signature: "state" gives a StateEvent
  client.on("state", (ev: ErrorFrame) => console.log(ev.code));
  // @ts-expect-error emit with the wrong arguments
  room.emit("change", "alice", 1);
  // @ts-expect-error wrong option name (user)
  new Client({ usr: "alice" });
  // @ts-expect-error wrong option type: milliseconds are numbers
  new Client({ url: "https://chat.example.com", resyncMs: "10s" });
  // @ts-expect-error TypingIndicator has no minShowMS (minShowMs)
  new TypingIndicator(line, { minShowMS: 500 });
  // @ts-expect-error a stop reason the runtime does not know
  room.stop("idel");
  // @ts-expect-error misspelled event name (summary)
  client.on("summaries", () => {});
  // @ts-expect-error wrong handler signature: "summary" gives one RoomSummary
  client.on("summary", (room: string, total: number) => console.log(room, total));
  // @ts-expect-error watch takes the ids of rooms, not one id
  void client.watch("42");
  // @ts-expect-error room ids are strings
  void client.watch([42]);
  // @ts-expect-error unwatch takes ids, not a Room
  client.unwatch([room]);
}
void mistakes;

// The page's own WebSocket and fetch fit the options.
const pageClient = new Client({ WebSocket, fetch, window, document, fetchConfig: false });
void pageClient;

// Languages: a table a translator fills; mistakes in it fail to compile.
const de: TypingMessages = {
  typing: { one: "{names} tippt…", other: "{names} tippen…" },
  others: { one: "{count} weitere Person", other: "{count} weitere Personen" },
  count: { one: "{count} Person tippt…", other: "{count} Personen tippen…" },
};
function languages(line: HTMLElement): void {
  const ind = new TypingIndicator(line, { locale: "de-AT", messages: de, minShowMs: 500 });
  ind.messages = { ...MESSAGES.en, count: { other: "{count} typing…" } };
  console.log(formatTypists(["Alice"], { locale: "de", messages: de }));
  // @ts-expect-error "other" is required
  formatTypists([], { messages: { typing: { one: "{names} tippt…" }, count: de.count } });
  // @ts-expect-error not a plural category
  formatTypists([], { messages: { ...de, count: { other: "x", plural: "y" } } });
  // @ts-expect-error a misspelled field of the table
  formatTypists([], { messages: { ...de, other: de.others } });
  // @ts-expect-error TypingIndicator takes no total (update(typists, total) does)
  new TypingIndicator(line, { total: 3 });
}
void languages;

// The React binding (@ellipsis-chat/client/react): no @types/react needed.
import { useTyping, type UseTyping } from "@ellipsis-chat/client/react";

function composer(client: Client | null, roomId: string | null): string {
  const t: UseTyping = useTyping(client, roomId);
  t.keystroke();
  t.messageSent();
  t.blur();
  t.stop("sent");
  const first: string | undefined = t.typists[0]?.name;
  void first;
  // @ts-expect-error not a stop reason
  t.stop("later");
  // @ts-expect-error the snapshot is read-only
  t.total = 3;
  // @ts-expect-error a room id is a string
  useTyping(client, 42);
  return formatTypists(t.typists, { total: t.total });
}
void composer;
