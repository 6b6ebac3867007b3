import { test } from "node:test";
import assert from "node:assert/strict";
import { formatTypists, formatTyping, resolveLocale, splitEllipsis, displayName, validateMessages, MESSAGES, LOCALES } from "../../src/ellipsis.js";

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

// A third language given only by a messages table (README, "Languages").
const de = {
  typing: { one: "{names} tippt…", other: "{names} tippen…" },
  others: { one: "{count} weitere Person", other: "{count} weitere Personen" },
  count: { one: "{count} Person tippt…", other: "{count} Personen tippen…" },
};

test("German from messages only: 1, 2 and many, the others item, the cut snapshot", () => {
  const o = { locale: "de", messages: de };
  assert.equal(formatTypists([], o), "");
  assert.equal(formatTypists(people.slice(0, 1), o), "Alice tippt…");
  assert.equal(formatTypists(people.slice(0, 2), o), "Alice und Bob tippen…");
  assert.equal(formatTypists(people.slice(0, 3), o), "Alice, Bob und Carol tippen…");
  assert.equal(formatTypists(people, o), "Alice, Bob und 3 weitere Personen tippen…");
  assert.equal(formatTypists(people.slice(0, 3), { ...o, max: 2 }), "Alice und 2 weitere Personen tippen…");
  assert.equal(formatTypists(people.slice(0, 2), { ...o, max: 1 }), "2 Personen tippen…");
  // The gateway cut its snapshot: more type than listed.
  assert.equal(formatTypists(people.slice(0, 2), { ...o, total: 1400 }), "1.400 Personen tippen…", "Intl.NumberFormat groups the count");
  assert.equal(formatTypists([], { ...o, total: 1 }), "1 Person tippt…");
  assert.equal(formatTypists(people.slice(0, 1), { locale: "de-AT", messages: de }), "Alice tippt…");
});

test("plural categories come from Intl.PluralRules: Polish few and many, Japanese other only", () => {
  const pl = {
    typing: { one: "{names} pisze…", other: "{names} piszą…" },
    count: { one: "{count} osoba pisze…", few: "{count} osoby piszą…", many: "{count} osób pisze…", other: "{count} osoby pisze…" },
  };
  assert.equal(formatTypists([], { locale: "pl", messages: pl, total: 1 }), "1 osoba pisze…");
  assert.equal(formatTypists([], { locale: "pl", messages: pl, total: 2 }), "2 osoby piszą…");
  assert.equal(formatTypists([], { locale: "pl", messages: pl, total: 5 }), "5 osób pisze…");
  assert.equal(formatTypists([], { locale: "pl", messages: pl, total: 22 }), "22 osoby piszą…");
  assert.equal(formatTypists(people, { locale: "pl", messages: pl }), "5 osób pisze…", "no others item: the count");
  const ja = { typing: { other: "{names}が入力中…" }, others: { other: "他{count}人" }, count: { other: "{count}人が入力中…" } };
  assert.equal(formatTypists(people.slice(0, 2), { locale: "ja", messages: ja }), "Alice、Bobが入力中…");
  assert.equal(formatTypists(people, { locale: "ja", messages: ja }), "Alice、Bob、他3人が入力中…");
});

test("built-in fallback: base language, then English; English regions list their way", () => {
  assert.equal(formatTypists(people.slice(0, 1), { locale: "vi-VN" }), "Alice đang gõ...");
  assert.equal(formatTypists(people.slice(0, 3), { locale: "vi_VN" }), "Alice, Bob và Carol đang gõ...");
  assert.equal(formatTypists(people.slice(0, 3), { locale: "de-AT" }), "Alice, Bob and Carol are typing…", "no German table: English, listed as English");
  assert.equal(formatTypists(people.slice(0, 3), { locale: "en" }), "Alice, Bob and Carol are typing…");
  assert.equal(formatTypists(people.slice(0, 3), { locale: "en-US" }), "Alice, Bob, and Carol are typing…", "CLDR en-US: serial comma");
  assert.equal(formatTypists(people.slice(0, 3), { locale: "en-GB" }), "Alice, Bob and Carol are typing…");
  assert.equal(formatTypists([], { total: 1400 }), "1,400 people are typing…");
  const en = { ...MESSAGES.en, count: { other: "{count} typing…" } };
  assert.equal(formatTypists([], { messages: en, total: 3 }), "3 typing…", "a built-in table adapted");
  assert.equal(formatTypists(["{count}", "Bob"]), "{count} and Bob are typing…", "a name is never a placeholder");
});

test("invalid locale or messages: an error naming the field", () => {
  assert.throws(() => formatTypists(["a"], { locale: 42 }), { name: "TypeError", message: /locale must be a BCP 47/ });
  assert.throws(() => formatTypists(["a"], { locale: "not a tag" }), { name: "RangeError", message: /locale "not a tag" is not a BCP 47/ });
  assert.throws(() => formatTypists(["a"], { locale: "" }), { name: "RangeError", message: /locale "" / });
  const bad = (messages, re) => assert.throws(() => formatTypists([], { locale: "de", messages }), { name: "TypeError", message: re });
  bad("Hallo", /messages must be an object/);
  bad({ ...de, typnig: de.typing }, /messages\.typnig is not a messages field/);
  bad({ others: de.others, count: de.count }, /messages\.typing must be an object/);
  bad({ ...de, count: { one: "{count} Person tippt…" } }, /messages\.count\.other is required/);
  bad({ ...de, typing: { ...de.typing, plural: "x" } }, /messages\.typing\.plural is not a plural category/);
  bad({ ...de, typing: { ...de.typing, one: 1 } }, /messages\.typing\.one must be a non-empty string, got 1/);
  bad({ ...de, typing: { ...de.typing, one: "{name} tippt…" } }, /messages\.typing\.one has the unknown placeholder \{name\}/);
  bad({ ...de, count: { other: "{names} tippen" } }, /messages\.count\.other has the unknown placeholder \{names\}; it may use \{count\}/);
  validateMessages(de);
  for (const l of LOCALES) validateMessages(MESSAGES[l]);
  assert.ok(Object.isFrozen(MESSAGES.en.typing), "built-in tables are frozen");
});
