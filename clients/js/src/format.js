// "Who is typing" as one line of text, in English or Vietnamese.

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

// Each locale turns the names into a line. `names` is never empty; `max` is
// at least 1. `count` is how many type in all when the names are only some
// of them (a snapshot cut by the gateway): "N people are typing…".
const counts = {
  en: (n) => (n === 1 ? "1 person is typing…" : `${n} people are typing…`),
  vi: (n) => `${n} người đang gõ...`,
};

const locales = {
  // English: "Alice is typing…", "Alice and Bob are typing…",
  // "Alice, Bob and Carol are typing…", "Alice, Bob and 2 others are typing…".
  en(names, max) {
    const n = names.length;
    if (n === 1) return `${names[0]} is typing…`;
    if (n <= max) return `${names.slice(0, -1).join(", ")} and ${names[n - 1]} are typing…`;
    const shown = names.slice(0, max - 1);
    const others = n - shown.length;
    if (shown.length === 0) return `${n} people are typing…`;
    return `${shown.join(", ")} and ${others} ${others === 1 ? "other" : "others"} are typing…`;
  },
  // Vietnamese, as in the seed: "Alice đang gõ...", "Alice và Bob đang gõ...",
  // "Alice, Bob và Carol đang gõ...", then a count: "5 người đang gõ...".
  vi(names, max) {
    const n = names.length;
    if (n === 1) return `${names[0]} đang gõ...`;
    if (n <= max) return `${names.slice(0, -1).join(", ")} và ${names[n - 1]} đang gõ...`;
    return `${n} người đang gõ...`;
  },
};

/** Locales formatTypists knows: "en" (the default) and "vi". */
export const LOCALES = Object.freeze(Object.keys(locales));

/**
 * Picks a supported locale for a BCP 47 tag: "vi", "vi-VN" → "vi"; anything
 * else → "en".
 * @param {string | undefined} tag
 * @returns {"en" | "vi"}
 */
export function resolveLocale(tag) {
  const lang = String(tag || "en").toLowerCase().split(/[-_]/)[0];
  return lang === "vi" ? "vi" : "en";
}

/**
 * Formats who is typing: at most `max` names (default 3), then a count.
 * When `total` says more people type than `users` lists (the gateway lists
 * at most ELLIPSIS_SNAPSHOT_MAX of them, default 100), the line is the
 * count: "N people are typing…" ("N người đang gõ...").
 *
 *   formatTypists([])                                   → ""
 *   formatTypists(["Alice"])                            → "Alice is typing…"
 *   formatTypists(["Alice", "Bob"])                     → "Alice and Bob are typing…"
 *   formatTypists(["Alice", "Bob", "Carol"])            → "Alice, Bob and Carol are typing…"
 *   formatTypists(["Alice", "Bob", "Carol", "Dan"])     → "Alice, Bob and 2 others are typing…"
 *   formatTypists(["Alice"], { locale: "vi" })          → "Alice đang gõ..."
 *   formatTypists([a, b, c, d, e], { locale: "vi" })    → "5 người đang gõ..."
 *   formatTypists(["Alice", "Bob"], { total: 140 })     → "140 people are typing…"
 *
 * @param {Array<string | {user: string, name?: string}>} users typists, in
 *   the order to show them; objects show `name`, else `user`.
 * @param {{locale?: string, max?: number, total?: number}} [opts] locale:
 *   a BCP 47 tag ("en", "vi", "vi-VN"; others fall back to English); max:
 *   names shown before the line becomes a count (default 3; below 1 counts
 *   as 1); total: how many type in all (a room's `total`), when known.
 * @returns {string} the line, "" when nobody types.
 */
export function formatTypists(users, opts = {}) {
  const names = (users || []).map(displayName);
  const locale = resolveLocale(opts.locale);
  const total = Number.isFinite(opts.total) ? Math.floor(opts.total) : 0;
  if (total > names.length) return counts[locale](total);
  if (names.length === 0) return "";
  const max = Number.isFinite(opts.max) ? Math.max(1, Math.floor(opts.max)) : DEFAULT_MAX_NAMES;
  return locales[locale](names, max);
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
