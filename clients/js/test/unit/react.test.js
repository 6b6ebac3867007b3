// The React binding's store logic (src/react.js) on a real Client over the
// fake WebSocket, and its server render with react-dom/server. Node has no
// DOM for react-dom/client; test/e2e/react.test.js mounts it in Chromium.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createElement, StrictMode } from "react";
import { renderToString } from "react-dom/server";
import { Client } from "../../src/ellipsis.js";
import { useTyping, roomStore, holdRoom } from "../../src/react.js";
import { flush, FakeWebSocket, FakeClock, configFetch, FakeTarget } from "./helpers.js";

async function openClient(config) {
  FakeWebSocket.reset();
  const client = new Client({
    url: "http://gw.test:8080",
    user: "me",
    WebSocket: FakeWebSocket,
    fetch: configFetch(config),
    window: new FakeTarget(),
    document: new FakeTarget(),
    clock: new FakeClock(),
  });
  const p = client.connect();
  await flush();
  const ws = FakeWebSocket.last;
  ws.open();
  await p;
  return { client, ws };
}

const joins = (ws, room) => ws.framesOf("join").filter((f) => f.room === room).length;
const leaves = (ws, room) => ws.framesOf("leave").filter((f) => f.room === room).length;

test("react store: the same snapshot until the typists change, then a new frozen one", async () => {
  const { client, ws } = await openClient();
  const store = roomStore(client, "42");
  assert.equal(roomStore(client, "42"), store, "one store per (client, room)");
  let calls = 0;
  const unsubscribe = store.subscribe(() => calls++);
  assert.equal(joins(ws, "42"), 1);
  const empty = store.getSnapshot();
  assert.deepEqual(empty, { typists: [], total: 0, threads: [] });
  assert.equal(store.getSnapshot(), empty);
  ws.acceptJoin("42", [{ user: "alice", name: "Alice" }]);
  assert.equal(calls, 1);
  const a = store.getSnapshot();
  assert.deepEqual(a, { typists: [{ user: "alice", name: "Alice" }], total: 1, threads: [] });
  assert.equal(store.getSnapshot(), a, "stable across reads (React loops otherwise)");
  assert.ok(Object.isFrozen(a) && Object.isFrozen(a.typists));
  ws.receive({ type: "typing_start", room: "42", user: "bob", name: "Bob", ttl_ms: 5000 });
  const ab = store.getSnapshot();
  assert.notEqual(ab, a);
  assert.deepEqual(ab.typists.map((t) => t.user), ["alice", "bob"]);
  assert.equal(ab.total, 2);
  unsubscribe();
  await flush();
  assert.equal(leaves(ws, "42"), 1, "the last holder leaves");
  assert.equal(client.room("42"), undefined);
  assert.equal(store.getSnapshot(), empty);
  assert.equal(store.getServerSnapshot(), empty);
});

test("react store: a StrictMode unsubscribe + subscribe keeps the room joined, without leave or a second join", async () => {
  const { client, ws } = await openClient();
  const store = roomStore(client, "s");
  const off1 = store.subscribe(() => {});
  off1();
  const off2 = store.subscribe(() => {});
  await flush();
  assert.equal(joins(ws, "s"), 1);
  assert.equal(leaves(ws, "s"), 0);
  assert.ok(client.room("s"));
  off2();
  off2(); // releasing twice is a no-op
  await flush();
  assert.equal(leaves(ws, "s"), 1);
});

test("react store: two holders share a room; it stays until both release", async () => {
  const { client, ws } = await openClient();
  const offA = roomStore(client, "r").subscribe(() => {});
  const offB = holdRoom(client, "r");
  assert.equal(joins(ws, "r"), 1);
  offA();
  await flush();
  assert.equal(leaves(ws, "r"), 0, "B still holds it");
  client.room("r").keystroke();
  assert.equal(ws.framesOf("typing_start").length, 0, "not joined yet: typing waits for the join");
  ws.acceptJoin("r");
  assert.equal(ws.framesOf("typing_start").length, 1);
  offB();
  await flush();
  assert.equal(leaves(ws, "r"), 1);
});

test("react store: a room the app joined itself is never left by the hook", async () => {
  const { client, ws } = await openClient();
  const room = client.join("app");
  const off = roomStore(client, "app").subscribe(() => {});
  off();
  await flush();
  assert.equal(leaves(ws, "app"), 0);
  assert.equal(client.room("app"), room);
});

test("react store: a room left and joined again by the app keeps notifying; the old hold does not leave the new room", async () => {
  const { client, ws } = await openClient();
  const store = roomStore(client, "x");
  let calls = 0;
  const off = store.subscribe(() => calls++);
  client.room("x").leave();
  const again = client.join("x");
  ws.acceptJoin("x", [{ user: "carol" }]);
  assert.ok(calls >= 1);
  assert.deepEqual(store.getSnapshot().typists, [{ user: "carol" }]);
  off();
  await flush();
  assert.equal(client.room("x"), again, "the app's new room stays");
});

