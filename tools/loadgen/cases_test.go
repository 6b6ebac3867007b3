package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// caseRunner is a runner with one room (index 0) holding typists a and b
// and a sampled member m, for the state logic without a network.
func caseRunner() (r *runner, a, b, m *client) {
	r = &runner{runID: "t", opts: Options{Rooms: 1}, state: newStateStats(), watch: newWatchStats()}
	mk := func(idx int, user string, typing bool) *client {
		return &client{idx: idx, user: user, room: "t-r0", roomIdx: 0, typing: typing, r: r}
	}
	a, b, m = mk(0, "t-u0", true), mk(1, "t-u1", true), mk(2, "t-u2", false)
	r.byUser = map[string]*client{a.user: a, b.user: b, m.user: m}
	r.roomTypists = [][]*client{{a, b}}
	m.sample, m.view, m.tracked, m.stateOut = true, newView(), []int{0}, r.state
	return r, a, b, m
}

func ev(typ, user string) protocol.ServerFrame {
	return protocol.ServerFrame{Type: typ, Room: "t-r0", User: user, Reason: "stopped"}
}

const ms = int64(time.Millisecond)

// near reports whether a latency in ms is v within the histogram's 0.1 %.
func near(got, v float64) bool { return got >= v*0.998 && got <= v*1.002 }

func TestLastChange(t *testing.T) {
	l := logOf(kindStart, 10, kindRefresh, 20, kindStop, 30, kindStart, 40, kindRefresh, 50)
	idx, on, sent, skipped, ok := l.lastChange(-1, 0)
	if !ok || idx != 3 || !on || sent != 40*ms || skipped != 2 {
		t.Errorf("lastChange(-1) = %d %v %d %d %v, want 3 true 40ms 2 true", idx, on, sent, skipped, ok)
	}
	if _, _, _, skipped, _ := l.lastChange(-1, 25*ms); skipped != 1 {
		t.Errorf("lastChange(-1, 25ms) skipped %d, want 1 (the stop at 30; the start at 10 is older)", skipped)
	}
	if _, _, _, _, ok := l.lastChange(3, 0); ok {
		t.Error("lastChange(3): a refresh after the last start is not a change")
	}
	if !l.lastState() || logOf(kindStart, 1, kindStop, 2).lastState() || (&typistLog{}).lastState() {
		t.Error("lastState: want true for a log ending typing, false for one ending stopped or empty")
	}
}

// By events: each change is measured once, when the view shows it.
func TestDelayToStateByEvents(t *testing.T) {
	r, a, _, m := caseRunner()
	a.log = *logOf(kindStart, 100)
	m.trackEvent(ev("typing_start", a.user), 105*ms)
	m.trackEvent(ev("typing_start", a.user), 109*ms) // a repeat shows nothing new
	a.log.add(entry{mono: 200 * ms, kind: kindStop})
	m.trackEvent(ev("typing_stop", a.user), 230*ms)
	s := r.state.result()
	if s.Delay.Count != 2 || !near(s.Delay.P50, 5) || !near(s.Delay.Max, 30) || s.Superseded != 0 {
		t.Errorf("delays %+v superseded %d, want 2 delays, 5 and 30 ms, none superseded", s.Delay, s.Superseded)
	}
	m.trackEvent(ev("typing_start", "t-other"), 240*ms) // not a typist of the run: ignored
	// An event published before the latest change was sent (ts_ms below
	// its send time) does not show it, even with the same state.
	a.log.add(entry{mono: 300 * ms, wallMs: 300, kind: kindStart})
	a.log.add(entry{mono: 400 * ms, wallMs: 400, kind: kindStop})
	a.log.add(entry{mono: 500 * ms, wallMs: 500, kind: kindStart})
	old := ev("typing_start", a.user)
	old.TsMs = 301
	m.trackEvent(old, 520*ms)
	if s := r.state.result(); s.Delay.Count != 2 {
		t.Errorf("a stale start was counted as showing the start at 500 ms: %d delays", s.Delay.Count)
	}
	fresh := ev("typing_start", a.user)
	fresh.TsMs = 502
	m.trackEvent(fresh, 510*ms)
	if s := r.state.result(); s.Delay.Count != 3 || s.Superseded != 2 {
		t.Errorf("after the fresh start: %d delays, %d superseded; want 3 and 2", s.Delay.Count, s.Superseded)
	}
	if !m.exact() {
		t.Error("view should be the final state (a stopped)")
	}
}

