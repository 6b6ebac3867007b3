// "Who is typing" as one line of text, in any language: lists joined with
// Intl.ListFormat (type "conjunction"), counts chosen with Intl.PluralRules
// and written with Intl.NumberFormat. English and Vietnamese are built in;
// any other language is a `messages` table (see TypingMessages in
// ellipsis.d.ts and the README's "Languages").

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
/** Fields of a messages table and the placeholders each may use. */
const FIELDS = { typing: ["names", "count"], others: ["count"], count: ["count"] };

const deepFreeze = (m) => Object.freeze(Object.fromEntries(Object.entries(m).map(([k, v]) => [k, Object.freeze(v)])));

/**
 * The built-in tables. typing: the line with names ({names}: the list,
 * {count}: how many it names); others: the list item for the typists beyond
 * `max` ({count} of them; without it the line becomes `count`); count: the
 * line with only a number ({count}).
 */
export const MESSAGES = Object.freeze({
  en: deepFreeze({
    typing: { one: "{names} is typing…", other: "{names} are typing…" },
    others: { one: "{count} other", other: "{count} others" },
    count: { one: "{count} person is typing…", other: "{count} people are typing…" },
  }),
  vi: deepFreeze({
    typing: { other: "{names} đang gõ..." },
    count: { other: "{count} người đang gõ..." },
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
    throw new TypeError(`ellipsis: messages must be an object { typing, count, others? } of plural strings, got ${show(m)}`);
  }
  for (const key of Object.keys(m)) {
    if (!(key in FIELDS)) throw new TypeError(`ellipsis: messages.${key} is not a messages field (typing, count, others)`);
  }
  for (const [field, placeholders] of Object.entries(FIELDS)) {
    const forms = m[field];
    if (forms === undefined && field === "others") continue;
    if (forms === null || typeof forms !== "object" || Array.isArray(forms)) {
      throw new TypeError(`ellipsis: messages.${field} must be an object of plural strings (${CATEGORIES.join(", ")}), got ${show(forms)}`);
    }
    if (forms.other === undefined) throw new TypeError(`ellipsis: messages.${field}.other is required (the form for any count without its own)`);
    for (const [cat, text] of Object.entries(forms)) {
      const where = `messages.${field}.${cat}`;
      if (!CATEGORIES.includes(cat)) throw new TypeError(`ellipsis: ${where} is not a plural category of Intl.PluralRules (${CATEGORIES.join(", ")})`);
      if (typeof text !== "string" || text === "") throw new TypeError(`ellipsis: ${where} must be a non-empty string, got ${show(text)}`);
      for (const [, name] of text.matchAll(/\{(\w*)\}/g)) {
        if (!placeholders.includes(name)) {
          throw new TypeError(`ellipsis: ${where} has the unknown placeholder {${name}}; it may use ${placeholders.map((p) => `{${p}}`).join(" and ")}`);
        }
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

// One form of a plural field, its placeholders filled in one pass (a name
// that reads "{count}" stays as it is).
function fill({ table, intl }, field, n, names) {
  const forms = table[field];
  const text = forms[intl.plural.select(n)] ?? forms.other;
  return text.replace(/\{(names|count)\}/g, (_, p) => (p === "names" ? names : intl.number.format(n)));
}

/**
 * Formats who is typing: at most `max` names (default 3), then "and N
 * others" (or, for a table without `others`, the count). When `total` says
 * more people type than `users` lists (the gateway lists at most
 * ELLIPSIS_SNAPSHOT_MAX of them, default 100), the line is the count:
 * "N people are typing…" ("N người đang gõ...").
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
 *
 * @param {Array<string | {user: string, name?: string}>} users typists, in
 *   the order to show them; objects show `name`, else `user`.
 * @param {{locale?: string, messages?: object, max?: number, total?: number}} [opts]
 *   locale: a BCP 47 tag (default "en"); messages: the table for it (see
 *   TypingMessages; without it, a built-in table: the tag's language, else
 *   English); max: names shown before the rest become "N others" (default
 *   3; below 1 counts as 1); total: how many type in all (a room's
 *   `total`), when known.
 * @returns {string} the line, "" when nobody types.
 * @throws {TypeError | RangeError} an invalid locale or messages table,
 *   naming the field.
 */
export function formatTypists(users, opts = {}) {
  const f = lineFormat(opts.locale, opts.messages);
  const names = (users || []).map(displayName);
  const total = Number.isFinite(opts.total) ? Math.floor(opts.total) : 0;
  if (total > names.length) return fill(f, "count", total);
  const n = names.length;
  if (n === 0) return "";
  const max = Number.isFinite(opts.max) ? Math.max(1, Math.floor(opts.max)) : DEFAULT_MAX_NAMES;
  if (n <= max) return fill(f, "typing", n, f.intl.list.format(names));
  if (!f.table.others || max === 1) return fill(f, "count", n);
  const shown = names.slice(0, max - 1);
  const others = fill(f, "others", n - shown.length);
  return fill(f, "typing", n, f.intl.list.format([...shown, others]));
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
