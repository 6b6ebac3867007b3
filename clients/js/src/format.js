// "Who is typing" as one line of text, in any language: lists joined with
// Intl.ListFormat (type "conjunction"), counts chosen with Intl.PluralRules
// and written with Intl.NumberFormat. English and Vietnamese are built in;
// any other language is a `messages` table (see TypingMessages in
// ellipsis.d.ts and the README's "Languages").
//
// A line is made of clauses, one per activity of the scope shown ("Alice
// is typing", "Assistant is thinking") and, in a channel view, one for the
// room's threads ("Bob is typing in a thread"), joined as a list and ended
// with the ellipsis of the last: "Alice is typing and Assistant is
// thinking…".

/** Default number of names shown before the line turns into a count. */
export const DEFAULT_MAX_NAMES = 3;

/**
 * The display name of a typist: its name when it has one, else its user id.
 * @param {string | {user: string, name?: string}} t
 * @returns {string}
 */
export function displayName(t) {
  if (typeof t === "string") return t;
  return (t && (t.name || t.user)) || "";
}

/** Plural categories of Intl.PluralRules (Unicode CLDR). */
const CATEGORIES = ["zero", "one", "two", "few", "many", "other"];
/** Fields of a messages table and the placeholders each may use (`activities` holds more of `busy`'s kind). */
const FIELDS = {
  typing: ["names", "count"],
  others: ["count"],
  count: ["count"],
  people: ["count"],
  busy: ["names", "count"],
  thread: ["line", "count"],
  threads: ["line", "count"],
};
/** The fields a table must have; the others are optional. */
const REQUIRED = new Set(["typing", "count"]);
/** An activity name: `[a-z_]{1,32}` (docs/protocol.md, "Threads and activities"). */
const ACTIVITY_NAME = /^[a-z_]{1,32}$/;

const deepFreeze = (m) => {
  for (const v of Object.values(m)) if (v && typeof v === "object") deepFreeze(v);
  return Object.freeze(m);
};

/**
 * The built-in tables. typing: the line with names ({names}: the list,
 * {count}: how many it names); others: the list item for the typists beyond
 * `max` ({count} of them; without it the line becomes `count`); count: the
 * line with only a number ({count}). activities: the line of each activity
 * but typing, as `typing` is ("{names} is thinking…"); busy: the line of an
 * activity without one (an operator's, ELLIPSIS_ACTIVITIES); people: the
 * subject of a count line of an activity ("{count} people": "3 people are
 * thinking…"); thread, threads: a clause about the room's threads, in a
 * channel view ({line}: the clause without its ellipsis, "Alice is typing";
 * {count}: how many people it is about), in one thread or in several.
 */
export const MESSAGES = Object.freeze({
  en: deepFreeze({
    typing: { one: "{names} is typing…", other: "{names} are typing…" },
    others: { one: "{count} other", other: "{count} others" },
    count: { one: "{count} person is typing…", other: "{count} people are typing…" },
    people: { one: "{count} person", other: "{count} people" },
    activities: {
      thinking: { one: "{names} is thinking…", other: "{names} are thinking…" },
      recording_audio: { one: "{names} is recording a voice message…", other: "{names} are recording voice messages…" },
      recording_video: { one: "{names} is recording a video…", other: "{names} are recording videos…" },
      uploading: { one: "{names} is uploading…", other: "{names} are uploading…" },
    },
    busy: { one: "{names} is busy…", other: "{names} are busy…" },
    thread: { other: "{line} in a thread…" },
    threads: { other: "{line} in threads…" },
  }),
  vi: deepFreeze({
    typing: { other: "{names} đang gõ..." },
    count: { other: "{count} người đang gõ..." },
    people: { other: "{count} người" },
    activities: {
      thinking: { other: "{names} đang suy nghĩ..." },
      recording_audio: { other: "{names} đang ghi âm tin nhắn thoại..." },
      recording_video: { other: "{names} đang quay video..." },
      uploading: { other: "{names} đang tải lên..." },
    },
    busy: { other: "{names} đang bận..." },
    thread: { other: "{line} trong một chuỗi tin nhắn..." },
    threads: { other: "{line} trong các chuỗi tin nhắn..." },
  }),
});

