package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The contract suite, continued: the users set's score of a user may lag
// their true expiry after a throttled refresh (scripts/lib.lua,
// INDEX_LAG_MS); none of that may show in events or snapshots.

// lagTTL and lagThrottle leave room for a lag of the full INDEX_LAG_MS
// (min(1 s, ttl/4)) and for several commands inside one refresh window on
// Redis, where time is real.
const lagTTL, lagThrottle = 4 * time.Second, 2 * time.Second

// Two devices: the laptop's start is a throttled refresh that leaves the
// user's score at the phone's expiry (lagging). Stopping the phone leaves
// the user typing until the laptop's entry runs out; stopping the laptop
// instead ends the user with the phone's entry.
func TestContractLagMultiDeviceStop(t *testing.T) {
	for _, tc := range []struct {
		name, stopConn string
		typing         bool // past the phone's expiry
	}{
		{"stop phone", "phone", true},
		{"stop laptop", "laptop", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
				s := se.subscribe("r")
				se.start("r", "u", "phone", 1, OutcomeStarted)
				phoneExp := se.redisNowMs() + lagTTL.Milliseconds()
				se.advance(800 * time.Millisecond)
				se.start("r", "u", "laptop", 1, OutcomeThrottled)
				laptopExp := se.redisNowMs() + lagTTL.Milliseconds() // at or after the laptop's expiry
				se.stop("r", "u", tc.stopConn, 2, OutcomeNoop)
				s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)

				// Just past the phone's expiry.
				se.advance(time.Duration(phoneExp-se.redisNowMs()+100) * time.Millisecond)
				typing := tc.typing
				if got := se.snapshotOf("r"); (len(got) == 1) != typing {
					t.Fatalf("snapshot past the phone's expiry: %v, typing %v", got, typing)
				}
				r := se.sweep()
				if typing {
					if r.Stops != 0 {
						t.Fatalf("sweep past the phone's expiry: %+v, want no stop (laptop types)", r)
					}
					s.ExpectNone(100 * time.Millisecond)
					se.advance(time.Duration(laptopExp-se.redisNowMs()+100) * time.Millisecond)
					if got := se.snapshotOf("r"); len(got) != 0 {
						t.Fatalf("snapshot past the laptop's expiry: %v", got)
					}
					r = se.sweep()
				}
				if r.Stops != 1 {
					t.Fatalf("sweep after the last entry ran out: %+v, want 1 stop", r)
				}
				s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonExpired, waitLong)
				if r := se.sweep(); r.Stops != 0 {
					t.Fatalf("second sweep: %+v", r)
				}
				s.ExpectNone(100 * time.Millisecond)
			})
		})
	}
}

// A stop without conn (the platform's "message posted") of a user whose
// score lags ends every entry: no expired stop follows, and the user's
// next start shows them again and expires them on its own ttl.
func TestContractLagStopWithoutConn(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.start("r", "u", "c", 1, OutcomeStarted)
		se.advance(800 * time.Millisecond)
		se.start("r", "u", "c2", 1, OutcomeThrottled)
		se.stop("r", "u", "", 0, OutcomeStopped)
		if got := se.snapshotOf("r"); len(got) != 0 {
			t.Fatalf("snapshot after the stop: %v", got)
		}
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonStopped, waitLong)
		se.advance(lagTTL) // past both entries of before the stop
		if r := se.sweep(); r.Stops != 0 {
			t.Fatalf("sweep after the stop: %+v", r)
		}
		s.ExpectNone(100 * time.Millisecond)

		se.start("r", "u", "c", 2, OutcomeStarted)
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		se.advance(lagTTL + 100*time.Millisecond)
		if r := se.sweep(); r.Stops != 1 {
			t.Fatalf("sweep past the new start's expiry: %+v, want 1 stop", r)
		}
		s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonExpired, waitLong)
		s.ExpectNone(100 * time.Millisecond)
	})
}

