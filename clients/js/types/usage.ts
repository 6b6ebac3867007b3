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
  type Thread,
  type ThreadTyping,
  type Activity,
  type KeystrokeOptions,
  ACTIVITIES,
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

// An app declares its operator's activities (ELLIPSIS_ACTIVITIES) once.
declare module "@ellipsis-chat/client" {
  interface CustomActivities {
    reviewing: true;
  }
}

// Threads and activities: a channel view, a thread view, this user's typing per scope.
function threads(client: Client, channelLine: HTMLElement, threadLine: HTMLElement, input: HTMLInputElement): void {
  const room = client.join("42");
  const quiet: Room = client.join("43", { typing: false });
  console.log(quiet.receivesTyping, client.config?.maxThreadsPerUser ?? 0, client.config?.activities.length);
  const channel = new TypingIndicator(channelLine);
  const show = () => channel.update(room.typists, room.total, room.threads);
  room.on("change", show);
  room.on("threads", (list: ThreadTyping[]) => console.log(list.map((t) => `${t.thread}: ${t.total}`)));
  client.on("threads", (r: Room, list: ThreadTyping[]) => console.log(r.id, list.length));
  const t: Thread = room.thread("t-9");
  const inThread = new TypingIndicator(threadLine);
  t.on("change", (typists: Typist[], total: number) => inThread.update(typists, total));
  input.addEventListener("input", () => t.keystroke());
  input.addEventListener("blur", () => t.blur());
  room.keystroke({ thread: "t-9", activity: "thinking" });
  const opts: KeystrokeOptions = { activity: "recording_audio" };
  room.keystroke(opts);
  room.startActivity("uploading", { thread: "t-9" });
  room.startActivity("reviewing"); // declared in CustomActivities
  t.startActivity("recording_video");
  room.messageSent({ thread: "t-9" });
  room.stop({ thread: "t-9", reason: "sent" });
  room.stop("blur");
  room.stopAll("leave");
  client.keystroke("42", { thread: "t-9" });
  client.messageSent("42", { thread: "t-9" });
  const inT: Typist[] = client.typists("42", { thread: "t-9" });
  const a: Activity = ACTIVITIES[0];
  const what: string | undefined = inT[0]?.activity;
  console.log(a, what, t.typing, t.stats.changes, room.stats.changes);
  const line: string = formatTypists(room.typists, { total: room.total, threads: room.threads });
  console.log(line);
  // @ts-expect-error an activity neither built in nor declared
  room.keystroke({ activity: "thinkng" });
  // @ts-expect-error a misspelled option (thread)
  room.keystroke({ thred: "t-9" });
  // @ts-expect-error an activity is a string
  t.keystroke({ activity: 1 });
  // @ts-expect-error startActivity needs an activity
  room.startActivity();
  // @ts-expect-error the join option typing is a boolean
  client.join("44", { typing: "no" });
  // @ts-expect-error join has no option "filter"
  client.join("44", { filter: false });
  // @ts-expect-error wrong handler signature: "threads" gives ThreadTyping[]
  room.on("threads", (thread: string) => console.log(thread));
  // @ts-expect-error a Thread has no "threads" event
  t.on("threads", () => {});
  // @ts-expect-error a thread id is a string
  room.thread(9);
  // @ts-expect-error room.threads entries are read-only
  room.threads[0].total = 2;
  // @ts-expect-error a stop reason the runtime does not know, in a thread
  room.stop({ thread: "t-9", reason: "idel" });
}
void threads;

// Tables with the new fields: activities, busy, people, thread(s).
const deFull: TypingMessages = {
  ...de,
  people: { one: "{count} Person", other: "{count} Personen" },
  activities: { thinking: { one: "{names} denkt nach…", other: "{names} denken nach…" } },
  busy: { other: "{names} ist beschäftigt…" },
  thread: { other: "{line} in einem Thread…" },
  threads: { other: "{line} in Threads…" },
};
void deFull;
// @ts-expect-error an activity's line is a PluralMessage (other required)
const badTable: TypingMessages = { ...de, activities: { thinking: { one: "{names} denkt" } } };
void badTable;

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
  return formatTypists(t.typists, { total: t.total, threads: t.threads });
}
void composer;

function threadComposer(client: Client, roomId: string, thread: string | null): string {
  const t: UseTyping = useTyping(client, roomId, { thread });
  t.keystroke({ activity: "thinking" });
  t.startActivity("recording_audio");
  const n: number = t.threads.length + t.total;
  void n;
  // @ts-expect-error a misspelled option (thread)
  useTyping(client, roomId, { thred: "t" });
  // @ts-expect-error an activity neither built in nor declared
  t.keystroke({ activity: "dancing" });
  // @ts-expect-error the snapshot's threads are read-only
  t.threads = [];
  return formatTypists(t.typists, { total: t.total });
}
void threadComposer;