/** Locales formatTypists knows without a messages table: "en" (the default) and "vi". */
export const LOCALES = Object.freeze(Object.keys(MESSAGES));

const show = (v) => (typeof v === "string" ? JSON.stringify(v) : String(v));

/**
 * Checks a messages table; throws a TypeError naming the field at fault.
 * @param {unknown} m
 */
export function validateMessages(m) {
  if (m === null || typeof m !== "object" || Array.isArray(m)) {
    throw new TypeError(`ellipsis: messages must be an object { typing, count, others?, people?, activities?, busy?, thread?, threads? } of plural strings, got ${show(m)}`);
  }
  const names = [...Object.keys(FIELDS), "activities"];
  for (const key of Object.keys(m)) {
    if (!names.includes(key)) throw new TypeError(`ellipsis: messages.${key} is not a messages field (${names.join(", ")})`);
  }
  for (const [field, placeholders] of Object.entries(FIELDS)) {
    if (m[field] === undefined && !REQUIRED.has(field)) continue;
    checkForms(m[field], `messages.${field}`, placeholders);
  }
  const acts = m.activities;
  if (acts === undefined) return;
  if (acts === null || typeof acts !== "object" || Array.isArray(acts)) {
    throw new TypeError(`ellipsis: messages.activities must be an object of an activity name → plural strings, got ${show(acts)}`);
  }
  for (const [name, forms] of Object.entries(acts)) {
    if (!ACTIVITY_NAME.test(name)) throw new TypeError(`ellipsis: messages.activities.${name} is not an activity name (1..32 characters of a-z and _)`);
    checkForms(forms, `messages.activities.${name}`, FIELDS.busy);
  }
}

// One PluralMessage of a table, at `path`; throws a TypeError naming it.
function checkForms(forms, path, placeholders) {
  if (forms === null || typeof forms !== "object" || Array.isArray(forms)) {
    throw new TypeError(`ellipsis: ${path} must be an object of plural strings (${CATEGORIES.join(", ")}), got ${show(forms)}`);
  }
  if (forms.other === undefined) throw new TypeError(`ellipsis: ${path}.other is required (the form for any count without its own)`);
  for (const [cat, text] of Object.entries(forms)) {
    const where = `${path}.${cat}`;
    if (!CATEGORIES.includes(cat)) throw new TypeError(`ellipsis: ${where} is not a plural category of Intl.PluralRules (${CATEGORIES.join(", ")})`);
    if (typeof text !== "string" || text === "") throw new TypeError(`ellipsis: ${where} must be a non-empty string, got ${show(text)}`);
    for (const [, name] of text.matchAll(/\{(\w*)\}/g)) {
      if (!placeholders.includes(name)) {
        throw new TypeError(`ellipsis: ${where} has the unknown placeholder {${name}}; it may use ${placeholders.map((p) => `{${p}}`).join(" and ")}`);
      }
    }
  }
}

/**
 * Checks a BCP 47 tag and returns it canonical ("de-at" → "de-AT"); "_" is
 * taken as "-" ("vi_VN"). Throws a TypeError or RangeError naming `locale`.
 * @param {unknown} tag
 * @returns {string}
 */
function canonicalLocale(tag) {
  if (typeof tag !== "string") {
    throw new TypeError(`ellipsis: locale must be a BCP 47 language tag string such as "de" or "pt-BR", got ${show(tag)}`);
  }
  try {
    return Intl.getCanonicalLocales(tag.replace(/_/g, "-"))[0];
  } catch {
    throw new RangeError(`ellipsis: locale ${show(tag)} is not a BCP 47 language tag (such as "de", "de-AT", "pt-BR")`);
  }
}

