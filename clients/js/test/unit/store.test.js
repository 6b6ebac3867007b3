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

test("a cut snapshot: total counts the typists it did not list", (t) => {
  const timers = fakeTimers(t);
  const store = new TypistStore({ self: "me", ttlMs: 5000, graceMs: 1000 });
  const changes = [];
  store.on("change", (typists, total) => changes.push(`${typists.map((x) => x.user).join(",")}/${total}`));
  store.replace([{ user: "a" }, { user: "b" }], 5);
  assert.equal(store.size, 2);
  assert.equal(store.total, 5);
  // An unlisted typist's refresh lists it: the total stays.
  store.start("c", "C", 5000);
  assert.equal(store.total, 5);
  // A stop of someone not listed: one unlisted fewer.
  store.stop("d");
  assert.equal(store.total, 4);
  // A stop of a listed one: listed and total go down.
  store.stop("a");
  assert.deepEqual([store.size, store.total], [2, 3]);
  assert.deepEqual(changes, ["a,b/5", "a,b,c/5", "a,b,c/4", "b,c/3"]);
  // The unlisted count expires like an entry: ttl + grace after the snapshot.
  timers.tick(5999);
  store.start("b", undefined, 5000);
  store.start("c", undefined, 5000);
  assert.equal(store.total, 3);
  timers.tick(1);
  assert.deepEqual([store.size, store.total], [2, 2]);
  assert.equal(changes.at(-1), "b,c/2");
  // A new snapshot replaces the count; leave forgets it.
  store.replace([{ user: "b" }], 140);
  assert.equal(store.total, 140);
  store.clear();
  assert.deepEqual([store.size, store.total], [0, 0]);
  store.dispose();
});

test("a snapshot without total (an older gateway) lists everyone; self never counted", (t) => {
  fakeTimers(t);
  const store = new TypistStore({ self: "me" });
  store.replace([{ user: "a" }, { user: "b" }]);
  assert.equal(store.total, 2);
  store.replace([{ user: "a" }, { user: "me" }], 1); // total below the list: the list wins
  assert.equal(store.total, 1);
  store.start("z", "Z", 5000); // not cut: a new typist adds
  assert.equal(store.total, 2);
  store.stop("nobody"); // nothing unlisted: no change
  assert.equal(store.total, 2);
  store.dispose();
});

test("activity: kept per typist (absent for typing), a new one is a change, snapshots carry it", (t) => {
  const { store, changes } = setup(t);
  store.start("bot", "Assistant", 30000, "thinking");
  assert.deepEqual(store.typists, [{ user: "bot", name: "Assistant", activity: "thinking" }]);
  store.start("bot", "Assistant", 30000, "thinking"); // a refresh: no change
  store.start("bot", "Assistant", 30000, "typing"); // typing is the default: no activity field
  assert.deepEqual(store.typists, [{ user: "bot", name: "Assistant" }]);
  store.replace([{ user: "bot", name: "Assistant", activity: "uploading" }], 1);
  assert.deepEqual(store.typists, [{ user: "bot", name: "Assistant", activity: "uploading" }]);
  assert.deepEqual(changes, ["bot", "bot", "bot"]);
});

test("per-entry expiry: an event's long ttl_ms is kept across snapshots; a snapshot-only entry lives ttl + grace", (t) => {
  const { store, timers } = setup(t);
  store.start("bot", "Assistant", 30000, "thinking");
  timers.tick(10000);
  store.replace([{ user: "bot", name: "Assistant", activity: "thinking" }, { user: "carol" }], 2);
  timers.tick(6000);
  assert.deepEqual(store.typists.map((x) => x.user), ["bot"], "carol, seen in the snapshot only: ttl + grace");
  timers.tick(14999);
  assert.ok(store.has("bot"), "30.999 s after its start");
  timers.tick(1);
  assert.ok(!store.has("bot"));
});

test("a snapshot typist's ttl_ms is its lifetime from the snapshot: shown past the standard ttl until ttl_ms + grace", (t) => {
  const { store, timers } = setup(t);
  store.replace([{ user: "bot", name: "Assistant", activity: "thinking", ttl_ms: 30000 }, { user: "carol" }], 2);
  timers.tick(6000);
  assert.deepEqual(store.typists.map((x) => x.user), ["bot"], "carol, without ttl_ms: the standard ttl + grace");
  assert.deepEqual(store.typists, [{ user: "bot", name: "Assistant", activity: "thinking" }], "ttl_ms is not part of the typist shown");
  timers.tick(24999);
  assert.ok(store.has("bot"), "30.999 s after the snapshot");
  timers.tick(1);
  assert.ok(!store.has("bot"));
});