// By summaries: one `typing` frame replaces the list; a change overtaken
// before any frame showed it is superseded.
func TestDelayToStateBySummary(t *testing.T) {
	r, a, b, m := caseRunner()
	a.log = *logOf(kindStart, 100, kindStop, 600, kindStart, 1100)
	b.log = *logOf(kindStart, 300)
	m.trackRoom(0, []protocol.Typist{{User: a.user}, {User: b.user}}, 2, 1300*ms)
	s := r.state.result()
	// a: start at 1100 shown at 1300 (its start at 100 and stop at 600
	// were overtaken); b: start at 300 shown at 1300.
	if s.Delay.Count != 2 || s.Superseded != 2 || !near(s.Delay.Max, 1000) || s.PartialSnapshots != 0 {
		t.Errorf("delays %+v superseded %d partial %d, want 2 (200 and 1000 ms), 2 superseded, 0 partial", s.Delay, s.Superseded, s.PartialSnapshots)
	}
	if !m.exact() {
		t.Error("view should be exact")
	}
	b.log.add(entry{mono: 1400 * ms, kind: kindStop})
	if m.exact() {
		t.Error("b stopped since: view should not be exact")
	}
	m.trackRoom(0, []protocol.Typist{{User: a.user}}, 3, 2300*ms) // total 3 > 1 listed: partial
	if s := r.state.result(); s.Delay.Count != 3 || s.PartialSnapshots != 1 || !m.exact() {
		t.Errorf("after the second summary: %d delays, %d partial, exact %v; want 3, 1, true", s.Delay.Count, s.PartialSnapshots, m.exact())
	}
	if exact, tracked := exactCount([]*client{a, b, m}, nil); exact != 1 || tracked != 1 {
		t.Errorf("exactCount = %d of %d, want 1 of 1 (only m is tracked)", exact, tracked)
	}
	sr := r.state.result()
	sr.setExpected([]*client{a, b, m})
	if sr.Expected != 5 || sr.NeverShown != 0 {
		t.Errorf("expected %d never shown %d, want 5 (a 3, b 2) and 0 (3 shown, 2 superseded)", sr.Expected, sr.NeverShown)
	}
}

func TestStallWindowAndShare(t *testing.T) {
	var w stallWindow
	if w.period(5) != stallBefore {
		t.Error("no window set: every send is before")
	}
	w.set(100, 200)
	for at, want := range map[int64]int{99: stallBefore, 100: stallDuring, 199: stallDuring, 200: stallAfter} {
		if got := w.period(at); got != want {
			t.Errorf("period(%d) = %d, want %d", at, got, want)
		}
	}
	w.record(150, 3*ms)
	w.record(50, 1*ms)
	before, during, after := w.latencies()
	if before.Count != 1 || during.Count != 1 || !near(during.P50, 3) || after.Count != 0 {
		t.Errorf("latencies before %+v during %+v after %+v", before, during, after)
	}
	picked := 0
	for i := 0; i < 500; i++ {
		if pickShare(i, 500, 0.2) {
			picked++
		}
	}
	if picked != 100 || pickShare(0, 10, 0) {
		t.Errorf("pickShare picked %d of 500 at 0.2, want 100 (and none at 0)", picked)
	}
}