// A stop coalesced by the event rate limit leaves the user shown (its
// typing_stop waits for the sweeper); a start inside the refresh window
// then is throttled, and must put the user back in the users set (field i
// reset by the stop) or they would never expire. The held stop is not
// published (the user types again), and the user expires once.
func TestContractLagCoalescedStopThenThrottledStart(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		interval := lagThrottle / 2 // of the event rate limit (lib.lua, gcra)
		se.hold("r", "u")           // refresh window until +throttle; the 5th event held, due +interval
		for range 4 {
			s.Next(waitLong)
		}
		se.advance(interval + 50*time.Millisecond)
		if r := se.sweep(); r.Starts != 1 {
			t.Fatalf("sweep of the held start: %+v", r)
		}
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		// A refresh whose expiry is more than the lag bound past the score
		// moves the score (field i with it); the stop then removes the user
		// from the users set, and the next start, under the lag bound of
		// that score, must add them again (stop.lua resets i).
		se.start("r", "u", "c", 6, OutcomeThrottled)
		se.stop("r", "u", "c", 7, OutcomeCoalesced) // shown, limit spent: held
		se.start("r", "u", "c", 8, OutcomeThrottled)
		expiry := se.redisNowMs() + lagTTL.Milliseconds()
		se.start("r", "u", "c", 9, OutcomeThrottled) // lags
		if got := se.snapshotOf("r"); len(got) != 1 {
			t.Fatalf("snapshot after the throttled start: %v, want u", got)
		}

		// The held stop comes due: the user types, so nothing is published.
		se.advance(interval + 50*time.Millisecond)
		if r := se.sweep(); r.Stops != 0 || r.Starts != 0 {
			t.Fatalf("sweep of the held stop: %+v, want nothing published", r)
		}
		s.ExpectNone(100 * time.Millisecond)
		if got := se.snapshotOf("r"); len(got) != 1 {
			t.Fatalf("snapshot after the held stop: %v, want u", got)
		}

		se.advance(time.Duration(expiry-se.redisNowMs()+200) * time.Millisecond)
		r := se.sweep()
		r2 := se.sweep()
		if r.Stops+r2.Stops != 1 {
			t.Fatalf("sweeps past the last entry: %+v %+v, want 1 stop", r, r2)
		}
		s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonExpired, waitLong)
		s.ExpectNone(100 * time.Millisecond)
		if got := se.snapshotOf("r"); len(got) != 0 {
			t.Fatalf("snapshot after expiry: %v", got)
		}
	})
}

// sweepAll sweeps until a sweep settles nothing more (at most n times) and
// sums the results.
func (se *storeEnv) sweepAll(n int) SweepResult {
	se.t.Helper()
	var sum SweepResult
	for range n {
		r := se.sweep()
		sum.Rooms += r.Rooms
		sum.Removed += r.Removed
		sum.Stops += r.Stops
		sum.Starts += r.Starts
		if r.Rooms == 0 {
			break
		}
	}
	return sum
}

// More lagging users in a room than one sweep settles (sweepRoomLimit):
// the sweep moves them in batches, never stops one of them, and still
// pushes the stop of a user who expired among them (later in the order of
// scores); each user expires once, after their true expiry.
func TestContractLagMoreThanSweepRoomLimit(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		const n = sweepRoomLimit + 6
		s := se.subscribe("r")
		cmds := func(seq uint64) []protocol.Command {
			var out []protocol.Command
			for i := range n {
				out = append(out, protocol.Command{V: 1, Op: "start", Room: "r", User: fmt.Sprintf("u%03d", i), Conn: "c", Seq: seq})
			}
			return out
		}
		apply := func(seq uint64, want Outcome) {
			outs, errs := se.st.Apply(context.Background(), cmds(seq))
			for i := range outs {
				if errs[i] != nil || outs[i] != want {
					t.Fatalf("start seq %d of user %d: %q, %v; want %q", seq, i, outs[i], errs[i], want)
				}
			}
		}
		t0 := se.redisNowMs()
		apply(1, OutcomeStarted)
		se.advance(50 * time.Millisecond)
		se.start("r", "x", "c", 1, OutcomeStarted) // score above the others', never refreshed
		// x expires by xEnd at the latest (its start was applied before
		// this read), however late a loaded machine ran it.
		xEnd := se.redisNowMs() + lagTTL.Milliseconds()
		se.advance(750 * time.Millisecond)
		apply(2, OutcomeThrottled) // every u lags: score t0 + ttl, lives to ~t0 + 800 + ttl
		trueExp := se.redisNowMs() + lagTTL.Milliseconds()

		se.advance(time.Duration(max(t0+lagTTL.Milliseconds()+150, xEnd+50)-se.redisNowMs()) * time.Millisecond)
		if got := se.snapshotOf("r"); len(got) != n {
			t.Fatalf("snapshot past the lagging scores: %d users, want %d (x expired)", len(got), n)
		}
		if r := se.sweepAll(5); r.Stops != 1 || r.Removed != 1 {
			t.Fatalf("sweeps past the lagging scores: %+v, want x's stop only", r)
		}
		if got := se.snapshotOf("r"); len(got) != n {
			t.Fatalf("snapshot after the sweeps: %d users, want %d", len(got), n)
		}
		se.advance(time.Duration(trueExp-se.redisNowMs()+100) * time.Millisecond)
		if r := se.sweepAll(5); r.Stops != n || r.Removed != n {
			t.Fatalf("sweeps past the true expiry: %+v, want %d stops", r, n)
		}
		if got := se.snapshotOf("r"); len(got) != 0 {
			t.Fatalf("snapshot after expiry: %v", got)
		}
		stops := map[string]int{}
		for _, r := range s.Drain(500 * time.Millisecond) {
			if r.Ev.Type == protocol.TypeTypingStop {
				stops[r.Ev.User]++
				if r.Ev.Reason != protocol.ReasonExpired {
					t.Fatalf("stop %s", r.Raw)
				}
			}
		}
		if len(stops) != n+1 {
			t.Fatalf("%d users stopped, want %d", len(stops), n+1)
		}
		for u, c := range stops {
			if c != 1 {
				t.Fatalf("user %s stopped %d times", u, c)
			}
		}
	})
}

