// Replays real human typing through the SDK: every text key press of the
// neuroQWERTY sessions is a room.keystroke() at its recorded time, every
// Return a room.messageSent(), on a real Client over a fake socket and a
// fake clock (hours of typing in about a second). Counts the typing frames
// that reach the wire against the keystrokes typed (the naive client sends
// one event per keystroke), and checks on the recorded timeline that the
// server's entry never lapses while someone types.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { Client } from "../../src/ellipsis.js";
import { FakeClock, FakeWebSocket, flush } from "../unit/helpers.js";
import { loadSessions, isSend, isText, repoRoot } from "./keystrokes.js";

const TIMING = { ttlMs: 5000, refreshMs: 4000, idleStopMs: 3000 };

// Replays one session; maxKeys > 0 also ends a message after that many
// text keys (a chat-sized cut of the copied text's long lines, sent).
async function replaySession(session, maxKeys) {
  const clock = new FakeClock(session.keys[0].press);
  FakeWebSocket.reset();
  const client = new Client({
    url: "http://replay.test",
    user: "typist",
    fetchConfig: false,
    ...TIMING,
    pingMs: 1e12, // no keepalive or resync frames in this count
    resyncMs: 0,
    stopOnHide: false,
    WebSocket: FakeWebSocket,
    clock,
  });
  const room = client.join("replay");
  client.connect();
  await flush();
  const ws = FakeWebSocket.last;
  ws.open();
  ws.acceptJoin("replay");
  // Stamp every frame with the clock.
  const frames = [];
  const send = ws.send.bind(ws);
  ws.send = (data) => {
    send(data);
    const f = JSON.parse(data);
    if (f.type.startsWith("typing_")) frames.push({ type: f.type, at: clock.now() });
  };

  let keystrokes = 0;
  let messages = 0; // drafts sent (Return, or a maxKeys cut)
  let drafts = 0; // drafts left unsent at the session's end
  let inDraft = 0;
  const keyTimes = [];
  for (const k of session.keys) {
    clock.tick(k.press - clock.now());
    if (isSend(k.key)) {
      if (inDraft > 0) {
        room.messageSent();
        messages++;
        inDraft = 0;
      }
      continue;
    }
    if (!isText(k.key)) continue;
    room.keystroke();
    keyTimes.push(clock.now());
    keystrokes++;
    inDraft++;
    if (maxKeys > 0 && inDraft >= maxKeys) {
      room.messageSent();
      messages++;
      inDraft = 0;
    }
  }
  if (inDraft > 0) drafts++;
  clock.tick(TIMING.idleStopMs + 1); // the last draft's idle stop
  const stats = room.stats;
  client.close();
  return { keystrokes, messages, drafts, frames, stats, keyTimes };
}

// Checks the timeline of one session: frames alternate burst by burst
// (start, refreshes, stop), the gap between two typing_start frames of a
// burst is exactly refreshMs (< ttl), the stop comes before the entry would
// lapse, and every keystroke lies inside a burst.
function checkTimeline(r) {
  const bursts = [];
  let cur = null;
  for (const f of r.frames) {
    if (f.type === "typing_start") {
      if (!cur) bursts.push((cur = { starts: [f.at], stop: null }));
      else {
        assert.equal(f.at - cur.starts.at(-1), TIMING.refreshMs, "refresh every refreshMs");
        cur.starts.push(f.at);
      }
    } else {
      assert.ok(cur, "a stop without a start");
      cur.stop = f.at;
      assert.ok(cur.stop - cur.starts.at(-1) < TIMING.ttlMs, "the entry never lapses before the stop");
      cur = null;
    }
  }
  assert.equal(cur, null, "every burst ended with a stop");
  let b = 0;
  for (const t of r.keyTimes) {
    while (b < bursts.length && bursts[b].stop < t) b++;
    assert.ok(b < bursts.length && bursts[b].starts[0] <= t && t <= bursts[b].stop, `keystroke at ${t} outside a burst`);
  }
  return bursts.length;
}

async function replayAll(sessions, maxKeys) {
  const total = { sessions: sessions.length, keystrokes: 0, messages: 0, drafts: 0, bursts: 0, starts: 0, refreshes: 0, stops: 0, idleStops: 0, frames: 0 };
  for (const s of sessions) {
    const r = await replaySession(s, maxKeys);
    total.bursts += checkTimeline(r);
    total.keystrokes += r.keystrokes;
    total.messages += r.messages;
    total.drafts += r.drafts;
    total.frames += r.frames.length;
    total.starts += r.stats.starts;
    total.refreshes += r.stats.refreshes;
    total.stops += r.stats.stops;
    total.idleStops += r.stats.idleStops;
    assert.equal(r.frames.length, r.stats.starts + r.stats.refreshes + r.stats.stops, "every decision reached the wire");
  }
  const perMessage = (n) => n / (total.messages + total.drafts);
  return {
    ...total,
    eventsPerMessage: +perMessage(total.frames).toFixed(2),
    keystrokesPerMessage: +perMessage(total.keystrokes).toFixed(2),
    eventsPerKeystroke: +(total.frames / total.keystrokes).toFixed(4),
    reduction: +(total.keystrokes / total.frames).toFixed(1),
  };
}

test("keystroke replay: typing events per message vs one event per keystroke", async (t) => {
  const data = loadSessions();
  t.diagnostic(`data: ${relative(repoRoot, data.path)} (${data.full ? "full neuroQWERTY cut" : "SAMPLE only: the full file is missing"}), ${data.sessions.length} sessions`);
  const results = {};
  for (const [name, maxKeys] of [["return", 0], ["chat40", 40]]) {
    const r = await replayAll(data.sessions, maxKeys);
    results[name] = r;
    t.diagnostic(
      `${name === "return" ? "messages end at Return     " : "chat-sized (≤40 keys/msg)  "}: ` +
        `${r.keystrokes} keystrokes, ${r.messages + r.drafts} messages (${r.messages} sent, ${r.drafts} unsent at session end), ${r.frames} typing events ` +
        `(${r.starts} start, ${r.refreshes} refresh, ${r.stops} stop of which ${r.idleStops} idle) → ` +
        `${r.eventsPerMessage} events/message vs ${r.keystrokesPerMessage} keystrokes/message ` +
        `(one event per keystroke): ${r.reduction}× fewer`,
    );
    assert.ok(r.keystrokes > 0 && r.frames > 0);
    assert.equal(r.starts, r.stops, "every burst ends with exactly one stop");
    assert.ok(r.reduction >= 5, `the timers must save most events, got ${r.reduction}×`);
  }
  if (data.full) {
    assert.equal(data.sessions.length, 56);
    assert.equal(data.sessions.reduce((n, s) => n + s.keys.length, 0), 91641, "every key press of the full file read");
  }
  const dir = join(repoRoot, "clients", "js", "test-artifacts");
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, "keystroke-replay.json"),
    JSON.stringify({ data: relative(repoRoot, data.path), full: data.full, timing: TIMING, ...results }, null, 2) + "\n",
  );
});

test("keystroke replay: key classification", () => {
  for (const k of ["a", "E", "space", "BackSpace", "Delete", "comma", "ntilde", "P_Add", "KP_5", "1"]) assert.ok(isText(k), k);
  for (const k of ["", "Shift_L", "Return", "P_Enter", "[65105]", "Left", "P_Left", "F5", "Caps_Lock"]) assert.ok(!isText(k), k);
  assert.ok(isSend("Return") && isSend("P_Enter") && !isSend("a"));
});