/**
 * Picks a built-in locale for a BCP 47 tag: the tag's language when built
 * in ("vi", "vi-VN" → "vi"), else English. Lenient: a missing or unreadable
 * tag is English.
 * @param {string | undefined} tag
 * @returns {"en" | "vi"}
 */
export function resolveLocale(tag) {
  const lang = String(tag || "en").toLowerCase().split(/[-_]/)[0];
  return lang === "vi" ? "vi" : "en";
}

// Intl objects per locale (costly to build), at most INTL_CACHE_MAX locales;
// the oldest is dropped beyond that.
const INTL_CACHE_MAX = 32;
const intlCache = new Map();

function intlFor(locale) {
  let intl = intlCache.get(locale);
  if (intl) return intl;
  if (typeof Intl.ListFormat !== "function" || typeof Intl.PluralRules !== "function") {
    throw new Error("ellipsis: this engine lacks Intl.ListFormat or Intl.PluralRules (Chrome 72, Firefox 78, Safari 14.1, Node 14 have both)");
  }
  intl = {
    list: new Intl.ListFormat(locale, { type: "conjunction" }),
    plural: new Intl.PluralRules(locale),
    number: new Intl.NumberFormat(locale),
  };
  if (intlCache.size >= INTL_CACHE_MAX) intlCache.delete(intlCache.keys().next().value);
  intlCache.set(locale, intl);
  return intl;
}

// Keeps validated locale tags, so a render does not re-parse its tag.
const tagCache = new Map();

/**
 * The table and Intl objects for a locale and an optional messages table.
 * Without messages, a locale not built in falls back to its base language
 * ("vi-VN" → vi), then English. English without a region ("en", the
 * default) lists as CLDR's International English (en-001: "Alice, Bob and
 * Carol"); a region gives its own form ("en-US": "Alice, Bob, and Carol").
 * @param {string | undefined} locale
 * @param {object | undefined} messages
 */
export function lineFormat(locale, messages) {
  let tag = "en";
  if (locale !== undefined) {
    tag = tagCache.get(locale);
    if (tag === undefined) {
      tag = canonicalLocale(locale);
      if (tagCache.size >= INTL_CACHE_MAX) tagCache.delete(tagCache.keys().next().value);
      tagCache.set(locale, tag);
    }
  }
  let table;
  let intlLocale = tag;
  if (messages !== undefined) {
    validateMessages(messages);
    table = messages;
  } else {
    const lang = tag.split("-")[0].toLowerCase();
    const builtin = Object.hasOwn(MESSAGES, lang) ? lang : "en";
    table = MESSAGES[builtin];
    if (builtin !== lang) intlLocale = "en-001";
  }
  if (intlLocale === "en") intlLocale = "en-001";
  return { table, intl: intlFor(intlLocale) };
}

// One form of a plural message, its placeholders filled in one pass (a
// name that reads "{count}" stays as it is). {count} is n, written with
// Intl.NumberFormat; names and line are given.
function fillForms(intl, forms, n, vars = {}) {
  const text = forms[intl.plural.select(n)] ?? forms.other;
  return text.replace(/\{(names|count|line)\}/g, (_, p) => (p === "count" ? intl.number.format(n) : vars[p] ?? ""));
}

function fill({ table, intl }, field, n, names) {
  return fillForms(intl, table[field], n, { names });
}

// The line of an activity ("" = typing) with names: its own message, else
// `busy`, else (a table without either) `typing`.
function activityForms(table, activity) {
  if (!activity) return table.typing;
  return (table.activities && Object.hasOwn(table.activities, activity) && table.activities[activity]) || table.busy || table.typing;
}

// "N people are <activity>…": typing's `count`; another activity's line
// with `people` as its subject, or (a table without `people`) `count`.
function countClause(f, activity, n) {
  if (!activity || !f.table.people) return fill(f, "count", n);
  return fillForms(f.intl, activityForms(f.table, activity), n, { names: fillForms(f.intl, f.table.people, n) });
}

