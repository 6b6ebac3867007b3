import { test } from "node:test";
import assert from "node:assert/strict";
import { TypistStore } from "../../src/ellipsis.js";
import { fakeTimers } from "./helpers.js";

function setup(t, opts = {}) {
  const timers = fakeTimers(t);
  const store = new TypistStore({ self: "me", ttlMs: 5000, graceMs: 1000, ...opts });
  const changes = [];
  store.on("change", (typists) => changes.push(typists.map((x) => x.user).join(",")));
  return { store, changes, timers };
}

test("typing_start adds, typing_stop removes, in start order", (t) => {
  const { store, changes } = setup(t);
  store.start("alice", "Alice", 5000);
  store.start("bob", undefined, 5000);
  assert.deepEqual(store.typists, [{ user: "alice", name: "Alice" }, { user: "bob" }]);
  store.start("alice", "Alice", 5000); // a refresh: no change
  store.stop("alice");
  store.stop("alice"); // already gone: no change
  store.stop("nobody");
  assert.deepEqual(changes, ["alice", "alice,bob", "bob"]);
  assert.equal(store.size, 1);
  assert.ok(store.has("bob") && !store.has("alice"));
});

test("a new display name is a change", (t) => {
  const { store, changes } = setup(t);
  store.start("alice", "", 5000);
  store.start("alice", "Alice", 5000);
  store.start("alice", undefined, 5000); // no name on this event: keep the one known
  assert.deepEqual(store.typists, [{ user: "alice", name: "Alice" }]);
  assert.equal(changes.length, 2);
});

test("self filter: own user never listed, from events or snapshots", (t) => {
  const { store, changes } = setup(t);
  store.start("me", "Me", 5000);
  store.replace([{ user: "me" }, { user: "bob" }]);
  assert.deepEqual(store.typists, [{ user: "bob" }]);
  assert.deepEqual(changes, ["bob"]);
});

test("local expiry: ttl_ms + grace after the last start; a refresh extends it", (t) => {
  const { store, changes, timers } = setup(t);
  store.start("alice", "Alice", 5000);
  timers.tick(4000);
  store.start("alice", "Alice", 5000); // refresh at 4 s: now lives to 4 + 5 + 1 = 10 s
  timers.tick(5999);
  assert.ok(store.has("alice"), "still there at 9.999 s");
  timers.tick(1);
  assert.ok(!store.has("alice"), "gone at 10 s: a lost typing_stop cannot stick");
  assert.deepEqual(changes, ["alice", ""]);
});

test("the event's ttl_ms wins over the default", (t) => {
  const { store, timers } = setup(t);
  store.start("alice", "Alice", 2000);
  timers.tick(2999);
  assert.ok(store.has("alice"));
  timers.tick(1);
  assert.ok(!store.has("alice"));
});

test("a snapshot replaces, never merges; known users keep their place", (t) => {
  const { store, changes, timers } = setup(t);
  store.start("alice", "Alice", 5000);
  store.start("bob", "Bob", 5000);
  store.replace([{ user: "carol", name: "Carol" }, { user: "bob", name: "Bob" }]);
  assert.deepEqual(store.typists.map((x) => x.user), ["bob", "carol"]);
  store.replace([{ user: "bob", name: "Bob" }, { user: "carol", name: "Carol" }]); // same set: no change
  store.replace([]);
  store.replace(null);
  assert.deepEqual(changes, ["alice", "alice,bob", "bob,carol", ""]);
  // Snapshot entries expire locally too (ttl + grace from the snapshot).
  store.replace([{ user: "dan" }, { user: "" }, null, { name: "no user" }]);
  assert.deepEqual(store.typists, [{ user: "dan" }]);
  timers.tick(6000);
  assert.equal(store.size, 0);
});

test("clear and dispose", (t) => {
  const { store, changes, timers } = setup(t);
  store.clear(); // empty: no change
  store.start("alice", "Alice", 5000);
  store.clear();
  assert.deepEqual(changes, ["alice", ""]);
  store.start("bob", "Bob", 5000);
  store.dispose();
  timers.tick(10000);
  assert.ok(store.has("bob"), "dispose stops the expiry timers");
});
