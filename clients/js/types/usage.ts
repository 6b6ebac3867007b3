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
  type Typist,
  type StateEvent,
  type ErrorFrame,
  type ClientOptions,
} from "@ellipsis-chat/client";

async function main(input: HTMLInputElement, line: HTMLElement): Promise<void> {
  const opts: ClientOptions = { url: "https://chat.example.com", token: async () => "jwt", resyncMs: 10_000 };
  const client: Client = await connect(opts);
  const room: Room = client.join("42");
  const indicator = new TypingIndicator(line, { locale: "vi", max: 3 });
  const off: () => void = room.on("change", (typists: Typist[], total: number) => indicator.update(typists, total));
  client.on("state", (ev: StateEvent) => console.log(ev.state, ev.delayMs ?? 0));
  client.on("error", (err: ErrorFrame | Error) => console.log(err.message));
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