// The clauses of one scope's typists (each `{name, activity}`): one per
// activity, in the order each first appears. `total` above the typists
// (a cut snapshot) is one count line. One activity keeps the rules of a
// typing line (at most `max` names, then "and N others", else the count);
// several give each activity its names while `max` names last, then its
// count ("4 people are typing and Assistant is thinking…").
function scopeClauses(f, typists, total, max) {
  const n = typists.length;
  if (total > n) return [countClause(f, "", total)];
  if (n === 0) return [];
  const groups = new Map();
  for (const t of typists) {
    let g = groups.get(t.activity);
    if (!g) groups.set(t.activity, (g = []));
    g.push(t.name);
  }
  if (groups.size === 1) {
    const [[activity, names]] = groups;
    const forms = activityForms(f.table, activity);
    if (n <= max) return [fillForms(f.intl, forms, n, { names: f.intl.list.format(names) })];
    if (!f.table.others || max <= 1) return [countClause(f, activity, n)];
    const shown = names.slice(0, max - 1);
    const others = fill(f, "others", n - shown.length);
    return [fillForms(f.intl, forms, n, { names: f.intl.list.format([...shown, others]) })];
  }
  let budget = max;
  const out = [];
  for (const [activity, names] of groups) {
    if (names.length <= budget) {
      budget -= names.length;
      out.push(fillForms(f.intl, activityForms(f.table, activity), names.length, { names: f.intl.list.format(names) }));
    } else {
      out.push(countClause(f, activity, names.length));
    }
  }
  return out;
}

// Clauses joined as a list ("A and B"), each without its ellipsis; the
// line ends with the last clause's.
function joinClauses(f, clauses) {
  if (clauses.length <= 1) return clauses[0] || "";
  const parts = clauses.map(splitEllipsis);
  const dots = parts.at(-1).dots || parts.find((p) => p.dots)?.dots || "";
  return f.intl.list.format(parts.map((p) => p.text)) + dots;
}

// A typist as shown: its display name, and its activity ("" = typing).
const shownTypist = (t) => ({
  user: typeof t === "string" ? "" : (t && t.user) || "",
  name: displayName(t),
  activity: t && typeof t === "object" && typeof t.activity === "string" && t.activity !== "typing" ? t.activity : "",
});

// The channel view's clause about the room's threads: "Alice is typing in
// a thread…" (names, one thread, or one person) or "2 people are typing in
// threads…" (counts, several threads), as the table's `thread` / `threads`
// wrap the clauses of those typists. A user listed in the room itself is
// not told again; one typing in two threads counts once. A table without
// `thread` has no such clause.
function threadClause(f, threads, roomUsers, max) {
  if (!f.table.thread || !Array.isArray(threads)) return "";
  const seen = new Set(roomUsers);
  const typists = [];
  let unlisted = 0;
  let scopes = 0;
  for (const t of threads) {
    if (!t) continue;
    const list = Array.isArray(t.typists) ? t.typists : [];
    const total = Number.isFinite(t.total) ? Math.max(list.length, Math.floor(t.total)) : list.length;
    if (total === 0) continue;
    scopes++;
    unlisted += total - list.length;
    for (const u of list) {
      const s = shownTypist(u);
      const key = s.user || s.name;
      if (seen.has(key)) continue;
      seen.add(key);
      typists.push(s);
    }
  }
  const people = typists.length + unlisted;
  if (people === 0) return "";
  const several = scopes > 1 && people > 1;
  const inner = joinClauses(f, scopeClauses(f, typists, people, several ? 0 : max));
  const wrap = several ? f.table.threads || f.table.thread : f.table.thread;
  return fillForms(f.intl, wrap, people, { line: splitEllipsis(inner).text });
}

