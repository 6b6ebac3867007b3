package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The contract suite, continued: constant cost, transitions throttled
// with an exact final state, bounded snapshots and stale starts never
// shown, on both stores and both backends.

// redisNowMs is Redis TIME in unix ms: the frozen clock on miniredis.
func (se *storeEnv) redisNowMs() int64 {
	se.t.Helper()
	if se.mr != nil {
		return se.now.UnixMilli()
	}
	tm, err := se.rdb.Time(context.Background()).Result()
	if err != nil {
		se.t.Fatal(err)
	}
	return tm.UnixMilli()
}

func (se *storeEnv) apply(cmd protocol.Command) Outcome {
	se.t.Helper()
	outs, errs := se.st.Apply(context.Background(), []protocol.Command{cmd})
	if errs[0] != nil {
		se.t.Fatalf("apply %+v: %v", cmd, errs[0])
	}
	return outs[0]
}

// A room's sweep settles at most sweepRoomLimit expired users per call, so
// no room makes a script run long; the rest follow on the next sweeps.
func TestContractSweepBoundedPerRoom(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		const users = sweepRoomLimit + 36
		var cmds []protocol.Command
		for i := range users {
			cmds = append(cmds, protocol.Command{V: 1, Op: "start", Room: "r", User: fmt.Sprintf("u%03d", i), Conn: "c", Seq: 1})
		}
		if _, errs := se.st.Apply(context.Background(), cmds); errs[0] != nil {
			t.Fatal(errs[0])
		}
		se.advance(stTTL + stMargin)
		first := se.sweep()
		if first.Stops != sweepRoomLimit {
			t.Fatalf("first sweep %+v, want %d stops", first, sweepRoomLimit)
		}
		second := se.sweep()
		if second.Stops != users-sweepRoomLimit {
			t.Fatalf("second sweep %+v, want %d stops", second, users-sweepRoomLimit)
		}
		if r := se.sweep(); r.Rooms != 0 {
			t.Fatalf("third sweep %+v, want nothing due", r)
		}
	})
}

// An honest pattern is shown exactly and at once: start, stop, start in the
// same millisecond, and again after any pause.
func TestContractHonestTransitionsShownAtOnce(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.start("r", "u", "c", 1, OutcomeStarted)
		se.stop("r", "u", "c", 2, OutcomeStopped)
		se.start("r", "u", "c", 3, OutcomeStarted)
		se.advance(3 * stThrottle)
		se.stop("r", "u", "c", 4, OutcomeStopped)
		se.start("r", "u", "c", 5, OutcomeStarted)
		for i, typ := range []string{"typing_start", "typing_stop", "typing_start", "typing_stop", "typing_start"} {
			if r, ok := s.Next(waitLong); !ok || r.Ev.Type != typ {
				t.Fatalf("event %d: %s, want %s", i, r.Raw, typ)
			}
		}
		s.ExpectNone(100 * time.Millisecond)
	})
}

// Toggling at 20 frames/s, from one connection and from four connections
// of one user: receivers get at most 4 + 2*ceil(T/throttle) events about
// the user over any span T, and the user's true final state within
// throttle + 1 s of the last command.
func TestContractTogglingIsCoalesced(t *testing.T) {
	for _, conns := range []int{1, 4} {
		for _, endTyping := range []bool{false, true} {
			t.Run(fmt.Sprintf("conns=%d/ends_typing=%v", conns, endTyping), func(t *testing.T) {
				// A ttl far above throttle + 1 s: the final state is checked
				// before the last entry would expire.
				forEachKindTTL(t, 5*time.Second, func(t *testing.T, se *storeEnv) {
					toggleAndCheck(t, se, conns, endTyping)
				})
			})
		}
	}
}

func toggleAndCheck(t *testing.T, se *storeEnv, conns int, endTyping bool) {
	s := se.subscribe("r")
	const frame = 50 * time.Millisecond // 20 frames/s
	frames := 40
	if endTyping {
		frames++ // the last frame a start
	}
	seq := map[string]uint64{}
	typing := map[string]bool{}
	for i := range frames {
		conn := fmt.Sprintf("c%d", i%conns)
		seq[conn]++
		cmd := protocol.Command{V: 1, Op: "start", Room: "r", User: "u", Name: "U", Conn: conn, Seq: seq[conn]}
		if typing[conn] {
			cmd.Op = "stop"
		}
		typing[conn] = !typing[conn]
		se.apply(cmd)
		se.advance(frame)
		se.sweep()
	}
	want := slices.Contains(mapsValues(typing), true)
	if want != endTyping {
		t.Fatalf("test bug: final state %v", want)
	}
	for range 8 { // the sweeper's ticks for throttle + a little
		se.advance(stThrottle / 4)
		se.sweep()
	}
	evs := s.Drain(500 * time.Millisecond)
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	for i := range evs {
		for j := i; j < len(evs); j++ {
			span := float64(evs[j].Ev.TsMs - evs[i].Ev.TsMs)
			bound := 4 + 2*int(math.Ceil(span/float64(stThrottle.Milliseconds())))
			if j-i+1 > bound {
				t.Fatalf("%d events over %v ms (events %d..%d), bound %d", j-i+1, span, i, j, bound)
			}
		}
	}
	last := evs[len(evs)-1].Ev
	if got := last.Type == protocol.TypeTypingStart; got != want {
		t.Fatalf("last event %s, want typing=%v (%d events)", evs[len(evs)-1].Raw, want, len(evs))
	}
	if got := len(se.typing("r")) == 1; got != want {
		t.Fatalf("snapshot %v, want typing=%v", se.typing("r"), want)
	}
	t.Logf("%d frames, %d events", frames, len(evs))
}

