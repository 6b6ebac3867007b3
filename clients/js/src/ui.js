// The typing line in the page: anti-flicker (a name stays shown at least
// minShowMs), animated dots (CSS), and an aria-live="polite" region so
// screen readers announce it without interrupting.

import { systemClock } from "./clock.js";
import { formatTypists, splitEllipsis, lineFormat } from "./format.js";

/** A name stays on screen at least this long once shown: 500 ms. */
export const DEFAULT_MIN_SHOW_MS = 500;

/** The CSS of the typing line; injected once per document by TypingIndicator. */
export const TYPING_CSS = `
.ellipsis-typing { min-height: 1.4em; }
.ellipsis-dots { display: inline-block; white-space: nowrap; }
.ellipsis-dots > span { display: inline-block; animation: ellipsis-blink 1.4s infinite both; }
.ellipsis-dots > span:nth-child(2) { animation-delay: .2s; }
.ellipsis-dots > span:nth-child(3) { animation-delay: .4s; }
@keyframes ellipsis-blink { 0%, 80%, 100% { opacity: .2; } 40% { opacity: 1; } }
@media (prefers-reduced-motion: reduce) { .ellipsis-dots > span { animation: none; } }
`;

/**
 * Keeps a typist shown at least minShowMs after it appeared, so a quick
 * start/stop does not flash a name. Feed it the store's list on every change
 * (update); it calls onChange with the list to show. An entry is a
 * (thread, user) pair: a typist may carry `thread` (the same user in the
 * room itself and in a thread is two entries), and a new name or activity
 * is a change.
 */
export class AntiFlicker {
  /**
   * @param {object} [opts]
   * @param {number} [opts.minShowMs] default 500
   * @param {(shown: import("./store.js").Typist[]) => void} [opts.onChange]
   * @param {import("./clock.js").Clock} [opts.clock]
   */
  constructor(opts = {}) {
    this.minShowMs = opts.minShowMs ?? DEFAULT_MIN_SHOW_MS;
    this.onChange = opts.onChange || null;
    this._clock = opts.clock || systemClock;
    /** @type {Map<string, {t: import("./store.js").Typist, shownAt: number, hide: unknown}>} */
    this._shown = new Map();
  }

  /** @returns {import("./store.js").Typist[]} what is shown now */
  get shown() {
    return [...this._shown.values()].map((s) => s.t);
  }

  /** @param {(import("./store.js").Typist & {thread?: string})[]} typists the current typists */
  update(typists) {
    const now = this._clock.now();
    const present = new Set();
    let changed = false;
    for (const t of typists) {
      const key = entryKey(t);
      present.add(key);
      const s = this._shown.get(key);
      if (!s) {
        this._shown.set(key, { t, shownAt: now, hide: null });
        changed = true;
      } else {
        if (s.hide !== null) {
          this._clock.clearTimeout(s.hide); // back before it was hidden
          s.hide = null;
        }
        if ((t.name || "") !== (s.t.name || "") || (t.activity || "") !== (s.t.activity || "")) changed = true;
        s.t = t;
      }
    }
    for (const [key, s] of this._shown) {
      if (present.has(key) || s.hide !== null) continue;
      const wait = s.shownAt + this.minShowMs - now;
      if (wait <= 0) {
        this._shown.delete(key);
        changed = true;
      } else {
        s.hide = this._clock.setTimeout(() => {
          if (this._shown.get(key) !== s) return;
          this._shown.delete(key);
          this._emit();
        }, wait);
      }
    }
    if (changed) this._emit();
  }

  /** Cancels pending hides. */
  dispose() {
    for (const s of this._shown.values()) this._clock.clearTimeout(s.hide);
  }

  _emit() {
    if (this.onChange) this.onChange(this.shown);
  }
}

// An AntiFlicker entry: the user in its scope ("" the room itself).
const entryKey = (t) => `${t.thread || ""}\u0000${t.user}`;

const injected = new WeakSet();

/** Adds TYPING_CSS to the document once. */
function injectStyles(doc) {
  if (!doc || injected.has(doc) || !doc.head) return;
  injected.add(doc);
  const style = doc.createElement("style");
  style.dataset.ellipsis = "typing";
  style.textContent = TYPING_CSS;
  doc.head.append(style);
}

/**
 * Renders "Alice is typing…" into an element: formatted text plus three
 * animated dots, with anti-flicker. The element becomes an
 * aria-live="polite" status region; its data-text attribute holds the exact
 * line ("" when nobody types).
 *
 *   const line = new TypingIndicator(document.getElementById("typing"), { locale: "vi" });
 *   room.on("change", (typists, total) => line.update(typists, total));
 *
 * With `total` above the typists listed (the gateway cut its snapshot),
 * the line is the count: "N people are typing…". A channel view passes
 * the room's threads as well, for "Alice is typing in a thread…":
 *
 *   const show = () => line.update(room.typists, room.total, room.threads);
 *   room.on("change", show);
 *   room.on("threads", show);
 *
 * and a thread view that thread's typists only:
 *
 *   const t = room.thread(id);
 *   t.on("change", (typists, total) => threadLine.update(typists, total));
 */