func TestWatchFramesAndRooms(t *testing.T) {
	var rooms []string
	for i := 0; i < 500; i++ {
		rooms = append(rooms, "lgabcdefgh-r"+strings.Repeat("9", 3))
	}
	frames := watchFrames(rooms, watchMaxFrame)
	n := 0
	for i, f := range frames {
		if len(f) > watchMaxFrame {
			t.Errorf("frame %d is %d bytes, above %d", i, len(f), watchMaxFrame)
		}
		var w struct {
			Type  string   `json:"type"`
			Rooms []string `json:"rooms"`
			ID    string   `json:"id"`
		}
		if err := json.Unmarshal(f, &w); err != nil || w.Type != "watch" || w.ID == "" {
			t.Fatalf("frame %d: %s (%v)", i, f, err)
		}
		n += len(w.Rooms)
	}
	if n != 500 || len(frames) < 2 {
		t.Errorf("%d rooms in %d frames, want 500 in several", n, len(frames))
	}
	if got := watchedRooms(1, 3, 5); len(got) != 3 || got[0] != 3 || got[2] != 0 {
		t.Errorf("watchedRooms(1, 3, 5) = %v, want [3 4 0]", got)
	}
	if got := watchedRooms(0, 10, 4); len(got) != 4 {
		t.Errorf("watchedRooms(0, 10, 4) = %v, want each of the 4 rooms once", got)
	}
	r := &runner{runID: "lg1", opts: Options{Rooms: 10}}
	if i, ok := r.roomIndex(r.roomName(7)); !ok || i != 7 {
		t.Errorf("roomIndex(roomName(7)) = %d %v", i, ok)
	}
	for _, bad := range []string{"lg1-r10", "lg2-r1", "lg1-rx", "lg1-r-1"} {
		if _, ok := r.roomIndex(bad); ok {
			t.Errorf("roomIndex(%q) accepted", bad)
		}
	}
}

// A watcher reads watching and summary frames (docs/protocol.md,
// "Watching rooms") into its counters and its view.
func TestHandleWatch(t *testing.T) {
	r, a, _, _ := caseRunner()
	r.st = newStats()
	w := &client{idx: 9, user: "t-w0", roomIdx: -1, r: r, watching: true, sample: true, view: newView(), tracked: []int{0}, stateOut: r.watch.state}
	a.log = *logOf(kindStart, 100)
	w.handleWatch([]byte(`{"type":"watching","id":"w0","rooms":["t-r0"],"refused":[{"room":"t-r9","code":"watch_limit","message":"x"}],"watched":1}`), 0)
	w.handleWatch([]byte(`{"type":"summary","room":"t-r0","typing":[{"user":"t-u0"}],"total":1}`), 400*ms)
	w.handleWatch([]byte(`{"type":"summary","room":"t-r5","typing":[],"total":0}`), 500*ms)
	ws := r.watch
	if ws.accepted.Load() != 1 || ws.refused["watch_limit"] != 1 || ws.summaries.Load() != 2 || ws.answers.Load() != 1 {
		t.Errorf("accepted %d refused %v summaries %d answers %d", ws.accepted.Load(), ws.refused, ws.summaries.Load(), ws.answers.Load())
	}
	if s := ws.state.result(); s.Delay.Count != 1 || !near(s.Delay.P50, 300) {
		t.Errorf("watch delay %+v, want one of 300 ms", s.Delay)
	}
	if r.st.errors()["watch:unknown_room"] != 1 {
		t.Errorf("errors %v, want one unknown room (t-r5 is not a run room)", r.st.errors())
	}
	if !w.exact() {
		t.Error("watcher view should be exact")
	}
	// Changes sent before the watch started are not measured.
	w2 := &client{idx: 10, user: "t-w1", roomIdx: -1, r: r, watching: true, sample: true, view: newView(), tracked: []int{0}, stateOut: newStateStats()}
	w2.trackFrom.Store(200 * ms)
	w2.handleWatch([]byte(`{"type":"summary","room":"t-r0","typing":[{"user":"t-u0"}],"total":1}`), 400*ms)
	if s := w2.stateOut.result(); s.Delay.Count != 0 || s.Superseded != 0 {
		t.Errorf("a's start at 100 ms, before the watch at 200 ms, was measured: %+v", s)
	}
}

func TestCPUPerSecond(t *testing.T) {
	t0 := time.Unix(100, 0)
	a := checkpoint{at: t0, cpu: []time.Duration{time.Second, 2 * time.Second}}
	b := checkpoint{at: t0.Add(2 * time.Second), cpu: []time.Duration{2 * time.Second, 3 * time.Second}}
	if got := cpuPerSecond(a, b); got != 1 {
		t.Errorf("cpuPerSecond = %g, want 1 (2 s of CPU over 2 s)", got)
	}
	if got := cpuPerSecond(a, checkpoint{at: b.at}); got != 0 {
		t.Errorf("cpuPerSecond without the second reading = %g, want 0", got)
	}
}