func mapsValues(m map[string]bool) []bool {
	out := make([]bool, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// A snapshot of 3,000 typists with 256-byte ids and names of 256 '<' (6
// bytes each in Go's JSON) lists the cap and counts them all; the reply
// stays far below NATS's 1 MiB default max payload.
func TestContractBigSnapshotBounded(t *testing.T) {
	forEachKindTTL(t, 30*time.Second, func(t *testing.T, se *storeEnv) {
		const typists = 3000
		name := strings.Repeat("<", protocol.MaxNameBytes)
		var cmds []protocol.Command
		for i := range typists {
			user := fmt.Sprintf("%04d", i) + strings.Repeat("x", protocol.MaxIDBytes-4)
			cmds = append(cmds, protocol.Command{V: 1, Op: "start", Room: "big", User: user, Name: name, Conn: "c", Seq: 1})
			if len(cmds) == 250 {
				for _, err := range se.applyAll(cmds) {
					if err != nil {
						t.Fatal(err)
					}
				}
				cmds = cmds[:0]
			}
		}
		for _, limit := range []int{100, MaxSnapshotLimit + 1000} {
			snap, err := se.st.Snapshot(context.Background(), "big", limit)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Total != typists || len(snap.Users) != min(limit, MaxSnapshotLimit) {
				t.Fatalf("limit %d: total %d, %d users", limit, snap.Total, len(snap.Users))
			}
			if !slices.IsSortedFunc(snap.Users, func(a, b protocol.Typist) int { return strings.Compare(a.User, b.User) }) {
				t.Fatal("users not sorted")
			}
			for _, u := range snap.Users {
				if u.Name != name || len(u.User) != protocol.MaxIDBytes {
					t.Fatalf("typist %q/%q", u.User[:8], u.Name[:8])
				}
			}
			raw, _ := json.Marshal(protocol.SnapshotReply{V: 1, Room: "big", Users: snap.Users, Total: snap.Total})
			if len(raw) > 1<<20 {
				t.Fatalf("limit %d: reply of %d bytes", limit, len(raw))
			}
		}
	})
}

func (se *storeEnv) applyAll(cmds []protocol.Command) []error {
	_, errs := se.st.Apply(context.Background(), cmds)
	return errs
}

// A start the gateway sent before the platform's stop without conn is
// superseded, whatever the workers' delays (one worker paused between
// receiving the start and applying it, another applying the stop); a start
// sent a second after the stop shows; a start that waited longer than ttl
// shows nobody.
func TestContractStaleStartsNeverShow(t *testing.T) {
	forEachKindTTL(t, 2*time.Second, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.start("r", "u", "c", 1, OutcomeStarted)
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		// Worker A receives the client's refresh (gateway send time now)...
		held := protocol.Command{V: 1, Op: "start", Room: "r", User: "u", Name: "U", Conn: "c", Seq: 2, TsMs: se.redisNowMs()}
		se.advance(20 * time.Millisecond)
		// ...and is paused while worker B applies the platform's stop.
		stopAt := se.redisNowMs()
		se.stop("r", "u", "", 0, OutcomeStopped)
		s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonStopped, waitLong)
		se.advance(300 * time.Millisecond) // A resumes
		if out := se.apply(held); out != OutcomeSuperseded {
			t.Fatalf("held start: %q, want superseded", out)
		}
		// Sent within the stop guard after the stop: also taken as before it.
		early := held
		early.Seq, early.TsMs = 3, stopAt+StopGuard.Milliseconds()/2
		if out := se.apply(early); out != OutcomeSuperseded {
			t.Fatalf("start inside the guard: %q, want superseded", out)
		}
		se.sweep()
		s.ExpectNone(200 * time.Millisecond)
		if got := se.typing("r"); len(got) != 0 {
			t.Fatalf("typing after the stop: %v", got)
		}
		// A start sent a second after the stop shows as usual.
		se.advance(time.Second)
		fresh := held
		fresh.Seq, fresh.TsMs = 4, stopAt+time.Second.Milliseconds()
		if out := se.apply(fresh); out != OutcomeStarted {
			t.Fatalf("start a second after the stop: %q, want started", out)
		}
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		// A start that waited longer than ttl in some queue: dropped.
		late := protocol.Command{V: 1, Op: "start", Room: "r", User: "v", Conn: "cv", Seq: 1, TsMs: se.redisNowMs() - (2*time.Second + 100*time.Millisecond).Milliseconds()}
		if out := se.apply(late); out != OutcomeLate {
			t.Fatalf("late start: %q, want late", out)
		}
		s.ExpectNone(200 * time.Millisecond)
		if got := se.typing("r"); !slices.Equal(got, []string{"u"}) {
			t.Fatalf("typing %v, want only u", got)
		}
	})
}

