// A tiny event emitter: on() returns an unsubscribe function; a listener
// that throws does not stop the others (the error is reported on the console).

export class Emitter {
  constructor() {
    /** @type {Map<string, Set<Function>>} */
    this._listeners = new Map();
  }

  /**
   * Calls fn on every `event` until the returned function is called.
   * @param {string} event
   * @param {Function} fn
   * @returns {() => void}
   */
  on(event, fn) {
    let set = this._listeners.get(event);
    if (!set) this._listeners.set(event, (set = new Set()));
    set.add(fn);
    return () => this.off(event, fn);
  }

  /**
   * Calls fn on the next `event` only.
   * @param {string} event
   * @param {Function} fn
   * @returns {() => void}
   */
  once(event, fn) {
    const off = this.on(event, (...args) => {
      off();
      fn(...args);
    });
    return off;
  }

  /**
   * Removes a listener added with on().
   * @param {string} event
   * @param {Function} fn
   */
  off(event, fn) {
    const set = this._listeners.get(event);
    if (set) set.delete(fn);
  }

  /**
   * @param {string} event
   * @param {...unknown} args
   */
  emit(event, ...args) {
    const set = this._listeners.get(event);
    if (!set) return;
    for (const fn of [...set]) {
      try {
        fn(...args);
      } catch (err) {
        console.error(`ellipsis: "${event}" listener threw`, err);
      }
    }
  }
}