export class TypingIndicator {
  /**
   * @param {HTMLElement} element
   * @param {object} [opts]
   * @param {string} [opts.locale] a BCP 47 tag, default "en" (see formatTypists)
   * @param {object} [opts.messages] the messages table for it (TypingMessages)
   * @param {number} [opts.max] names before a count, default 3
   * @param {number} [opts.minShowMs] default 500
   * @param {boolean} [opts.injectStyles] add TYPING_CSS to the document, default true
   * @param {import("./clock.js").Clock} [opts.clock]
   * @throws {TypeError | RangeError} an invalid locale or messages, naming the field
   */
  constructor(element, opts = {}) {
    lineFormat(opts.locale, opts.messages); // throws on a bad locale or table
    this.element = element;
    this._locale = opts.locale ?? "en";
    this._messages = opts.messages;
    this.max = opts.max;
    this._line = null;
    this._unlisted = 0; // typing but not listed (total - typists.length)
    /** @type {Map<string, number>} per thread of a channel view: its total (its typists shown or not) */
    this._threadTotals = new Map();
    this._flicker = new AntiFlicker({ minShowMs: opts.minShowMs, clock: opts.clock, onChange: () => this.render() });
    element.classList.add("ellipsis-typing");
    element.setAttribute("role", "status");
    element.setAttribute("aria-live", "polite");
    element.setAttribute("aria-atomic", "true");
    if (opts.injectStyles !== false) injectStyles(element.ownerDocument);
    this.render();
  }

  /** The BCP 47 tag of the line; set it, then render(). Throws on an invalid tag. */
  get locale() {
    return this._locale;
  }

  set locale(tag) {
    lineFormat(tag, undefined);
    this._locale = tag;
  }

  /** The messages table (undefined: built in); set it, then render(). Throws on an invalid table. */
  get messages() {
    return this._messages;
  }

  set messages(table) {
    if (table !== undefined) lineFormat(this._locale, table);
    this._messages = table;
  }

  /** The line shown now ("" when nobody types). */
  get text() {
    return this._line || "";
  }

  /**
   * @param {import("./store.js").Typist[]} typists the scope's typists (the
   *   room's, or a thread's in a thread view)
   * @param {number} [total] how many type there in all (its `total`);
   *   omitted: the typists are everyone
   * @param {{thread: string, typists: import("./store.js").Typist[], total?: number}[]} [threads]
   *   a channel view: the room's threads (room.threads), told as "Alice is
   *   typing in a thread…"; omitted: none
   */
  update(typists, total, threads) {
    const unlisted = Number.isFinite(total) ? Math.max(0, Math.floor(total) - typists.length) : 0;
    const totals = new Map();
    const entries = [...typists];
    for (const t of threads || []) {
      if (!t || typeof t.thread !== "string") continue;
      const list = Array.isArray(t.typists) ? t.typists : [];
      totals.set(t.thread, Number.isFinite(t.total) ? Math.max(list.length, Math.floor(t.total)) : list.length);
      for (const u of list) entries.push({ ...u, thread: t.thread });
    }
    let recount = unlisted !== this._unlisted || totals.size !== this._threadTotals.size;
    for (const [id, n] of totals) if (this._threadTotals.get(id) !== n) recount = true;
    this._unlisted = unlisted;
    this._threadTotals = totals;
    this._flicker.update(entries);
    if (recount) this.render();
  }

  /** Re-renders (after changing locale, messages or max). */
  render() {
    const room = [];
    const byThread = new Map();
    for (const t of this._flicker.shown) {
      if (!t.thread) {
        room.push(t);
        continue;
      }
      const { thread, ...typist } = t;
      if (!byThread.has(thread)) byThread.set(thread, []);
      byThread.get(thread).push(typist);
    }
    const total = this._unlisted > 0 ? room.length + this._unlisted : undefined;
    // A thread's typists still shown (anti-flicker) count even once its
    // total fell; one with more typing than shown counts its total.
    const threads = [];
    for (const [thread, typists] of byThread) threads.push({ thread, typists, total: Math.max(typists.length, this._threadTotals.get(thread) ?? 0) });
    for (const [thread, n] of this._threadTotals) if (n > 0 && !byThread.has(thread)) threads.push({ thread, typists: [], total: n });
    const line = formatTypists(room, { locale: this._locale, messages: this._messages, max: this.max, total, threads });
    if (line === this._line) return;
    this._line = line;
    const el = this.element;
    const doc = el.ownerDocument;
    el.dataset.text = line;
    if (!line) {
      el.replaceChildren();
      return;
    }
    const { text, dots } = splitEllipsis(line);
    const words = doc.createElement("span");
    words.className = "ellipsis-text";
    words.textContent = text;
    const anim = doc.createElement("span");
    anim.className = "ellipsis-dots";
    anim.setAttribute("aria-hidden", "true");
    for (let i = 0; i < 3; i++) {
      const dot = doc.createElement("span");
      dot.textContent = ".";
      anim.append(dot);
    }
    el.replaceChildren(words, dots ? anim : "");
  }

  /** Stops timers and clears the element. */
  destroy() {
    this._flicker.dispose();
    this._line = "";
    this.element.dataset.text = "";
    this.element.replaceChildren();
  }
}