// A snapshot agrees with the event stream: a user whose typing_start the
// transition throttle holds (coalesced, for the sweeper's trailing edge) is
// not listed, so when a coalesced stop follows, receivers that took the
// snapshot are not left showing a user nobody will publish a typing_stop
// about. (Seen in the Sentinel failover test: a resync snapshot taken
// between a coalesced start and a coalesced stop showed the typist for
// good.)
func TestContractSnapshotListsOnlyShownUsers(t *testing.T) {
	// The fifth command is coalesced only if it lands within one interval
	// of the event rate limit (throttle / 2) of the first. On Redis, whose
	// clock runs, five script calls under -race on a loaded 2-vCPU machine
	// took more than stThrottle / 2 = 75 ms; a 1 s throttle gives them
	// 500 ms (the whole subtest, sweeps included, takes about 200 ms under
	// that load with stThrottle). The ttl stays far above the 2 throttles
	// of sweeping below.
	forEachKindTiming(t, 5*time.Second, time.Second, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		// Four honest transitions spend the burst of the event rate limit.
		se.start("r", "u", "c", 1, OutcomeStarted)
		se.stop("r", "u", "c", 2, OutcomeStopped)
		se.start("r", "u", "c", 3, OutcomeStarted)
		se.stop("r", "u", "c", 4, OutcomeStopped)
		se.start("r", "u", "c", 5, OutcomeCoalesced) // typing, not yet shown
		if got := se.snapshotOf("r"); len(got) != 0 {
			t.Fatalf("snapshot while the start is held: %v, want nobody (receivers were told u stopped)", got)
		}
		se.stop("r", "u", "c", 6, OutcomeNoop) // back to what receivers were told
		for range 8 {
			se.advance(se.throttle / 4)
			se.sweep()
		}
		evs := s.Drain(300 * time.Millisecond)
		if n := len(evs); n != 4 || evs[n-1].Ev.Type != protocol.TypeTypingStop {
			t.Fatalf("%d events, last %v: want the 4 honest ones, ending with typing_stop", n, evs)
		}
		if got := se.snapshotOf("r"); len(got) != 0 {
			t.Fatalf("final snapshot %v, want nobody", got)
		}
	})
}

// A throttled refresh leaves the user's score in the room's users zset
// while it lags the new expiry by less than the index lag (lib.lua,
// INDEX_LAG_MS: no O(log N) ZADD on that path). The lag never shows: when
// the old score comes due, the snapshot still lists the user and the sweep
// moves the score to the true expiry instead of pushing a stop; the stop
// comes once, after the true expiry. Also when the refresh came from
// another connection of the user.
func TestContractThrottledRefreshLagsIndexUnseen(t *testing.T) {
	const ttl, throttle = 4 * time.Second, 2 * time.Second // lag bound: min(1 s, ttl/4) = 1 s
	for _, conn2 := range []string{"c", "c2"} {
		t.Run("refresh on "+conn2, func(t *testing.T) {
			forEachKindTiming(t, ttl, throttle, func(t *testing.T, se *storeEnv) {
				s := se.subscribe("r")
				se.start("r", "u", "c", 1, OutcomeStarted)
				first, err := se.score("r", "u")
				if err != nil {
					t.Fatal(err)
				}
				se.advance(500 * time.Millisecond)
				se.start("r", "u", conn2, 2, OutcomeThrottled)
				if got, err := se.score("r", "u"); err != nil || got != first {
					t.Fatalf("score after a throttled refresh 500 ms later: %v, %v; want it left at %v", got, err, first)
				}
				s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)

				// Past the old score, before the true expiry (500 ms later).
				se.advance(time.Duration(int64(first)-se.redisNowMs())*time.Millisecond + 100*time.Millisecond)
				if got := se.snapshotOf("r"); !slices.Equal(got, []string{"u/N"}) {
					t.Fatalf("snapshot past the lagging score: %v, want u listed", got)
				}
				if r := se.sweep(); r.Stops != 0 {
					t.Fatalf("sweep past the lagging score: %+v, want no stop", r)
				}
				moved, err := se.score("r", "u")
				if err != nil || moved < first+400 {
					t.Fatalf("score after the sweep: %v, %v; want the refresh's expiry (~%v)", moved, err, first+500)
				}
				s.ExpectNone(100 * time.Millisecond)

				// Past the true expiry: one expired stop.
				se.advance(time.Duration(int64(moved)-se.redisNowMs())*time.Millisecond + 100*time.Millisecond)
				if r := se.sweep(); r.Stops != 1 {
					t.Fatalf("sweep past the true expiry: %+v, want 1 stop", r)
				}
				s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonExpired, waitLong)
				if got := se.snapshotOf("r"); len(got) != 0 {
					t.Fatalf("snapshot after expiry: %v", got)
				}
				s.ExpectNone(100 * time.Millisecond)
			})
		})
	}
}
