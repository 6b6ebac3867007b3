import { test } from "node:test";
import assert from "node:assert/strict";
import { TypingTimer, validateTimers } from "../../src/ellipsis.js";
import { fakeTimers } from "./helpers.js";

// A timer at the seed defaults (refresh 4 s, idle stop 3 s, ttl 5 s) that
// records [ms since start, action, reason].
function setup(t, opts = {}) {
  const timers = fakeTimers(t);
  const t0 = Date.now();
  const sent = [];
  const timer = new TypingTimer({ send: (a, r) => sent.push(r ? [Date.now() - t0, a, r] : [Date.now() - t0, a]), ...opts });
  // advance to an absolute time (ms since start)
  const at = (ms) => timers.tick(ms - (Date.now() - t0));
  return { timer, sent, at };
}

test("first keystroke sends typing_start once; more keystrokes send nothing", (t) => {
  const { timer, sent, at } = setup(t);
  timer.keystroke();
  for (let ms = 100; ms <= 1500; ms += 100) {
    at(ms);
    timer.keystroke();
  }
  assert.deepEqual(sent, [[0, "start"]]);
  assert.equal(timer.typing, true);
  assert.equal(timer.stats.keystrokes, 16);
});

test("refresh every 4 s while keystrokes continue", (t) => {
  const { timer, sent, at } = setup(t);
  for (let ms = 0; ms <= 10000; ms += 500) {
    at(ms);
    timer.keystroke();
  }
  at(10000);
  assert.deepEqual(sent, [[0, "start"], [4000, "refresh"], [8000, "refresh"]]);
  at(13000); // idle stop 3 s after the last key (10 s)
  assert.deepEqual(sent.slice(3), [[12000, "refresh"], [13000, "stop", "idle"]]);
  assert.deepEqual(timer.stats, { keystrokes: 21, starts: 1, refreshes: 3, changes: 0, idleStops: 1, stops: 1 });
});

test("typing_stop after 3 s without a keystroke, measured from the last key", (t) => {
  const { timer, sent, at } = setup(t);
  timer.keystroke();
  at(1000);
  timer.keystroke();
  at(3999);
  assert.deepEqual(sent, [[0, "start"]]);
  at(4000);
  assert.deepEqual(sent, [[0, "start"], [4000, "stop", "idle"]], "no refresh when the idle stop is due at the same tick");
  assert.equal(timer.typing, false);
  at(5000);
  timer.keystroke();
  assert.deepEqual(sent.at(-1), [5000, "start"], "the next keystroke starts a new burst");
});

test("the refresh keeps the entry alive across a pause just under idle stop", (t) => {
  // Keys until 3.9 s, the next at 6.5 s: the server's entry (ttl 5 s) must be refreshed
  // at 4 s, not at 6.5 s, or receivers would see a gap.
  const { timer, sent, at } = setup(t);
  for (const ms of [0, 500, 1000, 1500, 2000, 2500, 3000, 3500, 3900, 6500]) {
    at(ms);
    timer.keystroke();
  }
  timer.keystroke();
  at(9500);
  assert.deepEqual(sent, [[0, "start"], [4000, "refresh"], [8000, "refresh"], [9500, "stop", "idle"]]);
});

test("messageSent and blur stop at once; nothing when not typing", (t) => {
  const { timer, sent, at } = setup(t);
  timer.messageSent();
  timer.blur();
  assert.deepEqual(sent, []);
  timer.keystroke();
  at(1200);
  timer.messageSent();
  at(1300);
  timer.keystroke();
  at(1400);
  timer.blur();
  at(20000);
  assert.deepEqual(sent, [[0, "start"], [1200, "stop", "sent"], [1300, "start"], [1400, "stop", "blur"]]);
  assert.equal(timer.stats.idleStops, 0);
});

test("stop with a reason, dispose sends nothing", (t) => {
  const { timer, sent, at } = setup(t);
  timer.keystroke();
  at(10);
  timer.stop("hidden");
  timer.keystroke();
  at(20);
  timer.dispose();
  at(20000);
  assert.deepEqual(sent, [[0, "start"], [10, "stop", "hidden"], [10, "start"]]);
});

test("configurable timers", (t) => {
  const { timer, sent, at } = setup(t, { refreshMs: 1000, idleStopMs: 500, ttlMs: 1500 });
  for (let ms = 0; ms <= 2400; ms += 200) {
    at(ms);
    timer.keystroke();
  }
  at(3000);
  assert.deepEqual(sent, [[0, "start"], [1000, "refresh"], [2000, "refresh"], [2900, "stop", "idle"]]);
});

test("refresh must be below ttl; timers must be positive", () => {
  assert.throws(() => new TypingTimer({ send() {}, refreshMs: 5000, ttlMs: 5000 }), /refreshMs \(5000\) must be below the server's ttl_ms \(5000\)/);
  assert.throws(() => new TypingTimer({ send() {}, refreshMs: 6000 }), RangeError, "default ttl is 5000");
  assert.throws(() => validateTimers({ ttlMs: 0, refreshMs: -1, idleStopMs: NaN }), (err) => {
    assert.ok(err instanceof RangeError);
    for (const k of ["ttlMs", "refreshMs", "idleStopMs"]) assert.match(err.message, new RegExp(k));
    return true;
  });
  validateTimers({ ttlMs: 5000, refreshMs: 4000, idleStopMs: 3000 });
});

test("hold(): on and refreshed without an idle stop until stop(); a keystroke brings the idle stop back", (t) => {
  const { timer, sent, at } = setup(t);
  timer.hold();
  assert.ok(timer.typing && timer.held);
  at(20000);
  assert.deepEqual(sent, [[0, "start"], [4000, "refresh"], [8000, "refresh"], [12000, "refresh"], [16000, "refresh"], [20000, "refresh"]]);
  timer.keystroke();
  assert.ok(!timer.held);
  at(23000);
  assert.deepEqual(sent.at(-1), [23000, "stop", "idle"], "3 s after the keystroke");
  timer.hold();
  timer.stop("sent");
  assert.deepEqual(sent.at(-1), [23000, "stop", "sent"]);
  assert.ok(!timer.held);
});

test("change(): a typing_start now and the refresh re-armed; nothing when off", (t) => {
  const { timer, sent, at } = setup(t);
  timer.change();
  assert.deepEqual(sent, []);
  timer.keystroke();
  at(1000);
  timer.keystroke();
  timer.change();
  at(2900);
  timer.keystroke();
  at(5000);
  assert.deepEqual(sent, [[0, "start"], [1000, "change"], [5000, "refresh"]], "the refresh 4 s after the change, not after the start");
  assert.equal(timer.stats.changes, 1);
});
