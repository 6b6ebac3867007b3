// The clock the SDK reads: wall time and timers. Calls go through globalThis
// at call time, so fake timers installed after import (node:test's
// mock.timers, Sinon, Vitest) take effect; tests may also pass their own.

/**
 * @typedef {object} Clock
 * @property {() => number} now milliseconds, like Date.now()
 * @property {(fn: () => void, ms: number) => unknown} setTimeout
 * @property {(id: unknown) => void} clearTimeout
 */

/** @type {Clock} */
export const systemClock = Object.freeze({
  now: () => Date.now(),
  setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
  clearTimeout: (id) => globalThis.clearTimeout(/** @type {any} */ (id)),
});