test("react store: a null client or room id is an empty store that joins nothing", async () => {
  const { client, ws } = await openClient();
  for (const s of [roomStore(null, "42"), roomStore(client, null), roomStore(client, ""), roomStore(undefined, undefined)]) {
    s.subscribe(() => {})();
    assert.deepEqual(s.getSnapshot(), { typists: [], total: 0, threads: [] });
    assert.equal(s.getSnapshot(), s.getServerSnapshot());
  }
  assert.equal(ws.framesOf("join").length, 0);
  assert.throws(() => holdRoom(client, 42), /room id must be a non-empty string/);
});

test("react useTyping: a server render (react-dom/server, StrictMode) shows nobody and joins nothing", async () => {
  const { client, ws } = await openClient();
  client.join("ssr");
  ws.acceptJoin("ssr", [{ user: "alice", name: "Alice" }]);
  assert.equal(client.room("ssr").typists.length, 1);
  function Line({ roomId }) {
    const t = useTyping(client, roomId);
    assert.equal(typeof t.keystroke, "function");
    return createElement("p", null, `${t.total}:${t.typists.map((x) => x.user).join(",")}`);
  }
  const html = renderToString(createElement(StrictMode, null, createElement(Line, { roomId: "ssr" }), createElement(Line, { roomId: null })));
  assert.equal(html, "<p>0:</p><p>0:</p>");
  assert.equal(joins(ws, "ssr"), 1);
  assert.equal(ws.framesOf("join").length, 1);
});

test("react store per thread: a thread view gets its own typists, a channel view the room's and its threads; activities re-render", async () => {
  const { client, ws } = await openClient({ ttl_ms: 5000, refresh_ms: 4000, idle_stop_ms: 3000, auth: "none", max_threads_per_user: 5 });
  const channel = roomStore(client, "42");
  const view = roomStore(client, "42", "t-9");
  assert.equal(roomStore(client, "42", "t-9"), view, "one store per (client, room, thread)");
  assert.notEqual(view, channel);
  let channelCalls = 0;
  let viewCalls = 0;
  const off1 = channel.subscribe(() => channelCalls++);
  const off2 = view.subscribe(() => viewCalls++);
  assert.equal(joins(ws, "42"), 1, "one join for the room and its threads");
  ws.acceptJoin("42");
  ws.receive({ type: "typing_start", room: "42", thread: "t-9", user: "alice", name: "Alice", ttl_ms: 5000 });
  const v = view.getSnapshot();
  assert.deepEqual(v, { typists: [{ user: "alice", name: "Alice" }], total: 1, threads: [] });
  const c = channel.getSnapshot();
  assert.deepEqual(c, { typists: [], total: 0, threads: [{ thread: "t-9", typists: [{ user: "alice", name: "Alice" }], total: 1 }] });
  assert.ok(Object.isFrozen(c.threads) && Object.isFrozen(c.threads[0]) && Object.isFrozen(c.threads[0].typists));
  assert.equal(channel.getSnapshot(), c, "stable across reads");
  ws.receive({ type: "typing_start", room: "42", user: "bob", ttl_ms: 5000 });
  assert.equal(view.getSnapshot(), v, "the room's own typing leaves the thread view as it was");
  assert.deepEqual(channel.getSnapshot().typists, [{ user: "bob" }]);
  ws.receive({ type: "typing_start", room: "42", thread: "t-9", user: "alice", name: "Alice", activity: "uploading", ttl_ms: 5000 });
  assert.notEqual(view.getSnapshot(), v, "a new activity is a new snapshot");
  assert.equal(view.getSnapshot().typists[0].activity, "uploading");
  assert.ok(viewCalls >= 2 && channelCalls >= 3);
  // The thread view's own typing goes to the thread.
  client.room("42").thread("t-9").keystroke({ activity: "thinking" });
  assert.deepEqual(ws.framesOf("typing_start").map(({ id, ...f }) => f).at(-1), { type: "typing_start", room: "42", thread: "t-9", activity: "thinking" });
  off1();
  off2();
  await flush();
  assert.equal(leaves(ws, "42"), 1);
});

test("useTyping with {thread} renders on the server as empty; a bad thread throws naming it", () => {
  const { client } = { client: new Client({ url: "http://x", fetchConfig: false, user: "me" }) };
  let got;
  function View() {
    got = useTyping(client, "42", { thread: "t-9" });
    return null;
  }
  renderToString(createElement(View));
  assert.deepEqual({ typists: got.typists, total: got.total, threads: got.threads }, { typists: [], total: 0, threads: [] });
  for (const fn of ["keystroke", "startActivity", "messageSent", "blur", "stop"]) assert.equal(typeof got[fn], "function");
  function Bad() {
    useTyping(client, "42", { thread: "" });
    return null;
  }
  assert.throws(() => renderToString(createElement(Bad)), /useTyping\(client, roomId, \{thread\}\): thread must be a non-empty string, got ""/);
  client.close();
});
