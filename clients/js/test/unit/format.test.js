import { test } from "node:test";
import assert from "node:assert/strict";
import { formatTypists, formatTyping, resolveLocale, splitEllipsis, displayName } from "../../src/ellipsis.js";

const people = ["Alice", "Bob", "Carol", "Dan", "Eve"];

test("English, exactly as the issue says", () => {
  assert.equal(formatTypists([]), "");
  assert.equal(formatTypists(people.slice(0, 1)), "Alice is typing…");
  assert.equal(formatTypists(people.slice(0, 2)), "Alice and Bob are typing…");
  assert.equal(formatTypists(people.slice(0, 3)), "Alice, Bob and Carol are typing…");
  assert.equal(formatTypists(people.slice(0, 4)), "Alice, Bob and 2 others are typing…");
  assert.equal(formatTypists(people), "Alice, Bob and 3 others are typing…");
  assert.equal(formatTypists(people.slice(0, 2), { locale: "en-GB" }), "Alice and Bob are typing…");
});

test("Vietnamese, exactly as the seed says", () => {
  const vi = { locale: "vi" };
  assert.equal(formatTypists([], vi), "");
  assert.equal(formatTypists(people.slice(0, 1), vi), "Alice đang gõ...");
  assert.equal(formatTypists(people.slice(0, 2), vi), "Alice và Bob đang gõ...");
  assert.equal(formatTypists(people.slice(0, 3), vi), "Alice, Bob và Carol đang gõ...");
  assert.equal(formatTypists(people.slice(0, 4), vi), "4 người đang gõ...");
  assert.equal(formatTypists(people, vi), "5 người đang gõ...");
  assert.equal(formatTypists(people.slice(0, 1), { locale: "vi-VN" }), "Alice đang gõ...");
});

test("max names", () => {
  assert.equal(formatTypists(people.slice(0, 4), { max: 4 }), "Alice, Bob, Carol and Dan are typing…");
  assert.equal(formatTypists(people.slice(0, 3), { max: 2 }), "Alice and 2 others are typing…");
  assert.equal(formatTypists(people.slice(0, 2), { max: 1 }), "2 people are typing…");
  assert.equal(formatTypists(people.slice(0, 1), { max: 1 }), "Alice is typing…");
  assert.equal(formatTypists(people.slice(0, 4), { max: 0 }), "4 people are typing…", "below 1 counts as 1");
  assert.equal(formatTypists(people.slice(0, 4), { max: NaN }), "Alice, Bob and 2 others are typing…", "not a number: default");
  assert.equal(formatTypists(people.slice(0, 3), { max: 2, locale: "vi" }), "3 người đang gõ...");
  assert.equal(formatTypists(people.slice(0, 4), { max: 4, locale: "vi" }), "Alice, Bob, Carol và Dan đang gõ...");
});

test("typists as objects: name, else user id", () => {
  const typists = [{ user: "alice", name: "Alice" }, { user: "bob" }];
  assert.equal(formatTypists(typists), "Alice and bob are typing…");
  assert.equal(displayName({ user: "u1", name: "" }), "u1");
  assert.equal(formatTyping(["Alice"]), "Alice is typing…", "the deprecated alias still works");
});

test("locales and ellipsis split", () => {
  assert.equal(resolveLocale("vi"), "vi");
  assert.equal(resolveLocale("VI_vn"), "vi");
  assert.equal(resolveLocale("fr"), "en");
  assert.equal(resolveLocale(undefined), "en");
  assert.deepEqual(splitEllipsis("Alice is typing…"), { text: "Alice is typing", dots: "…" });
  assert.deepEqual(splitEllipsis("Alice đang gõ..."), { text: "Alice đang gõ", dots: "..." });
  assert.deepEqual(splitEllipsis(""), { text: "", dots: "" });
});

test("total above the names listed: N people are typing", () => {
  assert.equal(formatTypists(["Alice", "Bob"], { total: 140 }), "140 people are typing…");
  assert.equal(formatTypists([], { total: 7 }), "7 people are typing…");
  assert.equal(formatTypists([], { total: 1 }), "1 person is typing…");
  assert.equal(formatTypists(["Alice", "Bob"], { total: 140, locale: "vi" }), "140 người đang gõ...");
  // Not above: the usual lines.
  assert.equal(formatTypists(["Alice"], { total: 1 }), "Alice is typing…");
  assert.equal(formatTypists(["Alice", "Bob"], { total: 2 }), "Alice and Bob are typing…");
  assert.equal(formatTypists(people, { total: 5 }), "Alice, Bob and 3 others are typing…");
  assert.equal(formatTypists([], { total: 0 }), "");
  assert.equal(formatTypists(["Alice"], { total: undefined }), "Alice is typing…");
});