// A disconnect in many rooms of the connection whose entries the user's
// scores lag behind leaves the user typing in each room on their other
// device, until that device's entries run out.
func TestContractLagDisconnectManyRooms(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		var rooms []string
		for i := range 12 {
			rooms = append(rooms, fmt.Sprintf("room-%d", i))
		}
		s := se.subscribe(rooms...)
		t0 := se.redisNowMs()
		for _, r := range rooms {
			se.start(r, "u", "phone", 1, OutcomeStarted)
		}
		se.advance(800 * time.Millisecond)
		for _, r := range rooms {
			se.start(r, "u", "laptop", 1, OutcomeThrottled)
		}
		laptopExp := se.redisNowMs() + lagTTL.Milliseconds()
		outs, err := se.st.Disconnect(context.Background(), protocol.Command{V: 1, Op: "disconnect", Rooms: rooms, User: "u", Conn: "phone", Seq: 2})
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range outs {
			if o != OutcomeNoop {
				t.Fatalf("room %d: %s, want noop (laptop types)", i, o)
			}
		}
		se.advance(time.Duration(t0+lagTTL.Milliseconds()+300-se.redisNowMs()) * time.Millisecond)
		for _, r := range rooms {
			if got := se.snapshotOf(r); len(got) != 1 {
				t.Fatalf("snapshot of %s past the phone's expiry: %v", r, got)
			}
		}
		if r := se.sweepAll(5); r.Stops != 0 {
			t.Fatalf("sweeps past the phone's expiry: %+v, want none", r)
		}
		se.advance(time.Duration(laptopExp-se.redisNowMs()+100) * time.Millisecond)
		if r := se.sweepAll(5); r.Stops != len(rooms) {
			t.Fatalf("sweeps past the laptop's expiry: %+v, want %d stops", r, len(rooms))
		}
		evs := s.Drain(500 * time.Millisecond)
		if len(evs) != 2*len(rooms) {
			t.Fatalf("%d events, want a start and an expired stop per room", len(evs))
		}
	})
}

// A stop of one of two devices lowers the user's score to the other
// device's entry and records it (field i): a throttled refresh of the
// other device then moves the score again when it lags by the bound or
// more, so the score never lags the true expiry by min(1 s, ttl/4) or
// more (a snapshot reads scores only that far below now).
func TestContractLagBoundAfterOneDeviceStops(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		bound := min(time.Second, lagTTL/4).Milliseconds()
		score := func() int64 {
			t.Helper()
			v, err := se.score("r", "u")
			if err != nil {
				t.Fatal(err)
			}
			return int64(v)
		}
		se.start("r", "u", "phone", 1, OutcomeStarted)
		phone := score()
		se.advance(time.Duration(bound+100) * time.Millisecond)
		se.start("r", "u", "laptop", 1, OutcomeThrottled) // past the bound: the score moves
		if got := score(); got < phone+bound {
			t.Fatalf("score after the laptop's refresh: %d, want past %d", got, phone+bound)
		}
		se.stop("r", "u", "laptop", 2, OutcomeNoop) // the phone still types: the score drops to its entry
		if got := score(); got != phone {
			t.Fatalf("score after the laptop's stop: %d, want the phone's entry %d", got, phone)
		}
		se.start("r", "u", "phone", 2, OutcomeThrottled)
		expiry := se.redisNowMs() + lagTTL.Milliseconds()
		if got := score(); got <= expiry-bound-50 { // 50 ms: the start ran a little before the TIME read here
			t.Fatalf("score after the phone's refresh: %d, lags its expiry (about %d) by %d ms, want under %d", got, expiry, expiry-got, bound)
		}
	})
}

