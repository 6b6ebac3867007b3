// Real human keystroke timings (neuroQWERTY MIT-CSXPD healthy controls; see
// tools/keystrokes/data/README.md): reading the CSV, and which keys a
// browser's input event would see. Mirrors tools/keystrokes (IsText, IsSend).

import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
/** The repository root (clients/js/test/replay → ../../../..). */
export const repoRoot = resolve(here, "..", "..", "..", "..");

/**
 * Where the keystroke CSV is: $ELLIPSIS_KEYSTROKES_CSV, else the full file
 * committed in tools/keystrokes/data/, else the committed sample
 * (tools/keystrokes/data/sample.csv). Throws naming every place looked at
 * when none exists.
 * @returns {{path: string, full: boolean}}
 */
export function locateCSV() {
  const env = process.env.ELLIPSIS_KEYSTROKES_CSV;
  if (env) {
    if (!existsSync(env)) throw new Error(`ELLIPSIS_KEYSTROKES_CSV=${env}: no such file`);
    return { path: env, full: !env.endsWith("sample.csv") };
  }
  const full = join(repoRoot, "tools", "keystrokes", "data", "neuroqwerty_controls_keystrokes.csv");
  if (existsSync(full)) return { path: full, full: true };
  const sample = join(repoRoot, "tools", "keystrokes", "data", "sample.csv");
  if (existsSync(sample)) return { path: sample, full: false };
  throw new Error(
    `keystroke data not found: looked for ${full} (the full neuroQWERTY cut), ` +
      `${sample} (the committed sample), and $ELLIPSIS_KEYSTROKES_CSV`,
  );
}

const COLUMNS = ["session", "subject", "visit", "seq", "key", "press_ms", "release_ms", "press_imputed"];

/**
 * Parses the CSV into sessions, keys in press order.
 * @param {string} text
 * @returns {{id: number, keys: {key: string, press: number}[]}[]}
 */
export function parseCSV(text) {
  const lines = text.split(/\r?\n/).filter((l) => l !== "");
  const header = lines[0].split(",");
  const col = Object.fromEntries(COLUMNS.map((c) => [c, header.indexOf(c)]));
  for (const c of COLUMNS) if (col[c] < 0) throw new Error(`keystroke CSV: no column ${c} in header ${lines[0]}`);
  const sessions = new Map();
  for (let i = 1; i < lines.length; i++) {
    const f = lines[i].split(",");
    if (f.length !== header.length) throw new Error(`keystroke CSV line ${i + 1}: ${f.length} fields, want ${header.length}`);
    const id = Number(f[col.session]);
    const press = Number(f[col.press_ms]);
    if (!Number.isInteger(id) || !Number.isFinite(press)) throw new Error(`keystroke CSV line ${i + 1}: bad session or press_ms`);
    if (!sessions.has(id)) sessions.set(id, { id, keys: [] });
    sessions.get(id).keys.push({ key: f[col.key], press });
  }
  const out = [...sessions.values()];
  for (const s of out) s.keys.sort((a, b) => a.press - b.press);
  return out;
}

/** Loads and parses the located CSV. */
export function loadSessions() {
  const where = locateCSV();
  return { ...where, sessions: parseCSV(readFileSync(where.path, "utf8")) };
}

/** Return or keypad Enter: the message is sent. */
export function isSend(key) {
  return key === "Return" || key === "P_Enter" || key === "KP_Enter";
}

const NON_TEXT = new Set([
  "Shift_L", "Shift_R", "Control_L", "Control_R", "Alt_L", "Alt_R", "Super_L", "Super_R",
  "Meta_L", "Meta_R", "ISO_Level3_Shift", "Mode_switch", "Caps_Lock", "Num_Lock", "Scroll_Lock",
  "Menu", "Escape", "Insert", "Tab", "Print", "Pause", "Left", "Right", "Up", "Down",
  "Home", "End", "Prior", "Next", "Page_Up", "Page_Down",
]);
const KEYPAD_TEXT = new Set(["Add", "Subtract", "Multiply", "Divide", "Decimal", "Separator", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]);

/**
 * Whether a key press changes an input field's text (so the page would see
 * an input event and call keystroke()): characters, space, punctuation,
 * BackSpace, Delete. Not: modifiers, navigation, dead/unnamed keys
 * ("[65105]"), function keys, send keys.
 */
export function isText(key) {
  if (!key || NON_TEXT.has(key) || isSend(key) || key.startsWith("[")) return false;
  if (key.startsWith("P_") || key.startsWith("KP_")) return KEYPAD_TEXT.has(key.replace(/^K?P_/, ""));
  if (/^F\d/.test(key)) return false;
  return true;
}
