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

async function openClient() {
  FakeWebSocket.reset();
  const client = new Client({
    url: "http://gw.test:8080",
    user: "me",
    WebSocket: FakeWebSocket,
    fetch: configFetch(),
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
  assert.deepEqual(empty, { typists: [], total: 0 });
  assert.equal(store.getSnapshot(), empty);
  ws.acceptJoin("42", [{ user: "alice", name: "Alice" }]);
  assert.equal(calls, 1);
  const a = store.getSnapshot();
  assert.deepEqual(a, { typists: [{ user: "alice", name: "Alice" }], total: 1 });
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
    assert.deepEqual(s.getSnapshot(), { typists: [], total: 0 });
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