// shortTTL is a second store on se's Redis with half of lagTTL: a worker
// with a new, shorter ELLIPSIS_TYPING_TTL during a rollout.
func (se *storeEnv) shortTTL() Store {
	se.t.Helper()
	st, err := New(Options{Kind: se.kind, PubSub: se.pubsub, Redis: se.rdb, Names: se.names, TTL: lagTTL / 2, Throttle: lagThrottle})
	if err != nil {
		se.t.Fatal(err)
	}
	return st
}

// During a rollout of a shorter ttl, a worker with the new ttl lowers a
// score that a worker with the old one wrote above its own expiry, even on
// a throttled refresh: a snapshot never lists the user past their entries,
// and the room is due by the lowered score, so the expiry is pushed then.
func TestContractLagShorterTTLLowersScore(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		short := se.shortTTL()
		se.start("r", "u", "c", 1, OutcomeStarted)
		se.startWith(short, "r", "u", "c", 2, OutcomeThrottled)
		limit := se.redisNowMs() + (lagTTL / 2).Milliseconds()
		got, err := se.score("r", "u")
		if err != nil || int64(got) > limit {
			t.Fatalf("score %v, %v; want at most the shorter ttl's expiry %d", int64(got), err, limit)
		}
		se.advance(lagTTL/2 + 100*time.Millisecond)
		if r := se.sweep(); r.Stops != 1 {
			t.Fatalf("sweep past the shorter ttl's expiry: %+v, want the stop pushed", r)
		}
	})
}

// During the same rollout, a worker with the shorter ttl lowers the score
// no further than another connection's entry: the user typing on the
// phone (old ttl) stays shown after the laptop's throttled start (new
// ttl) until the phone's entry ends.
func TestContractLagShorterTTLKeepsOtherDevice(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		short := se.shortTTL()
		s := se.subscribe("r")
		se.start("r", "u", "phone", 1, OutcomeStarted)
		phone, err := se.score("r", "u")
		if err != nil {
			t.Fatal(err)
		}
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		se.startWith(short, "r", "u", "laptop", 1, OutcomeThrottled)
		if got, err := se.score("r", "u"); err != nil || got != phone {
			t.Fatalf("score after the laptop's start: %v, %v; want the phone's entry %v", int64(got), err, int64(phone))
		}
		// Past the laptop's entry, before the phone's.
		se.advance(lagTTL/2 + time.Second)
		if now := se.redisNowMs(); now >= int64(phone) {
			t.Fatalf("too slow: now %d is past the phone's entry %d", now, int64(phone))
		}
		if r := se.sweep(); r.Stops != 0 {
			t.Fatalf("sweep while the phone's entry lives: %+v, want no stop", r)
		}
		s.ExpectNone(50 * time.Millisecond)
		if got := se.snapshotOf("r"); len(got) != 1 || got[0] != "u/N" {
			t.Fatalf("snapshot while the phone's entry lives: %v, want u", got)
		}
	})
}

// The sweep that moves a lagging score writes field i of the user hash and
// renews its expiry; and a user hash gone (evicted) takes the user's
// entries with it (both stores keep them there), so the sweep then removes
// the user instead of moving the score, and writes no hash that would
// never expire.
func TestContractLagSweepNeverLeavesAPersistentHash(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		userKey := se.names.UserKey("r", "u")
		se.start("r", "v", "c", 1, OutcomeStarted) // due with u, its hash then evicted
		se.start("r", "u", "c", 1, OutcomeStarted)
		first, err := se.score("r", "u")
		if err != nil {
			t.Fatal(err)
		}
		se.advance(500 * time.Millisecond)
		se.start("r", "u", "c", 2, OutcomeThrottled) // the scores lag: live entries
		se.start("r", "v", "c", 2, OutcomeThrottled) // past them
		vKey := se.names.UserKey("r", "v")
		if err := se.rdb.Del(ctx, vKey).Err(); err != nil { // as an eviction would
			t.Fatal(err)
		}
		se.advance(time.Duration(int64(first)-se.redisNowMs()+100) * time.Millisecond)
		if r := se.sweep(); r.Stops != 0 || r.Removed != 1 {
			t.Fatalf("sweep past the lagging scores: %+v, want u's score moved and v removed, no stop", r)
		}
		keyPx := time.Duration(se.st.(*redisStore).keyPxMs) * time.Millisecond
		if ttl, err := se.rdb.PTTL(ctx, userKey).Result(); err != nil || ttl < keyPx-time.Second {
			t.Fatalf("u's user hash after the sweep: PTTL %v, %v; want renewed to about %v", ttl, err, keyPx)
		}
		if n, err := se.rdb.Exists(ctx, vKey).Result(); err != nil || n != 0 {
			t.Fatalf("v's evicted user hash after the sweep: exists %d, %v; want none written", n, err)
		}
	})
}