func TestSideBySide(t *testing.T) {
	on := &Result{Connected: 10, TypingConns: 2, FramesPerMemberPerSec: 1, ServerCPUPerSec: 0.2,
		State: &StateResult{Delay: Latency{Count: 5, P50: 600, P99: 1100, Max: 1200}, Tracked: 4, ExactFinal: 4}}
	off := &Result{Connected: 10, TypingConns: 2, FramesPerMemberPerSec: 100, Errors: map[string]int64{"read": 1},
		Stall: &StallResult{Stalled: 2, Healthy: 8, ClosedStalled: 1, ExactHealthy: 8, HealthyDuring: Latency{Count: 3, P50: 1, P99: 2}}}
	rows := SideBySide([]string{"on", "off"}, []*Result{on, off})
	get := func(label string) []string {
		for _, row := range rows {
			if row[0] == label {
				return row
			}
		}
		t.Fatalf("no row %q in %v", label, rows)
		return nil
	}
	if h := rows[0]; len(h) != 3 || h[1] != "on" || h[2] != "off" {
		t.Errorf("header %v", h)
	}
	if r := get("frames per member per s"); r[1] != "1.00" || r[2] != "100.00" {
		t.Errorf("frames row %v", r)
	}
	if r := get("server cpu s/s"); r[1] != "0.200" || r[2] != "-" {
		t.Errorf("cpu row %v", r)
	}
	if r := get("delay to state p50 / p99 / max ms"); r[1] != "600.0 / 1100.0 / 1200.0" || r[2] != "-" {
		t.Errorf("delay row %v", r)
	}
	if r := get("stalled: closed / exact final"); r[1] != "-" || r[2] != "1 of 2 / 0 of 2" {
		t.Errorf("stall row %v", r)
	}
	if r := get("healthy p50 / p99 ms, during"); r[2] != "1.000 / 2.000 (3)" {
		t.Errorf("healthy during row %v", r)
	}
	if r := get("errors"); r[1] != "none" || r[2] != "read 1" {
		t.Errorf("errors row %v", r)
	}
	for _, row := range rows {
		if strings.HasPrefix(row[0], "watch") || strings.HasPrefix(row[0], "summaries") {
			t.Errorf("row %v: no run has watchers", row)
		}
	}
	var buf bytes.Buffer
	WriteSideBySide(&buf, []string{"on", "off"}, []*Result{on, off})
	if !strings.Contains(buf.String(), "exact final state") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func TestCaseOptionsValidation(t *testing.T) {
	for name, o := range map[string]Options{
		"state sample above conns": {Conns: 10, Rooms: 1, StateSample: 11},
		"stall share 1":            {Conns: 10, Rooms: 1, StallShare: 1},
		"stall past the duration":  {Conns: 10, Rooms: 1, StallShare: 0.5, Duration: 5 * time.Second, StallAt: 2 * time.Second, StallFor: 4 * time.Second},
		"stall with state sample":  {Conns: 10, Rooms: 1, StallShare: 0.5, StateSample: 2},
		"watchers over 100":        {Conns: 10, Rooms: 1, Watchers: 101},
		"watch at the end":         {Conns: 10, Rooms: 1, Watchers: 1, WatchAt: time.Hour},
		"watchers in replay":       {Conns: 10, Rooms: 1, Watchers: 1, Mode: ModeReplay},
	} {
		if err := fill(&o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := Options{Conns: 10, Rooms: 1, Rate: 5, StallShare: 0.2, Duration: 30 * time.Second}
	if err := fill(&ok); err != nil || ok.StallAt != 10*time.Second || ok.StallFor != DefaultStallFor {
		t.Errorf("stall defaults: %v, at %s for %s", err, ok.StallAt, ok.StallFor)
	}
}

// The big-room measure against an in-process stack whose room is in
// summary mode from 5 members: no room events, only summaries, and every
// sampled member ends with the exact final state.
func TestBigRoomSummaryAgainstStack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an in-process stack on Redis and NATS; make test runs it (no -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := quietStack()
	cfg.RoomSummaryMembers = 5
	res, err := Run(ctx, Options{
		Stack: true, StackConfig: cfg, Mode: ModeRate, Conns: 20, Rooms: 1, TypingShare: 0.2, Rate: 2,
		Duration: 4 * time.Second, Settle: 2 * time.Second, SettleMax: 20 * time.Second, StateSample: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	res.WriteTable(&table)
	t.Log(table.String())
	s := res.State
	if s == nil || s.Tracked != 5 || s.ExactFinal != 5 || s.Delay.Count == 0 || s.Expected != 5*(res.Sent.Starts+res.Sent.Stops) {
		t.Fatalf("state %+v, want 5 sampled members all exact with delays measured", s)
	}
	if res.FramesPerMemberPerSec <= 0 || len(res.Errors) != 0 {
		t.Errorf("frames per member %g, errors %v", res.FramesPerMemberPerSec, res.Errors)
	}
	if !strings.Contains(table.String(), "delay to the state") {
		t.Error("table has no state line")
	}
}

// Stalled readers against an in-process stack: a stall of 2 s (below
// ELLIPSIS_WRITE_STALL) closes nobody and every connection ends exact.
func TestStallAgainstStack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an in-process stack on Redis and NATS; make test runs it (no -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{
		Stack: true, StackConfig: quietStack(), Mode: ModeRate, Conns: 20, Rooms: 2, TypingShare: 0.5, Rate: 5,
		// 10 listeners, half of them stalled
		Duration: 5 * time.Second, Settle: time.Second, SettleMax: 20 * time.Second,
		StallShare: 0.5, StallAt: time.Second, StallFor: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	res.WriteTable(&table)
	t.Log(table.String())
	s := res.Stall
	if s == nil || s.Stalled != 5 || s.Healthy != 15 {
		t.Fatalf("stall %+v, want 5 stalled and 15 healthy", s)
	}
	if s.ClosedStalled+s.ClosedHealthy != 0 || s.ExactStalled != 5 || s.ExactHealthy != 15 {
		t.Errorf("closed %d + %d, exact %d and %d; want none closed, all exact", s.ClosedStalled, s.ClosedHealthy, s.ExactStalled, s.ExactHealthy)
	}
	if s.HealthyBefore.Count == 0 || s.HealthyDuring.Count == 0 {
		t.Errorf("healthy latencies before %+v during %+v: want both measured", s.HealthyBefore, s.HealthyDuring)
	}
	if res.Delivered.LostState != 0 || len(res.Errors) != 0 {
		t.Errorf("lost %d, errors %v", res.Delivered.LostState, res.Errors)
	}
}

// Watchers against an in-process stack (docs/protocol.md, "Watching
// rooms"): every room is accepted, summaries arrive, the watcher's view
// ends exact.
func TestWatchAgainstStack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an in-process stack on Redis and NATS; make test runs it (no -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{
		Stack: true, StackConfig: quietStack(), Mode: ModeRate, Conns: 40, Rooms: 20, TypingShare: 0.5, Rate: 10,
		Duration: 6 * time.Second, Settle: 3 * time.Second, SettleMax: 20 * time.Second,
		Watchers: 2, WatchRooms: 15, WatchAt: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	res.WriteTable(&table)
	t.Log(table.String())
	w := res.Watch
	if w == nil || w.Accepted != 30 || len(w.Refused) != 0 {
		t.Fatalf("watch %+v, want 2 × 15 rooms accepted, none refused", w)
	}
	if w.Summaries < 30 || w.State.Tracked != 2 || w.State.ExactFinal != 2 || w.State.Delay.Count == 0 {
		t.Errorf("summaries %d, state %+v: want at least one per room, both watchers exact, delays measured", w.Summaries, w.State)
	}
	if len(res.Errors) != 0 {
		t.Errorf("errors %v", res.Errors)
	}
}