/**
 * Formats who is typing: at most `max` names (default 3), then "and N
 * others" (or, for a table without `others`, the count). When `total` says
 * more people type than `users` lists (the gateway lists at most
 * ELLIPSIS_SNAPSHOT_MAX of them, default 100), the line is the count:
 * "N people are typing…" ("N người đang gõ..."). Typists with an
 * `activity` other than typing get its line ("Assistant is thinking…",
 * "Bob is recording a voice message…"; an activity the table has no line
 * for: `busy`, "Carol is busy…"), several activities one clause each
 * ("Alice is typing and Assistant is thinking…").
 *
 * A channel view passes the room's `threads` (room.threads) too: their
 * typists add one clause, "Alice is typing in a thread…", or "2 people
 * are typing in threads…" when they type in several. A thread view passes
 * that thread's typists only (room.thread(id).typists), no `threads`.
 *
 *   formatTypists([])                                   → ""
 *   formatTypists(["Alice"])                            → "Alice is typing…"
 *   formatTypists(["Alice", "Bob"])                     → "Alice and Bob are typing…"
 *   formatTypists(["Alice", "Bob", "Carol"])            → "Alice, Bob and Carol are typing…"
 *   formatTypists(["Alice", "Bob", "Carol", "Dan"])     → "Alice, Bob and 2 others are typing…"
 *   formatTypists(["Alice"], { locale: "vi" })          → "Alice đang gõ..."
 *   formatTypists([a, b, c, d, e], { locale: "vi" })    → "5 người đang gõ..."
 *   formatTypists(["Alice", "Bob"], { total: 140 })     → "140 people are typing…"
 *   formatTypists(["Alice"], { locale: "de", messages: de }) → "Alice tippt…"
 *   formatTypists([{ user: "bot", name: "Assistant", activity: "thinking" }]) → "Assistant is thinking…"
 *   formatTypists([], { threads: [{ thread: "t", typists: [{ user: "alice", name: "Alice" }], total: 1 }] })
 *                                                       → "Alice is typing in a thread…"
 *
 * @param {Array<string | {user: string, name?: string, activity?: string}>} users
 *   typists of the scope shown, in the order to show them; objects show
 *   `name`, else `user`.
 * @param {{locale?: string, messages?: object, max?: number, total?: number, threads?: {thread: string, typists: Array<{user: string, name?: string, activity?: string}>, total?: number}[]}} [opts]
 *   locale: a BCP 47 tag (default "en"); messages: the table for it (see
 *   TypingMessages; without it, a built-in table: the tag's language, else
 *   English); max: names shown before the rest become "N others" (default
 *   3; below 1 counts as 1); total: how many type in the scope in all (a
 *   room's `total`), when known; threads: the room's threads, for a
 *   channel view.
 * @returns {string} the line, "" when nobody types.
 * @throws {TypeError | RangeError} an invalid locale or messages table,
 *   naming the field.
 */
export function formatTypists(users, opts = {}) {
  const f = lineFormat(opts.locale, opts.messages);
  const typists = (users || []).map(shownTypist);
  const total = Number.isFinite(opts.total) ? Math.floor(opts.total) : 0;
  const max = Number.isFinite(opts.max) ? Math.max(1, Math.floor(opts.max)) : DEFAULT_MAX_NAMES;
  const clauses = scopeClauses(f, typists, total, max);
  const inThreads = threadClause(f, opts.threads, typists.map((t) => t.user || t.name), max);
  if (inThreads) clauses.push(inThreads);
  return joinClauses(f, clauses);
}

/**
 * Splits a formatted line into its text and its trailing ellipsis ("…" or
 * "..."), so a UI can animate the dots.
 * @param {string} line
 * @returns {{text: string, dots: string}}
 */
export function splitEllipsis(line) {
  const m = /(…|\.\.\.)$/.exec(line);
  return m ? { text: line.slice(0, -m[1].length), dots: m[1] } : { text: line, dots: "" };
}
