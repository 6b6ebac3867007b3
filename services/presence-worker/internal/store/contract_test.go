package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// The Store contract suite (watermill's TestPubSub shape): every test runs
// on every store kind (zset, keys) and every backend (Redis 7, miniredis),
// as parallel subtests, and asserts behaviour only: outcomes, events,
// snapshots, and that nothing of a typist is left behind. Layout-specific
// checks (the sorted set's members, the sweep index's scores) stay in
// store_test.go, which covers the scripts' own layout.

// forEachKind runs f as a parallel subtest per store kind and backend, on a
// fresh store (its own key prefix; on miniredis its own server).
func forEachKind(t *testing.T, f func(t *testing.T, se *storeEnv)) {
	t.Helper()
	forEachKindTTL(t, stTTL, f)
}

// forEachKindTTL is forEachKind with another entry ttl, for tests whose
// steps take longer than stTTL on a busy machine.
func forEachKindTTL(t *testing.T, ttl time.Duration, f func(t *testing.T, se *storeEnv)) {
	t.Helper()
	forEachKindTiming(t, ttl, stThrottle, f)
}

// forEachKindTiming is forEachKind with another entry ttl and throttle,
// for tests that need several commands to land inside one window of the
// event rate limit (throttle / 2) on Redis, where time is real.
func forEachKindTiming(t *testing.T, ttl, throttle time.Duration, f func(t *testing.T, se *storeEnv)) {
	t.Helper()
	t.Parallel()
	for _, kind := range storetest.Kinds {
		for _, be := range storetest.Backends {
			t.Run(kind+"/"+be.Name, func(t *testing.T) {
				t.Parallel()
				f(t, newStoreEnvTiming(t, be, kind, ttl, throttle))
			})
		}
	}
}

func (se *storeEnv) startNamed(room, user, name, conn string, seq uint64, want ...Outcome) {
	se.t.Helper()
	out, err := se.st.Start(context.Background(), protocol.Command{V: 1, Op: "start", Room: room, User: user, Conn: conn, Seq: seq, Name: name})
	if err != nil || !slices.Contains(want, out) {
		se.t.Fatalf("start %s/%s/%s seq %d: %q, %v; want %q", room, user, conn, seq, out, err, want)
	}
}

func (se *storeEnv) stopReason(room, user, conn string, seq uint64, reason string, want Outcome) {
	se.t.Helper()
	out, err := se.st.Stop(context.Background(), protocol.Command{V: 1, Op: "stop", Room: room, User: user, Conn: conn, Seq: seq}, reason)
	if err != nil || out != want {
		se.t.Fatalf("stop(%s) %s/%s/%s seq %d: %q, %v; want %q", reason, room, user, conn, seq, out, err, want)
	}
}

// snapshotOf returns "user/name" of who is typing in room.
func (se *storeEnv) snapshotOf(room string) []string {
	se.t.Helper()
	snap, err := se.st.Snapshot(context.Background(), room, MaxSnapshotLimit)
	if err != nil {
		se.t.Fatalf("snapshot %q: %v", room, err)
	}
	users := snap.Users
	if snap.Total != len(users) {
		se.t.Fatalf("snapshot %q: total %d for %d users", room, snap.Total, len(users))
	}
	if users == nil {
		se.t.Fatalf("snapshot %q: nil slice (replies must carry users: [])", room)
	}
	out := []string{}
	for _, u := range users {
		out = append(out, u.User+"/"+u.Name)
	}
	return out
}

// keys lists the store's keys (SCAN on its prefix; the prefixes of these
// tests hold no glob characters).
func (se *storeEnv) keys() []string {
	se.t.Helper()
	var out []string
	iter := se.rdb.Scan(context.Background(), 0, se.names.KeyPrefix()+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		se.t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func TestContractStartRefreshThrottle(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.startNamed("r", "u", "U", "c", 1, OutcomeStarted)
		se.startNamed("r", "u", "U", "c", 2, OutcomeThrottled)
		se.advance(stTTL * 3 / 4) // past the throttle window, before the ttl
		se.startNamed("r", "u", "U", "c", 3, OutcomeRefreshed)
		se.startNamed("r", "u", "U", "c", 4, OutcomeThrottled)
		se.advance(stTTL / 2) // the first start's ttl is over; the refresh extended it
		if got := se.snapshotOf("r"); !slices.Equal(got, []string{"u/U"}) {
			t.Fatalf("snapshot after the first ttl: %v (refresh did not extend)", got)
		}
		r := s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		if r.Ev.Name != "U" || r.Ev.TTLMs != stTTL.Milliseconds() {
			t.Fatalf("event %s", r.Raw)
		}
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.ExpectNone(100 * time.Millisecond)
	})
}

// A start that makes a user visible and every stop go through at once,
// whatever the throttle: start → stop → start inside the window shows all.
func TestContractStartStopStartIsNotThrottled(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.startNamed("r", "u", "", "c", 1, OutcomeStarted)
		se.stopReason("r", "u", "c", 2, protocol.ReasonStopped, OutcomeStopped)
		se.startNamed("r", "u", "", "c", 3, OutcomeStarted)
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonStopped, waitLong)
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.ExpectNone(100 * time.Millisecond)
	})
}

func TestContractStop(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.startNamed("r", "u", "U", "c", 1, OutcomeStarted)
		se.stopReason("r", "u", "c", 2, protocol.ReasonStopped, OutcomeStopped)
		se.stopReason("r", "u", "c", 3, protocol.ReasonStopped, OutcomeNoop)
		if got := se.snapshotOf("r"); len(got) != 0 {
			t.Fatalf("snapshot after stop: %v", got)
		}
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		r := s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonStopped, waitLong)
		want := `{"v":1,"type":"typing_stop","room":"r","user":"u","reason":"stopped","ts_ms":`
		if !strings.HasPrefix(r.Raw, want) {
			t.Fatalf("raw %s", r.Raw)
		}
		s.ExpectNone(100 * time.Millisecond)
		// Nothing of the typist is left but the user hash (the connection's
		// seq and the event rate limit, until it expires) and the room in
		// the sweep index, until the next sweep drops it.
		if got, want := se.keys(), []string{se.names.SweepKey(names.SweepBucket("r")), se.names.UserKeyPrefix("r") + "u"}; !slices.Equal(got, want) {
			t.Fatalf("keys after stop %q, want %q", got, want)
		}
		se.advance(stTTL + stMargin)
		if r := se.sweep(); r.Stops != 0 || r.Rooms != 1 {
			t.Fatalf("sweep after stop: %+v, want the room swept without a stop", r)
		}
		if got, want := se.keys(), []string{se.names.UserKeyPrefix("r") + "u"}; !slices.Equal(got, want) {
			t.Fatalf("keys after the sweep %q, want %q", got, want)
		}
	})
}

func TestContractLeave(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.startNamed("r", "u", "", "c", 1, OutcomeStarted)
		se.stopReason("r", "u", "c", 2, protocol.ReasonLeft, OutcomeStopped)
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonLeft, waitLong)
		s.ExpectNone(100 * time.Millisecond)
	})
}

// Entries per connection, typists per user: one device's stop never hides
// a user still typing on another, and the user expires with the last one.
func TestContractMultiDevice(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.startNamed("r", "u", "U", "phone", 1, OutcomeStarted)
		se.startNamed("r", "u", "U", "laptop", 1, OutcomeThrottled)
		se.stopReason("r", "u", "phone", 2, protocol.ReasonStopped, OutcomeNoop)
		if got := se.snapshotOf("r"); !slices.Equal(got, []string{"u/U"}) {
			t.Fatalf("snapshot with the laptop typing: %v", got)
		}
		se.stopReason("r", "u", "laptop", 2, protocol.ReasonStopped, OutcomeStopped)
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonStopped, waitLong)
		s.ExpectNone(100 * time.Millisecond)

		// The phone types, the laptop joins later and stops: the user is
		// visible until the phone's entry expires, not the laptop's.
		se.startNamed("r", "u", "U", "phone", 3, OutcomeStarted)
		se.advance(stTTL / 2)
		se.startNamed("r", "u", "U", "laptop", 3, OutcomeRefreshed)
		se.stopReason("r", "u", "laptop", 4, protocol.ReasonStopped, OutcomeNoop)
		se.advance(stTTL/2 + stMargin) // the phone expired; the laptop's would still live
		if got := se.snapshotOf("r"); len(got) != 0 {
			t.Fatalf("snapshot after the phone's ttl: %v, want nobody", got)
		}
		if r := se.sweep(); r.Stops != 1 {
			t.Fatalf("sweep %+v, want one expired stop", r)
		}
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonExpired, waitLong)
		s.ExpectNone(100 * time.Millisecond)
	})
}

func TestContractStopWithoutConn(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.startNamed("r", "alice", "Alice", "phone", 1, OutcomeStarted)
		se.startNamed("r", "alice", "Alice", "laptop", 7, OutcomeThrottled)
		se.startNamed("r", "bob", "", "b1", 1, OutcomeStarted)
		se.stopReason("r", "alice", "", 0, protocol.ReasonStopped, OutcomeStopped)
		if got := se.snapshotOf("r"); !slices.Equal(got, []string{"bob/"}) {
			t.Fatalf("snapshot %v", got)
		}
		s.Expect(protocol.TypeTypingStart, "r", "alice", "", waitLong)
		s.Expect(protocol.TypeTypingStart, "r", "bob", "", waitLong)
		s.Expect(protocol.TypeTypingStop, "r", "alice", protocol.ReasonStopped, waitLong)
		// Both of alice's entries went: nothing expires for her later.
		se.advance(stTTL + stMargin)
		if r := se.sweep(); r.Stops != 1 {
			t.Fatalf("sweep %+v, want bob's stop only", r)
		}
		s.Expect(protocol.TypeTypingStop, "r", "bob", protocol.ReasonExpired, waitLong)
		s.ExpectNone(100 * time.Millisecond)
	})
}

func TestContractDisconnect(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r1", "r2", "r3")
		se.startNamed("r1", "u", "", "c", 1, OutcomeStarted)
		se.startNamed("r2", "u", "", "c", 2, OutcomeStarted)
		se.startNamed("r2", "u", "", "other", 1, OutcomeThrottled) // another device in r2
		outs, err := se.st.Disconnect(context.Background(), protocol.Command{V: 1, Op: "disconnect", Rooms: []string{"r1", "r2", "r3"}, User: "u", Conn: "c", Seq: 3})
		if err != nil || !slices.Equal(outs, []Outcome{OutcomeStopped, OutcomeNoop, OutcomeNoop}) {
			t.Fatalf("disconnect: %v, %v", outs, err)
		}
		s.Expect(protocol.TypeTypingStart, "r1", "u", "", waitLong)
		s.Expect(protocol.TypeTypingStart, "r2", "u", "", waitLong)
		s.Expect(protocol.TypeTypingStop, "r1", "u", protocol.ReasonDisconnected, waitLong)
		s.ExpectNone(100 * time.Millisecond)
		if got := se.snapshotOf("r2"); !slices.Equal(got, []string{"u/"}) {
			t.Fatalf("r2 with the other device typing: %v", got)
		}
		// A start from before the disconnect, arriving late, stays ignored.
		se.startNamed("r1", "u", "", "c", 2, OutcomeStale)
		if got := se.snapshotOf("r1"); len(got) != 0 {
			t.Fatalf("r1 after a stale start: %v", got)
		}
	})
}

func TestContractStaleSeq(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("a", "b")
		// start seq 2, then a late stop seq 1: still typing.
		se.startNamed("a", "u", "", "c", 2, OutcomeStarted)
		se.stopReason("a", "u", "c", 1, protocol.ReasonStopped, OutcomeStale)
		if got := se.snapshotOf("a"); !slices.Equal(got, []string{"u/"}) {
			t.Fatalf("a after a stale stop: %v", got)
		}
		// stop seq 2, then a late start seq 1: not typing.
		se.stopReason("b", "u", "c", 2, protocol.ReasonStopped, OutcomeNoop)
		se.startNamed("b", "u", "", "c", 1, OutcomeStale)
		if got := se.snapshotOf("b"); len(got) != 0 {
			t.Fatalf("b after a stale start: %v", got)
		}
		s.Expect(protocol.TypeTypingStart, "a", "u", "", waitLong)
		s.ExpectNone(100 * time.Millisecond)

		// Exact beyond a double's 2^53; 0 is unordered; seq is per connection.
		const p53 = uint64(1) << 53
		se.startNamed("x", "u", "", "c", p53, OutcomeStarted)
		se.stopReason("x", "u", "c", p53+1, protocol.ReasonStopped, OutcomeStopped)
		se.startNamed("x", "u", "", "c", p53+1, OutcomeStale)
		se.startNamed("x", "u", "", "c", ^uint64(0), OutcomeStarted)
		se.stopReason("x", "u", "c", ^uint64(0)-1, protocol.ReasonStopped, OutcomeStale)
		se.startNamed("x", "u", "", "c", 0, OutcomeThrottled)
		se.stopReason("x", "u", "other", 1, protocol.ReasonStopped, OutcomeNoop)
		se.stopReason("x", "u", "", 1, protocol.ReasonStopped, OutcomeStopped)
	})
}

// Every expired typist is pushed once, whatever the number of concurrent
// sweepers, and leaves nothing behind.
func TestContractExpiryPushedOnce(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r1", "r2")
		se.startNamed("r1", "alice", "Alice", "a", 1, OutcomeStarted)
		se.startNamed("r1", "bob", "", "b1", 1, OutcomeStarted)
		se.startNamed("r1", "bob", "", "b2", 1, OutcomeThrottled)
		se.startNamed("r1", "carol", "", "c", 1, OutcomeStarted)
		se.startNamed("r2", "dave", "", "d", 1, OutcomeStarted)
		for range 4 {
			s.Next(waitLong)
		}
		if r := se.sweep(); r.Stops != 0 {
			t.Fatalf("sweep before any ttl: %+v", r)
		}
		se.advance(stTTL + stMargin)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var stops int
		for range 4 {
			wg.Go(func() {
				r, err := se.st.Sweep(context.Background())
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				stops += r.Stops
				mu.Unlock()
			})
		}
		wg.Wait()
		if stops != 4 {
			t.Fatalf("4 parallel sweeps: %d stops, want 4", stops)
		}
		got := map[string]int{}
		for range 4 {
			r, ok := s.Next(waitLong)
			if !ok || r.Ev.Type != protocol.TypeTypingStop || r.Ev.Reason != protocol.ReasonExpired {
				t.Fatalf("event %s", r.Raw)
			}
			got[r.Ev.Room+"/"+r.Ev.User]++
		}
		s.ExpectNone(100 * time.Millisecond)
		for _, k := range []string{"r1/alice", "r1/bob", "r1/carol", "r2/dave"} {
			if got[k] != 1 {
				t.Fatalf("stops %v", got)
			}
		}
		if n := storetest.GatherSum(t, se.reg, "ellipsis_worker_expired_stops_total", nil); n != 4 {
			t.Fatalf("expired_stops_total %v", n)
		}
		if r := se.sweep(); r.Stops != 0 || r.Rooms != 0 {
			t.Fatalf("sweep after everything expired: %+v", r)
		}
		// Only the user hashes are left (seq and rate limit; they expire on
		// their own, ttl + grace + throttle after their last start).
		for _, k := range se.keys() {
			if !strings.HasPrefix(k, se.names.KeyPrefix()+"typing:user:") {
				t.Fatalf("key %q left after expiry (all: %q)", k, se.keys())
			}
		}
	})
}

// Expired but not yet swept: receivers still show the user. A start on
// another connection makes the user visible again (published, no stop
// later); a stop publishes the one stop and the sweeper finds nothing.
func TestContractUnsweptExpiry(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r", "q")
		se.startNamed("r", "u", "", "phone", 0, OutcomeStarted)
		se.startNamed("q", "u", "", "c", 1, OutcomeStarted)
		se.advance(stTTL + stMargin)
		if got := se.snapshotOf("r"); len(got) != 0 {
			t.Fatalf("snapshot after expiry: %v", got)
		}
		se.startNamed("r", "u", "", "laptop", 0, OutcomeRefreshed) // still shown: a refresh
		se.stopReason("q", "u", "c", 2, protocol.ReasonStopped, OutcomeStopped)
		if r := se.sweep(); r.Stops != 0 {
			t.Fatalf("sweep %+v, want no stop", r)
		}
		if got := se.snapshotOf("r"); !slices.Equal(got, []string{"u/"}) {
			t.Fatalf("snapshot %v", got)
		}
		got := map[string]int{}
		for range 4 {
			r, ok := s.Next(waitLong)
			if !ok {
				t.Fatalf("events %v", got)
			}
			got[r.Ev.Room+"/"+r.Ev.Type+"/"+r.Ev.Reason]++
		}
		if got["r/typing_start/"] != 2 || got["q/typing_start/"] != 1 || got["q/typing_stop/stopped"] != 1 {
			t.Fatalf("events %v", got)
		}
		s.ExpectNone(100 * time.Millisecond)
	})
}

func TestContractSnapshotNames(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		se.startNamed("r", "carol", "Carol", "c", 1, OutcomeStarted)
		se.advance(stTTL / 2)
		se.startNamed("r", "bob", "", "b", 1, OutcomeStarted)
		se.startNamed("r", "alice", "Alice", "a1", 1, OutcomeStarted)
		se.startNamed("r", "alice", "Alice", "a2", 1, OutcomeThrottled)
		se.startNamed("other", "dan", "Dan", "d", 1, OutcomeStarted)
		se.advance(stTTL/2 + stMargin) // carol expired, unswept
		if got := se.snapshotOf("r"); !slices.Equal(got, []string{"alice/Alice", "bob/"}) {
			t.Fatalf("snapshot %v, want alice/Alice and bob/ (sorted, carol expired)", got)
		}
		// A name change on a refresh is what the next snapshot shows.
		se.startNamed("r", "bob", "Bobby", "b", 2, OutcomeRefreshed, OutcomeThrottled)
		if got := se.snapshotOf("r"); !slices.Equal(got, []string{"alice/Alice", "bob/Bobby"}) {
			t.Fatalf("snapshot %v after bob's rename", got)
		}
		// A nameless start (a platform service's own connection) keeps the
		// name another connection of the user gave.
		se.startNamed("r", "alice", "", "bot", 1, OutcomeThrottled, OutcomeRefreshed)
		if got := se.snapshotOf("r"); !slices.Equal(got, []string{"alice/Alice", "bob/Bobby"}) {
			t.Fatalf("snapshot %v after a nameless start of alice", got)
		}
		if got := se.snapshotOf("empty"); len(got) != 0 {
			t.Fatalf("empty room: %v", got)
		}
	})
}

// protocolIDs are docs/protocol.md's example ids ("Terms and ids") and look-alikes of
// them after encoding, tag parsing or glob matching.
var protocolIDs = []string{"42", "room:42", "!abc:matrix.org", "a*b?c[d]", "{x}", "café ☕", "a b",
	"x", "a%20b", "a%2520b", "room%3A42", "%7Bx%7D", "a\\b", `q"uote`, "*", "?", "[", "]", "\\",
	"axbxcd", "ab?cd", "a*b?c[d]x", "a*", "4", "42*", "{", "}", "a]b[c"}

// Any id works end to end, distinct ids never share a key, and no room's
// listing sees another room's typists: above all, glob characters in a
// room can never widen store keys's SCAN MATCH.
func TestContractIDs(t *testing.T) {
	const ttl = 2 * time.Second // 28 rooms of checks must fit in it on Redis
	forEachKindTTL(t, ttl, func(t *testing.T, se *storeEnv) {
		s := se.subscribe(protocolIDs...)
		for i, id := range protocolIDs {
			// In room id, the typist is user id, named "N id", from connection "id:i".
			se.startNamed(id, id, "N "+id, fmt.Sprintf("%s:%d", id, i), 1, OutcomeStarted)
		}
		for range protocolIDs {
			r, ok := s.Next(waitLong)
			if !ok || r.Ev.Type != protocol.TypeTypingStart || r.Ev.User != r.Ev.Room || r.Ev.Name != "N "+r.Ev.Room {
				t.Fatalf("start event %s", r.Raw)
			}
		}
		for _, id := range protocolIDs {
			if got := se.snapshotOf(id); !slices.Equal(got, []string{id + "/N " + id}) {
				t.Fatalf("snapshot of %q: %v", id, got)
			}
		}
		if ks, ok := se.st.(*redisStore).lay.(*keysLayout); ok {
			// Many SCAN round trips over the whole (shared) keyspace on
			// Redis: the cursor loop, with a glob room.
			ks.scanCount = 3
			if got := se.snapshotOf("a*b?c[d]"); !slices.Equal(got, []string{"a*b?c[d]/N a*b?c[d]"}) {
				t.Fatalf("snapshot with COUNT 3: %v", got)
			}
			ks.scanCount = DefaultScanCount
		}
		// Every key but the sweep buckets carries exactly one room's hash tag.
		for _, k := range se.keys() {
			if strings.HasPrefix(k, se.names.KeyPrefix()+"typing:sweep:{") {
				continue
			}
			i, j := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
			if i < 0 || j < i || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
				t.Fatalf("key %q has no single hash tag", k)
			}
			if room, err := names.Dec(k[i+1 : j]); err != nil || !slices.Contains(protocolIDs, room) {
				t.Fatalf("key %q: hash tag %q, %v", k, room, err)
			}
		}
		if se.kind == config.StoreKeys {
			// The pattern itself, SCANned raw: each room's typist keys only.
			for _, id := range protocolIDs {
				got := scanAll(t, se.rdb, se.names.TypistPattern(id))
				if want := []string{se.names.TypistKey(id, id)}; !slices.Equal(got, want) {
					t.Fatalf("SCAN MATCH %q: %q, want %q", se.names.TypistPattern(id), got, want)
				}
			}
		}
		// Expiry, built in Lua from enc(user): byte for byte what Go builds.
		se.advance(ttl + stMargin)
		if r := se.sweep(); r.Stops != len(protocolIDs) {
			t.Fatalf("sweep %+v, want %d stops", r, len(protocolIDs))
		}
		for range protocolIDs {
			r, ok := s.Next(waitLong)
			if !ok {
				t.Fatal("missing expired stops")
			}
			want := string(stopEvent(r.Ev.Room, r.Ev.User, protocol.ReasonExpired)) + strconv.FormatInt(r.Ev.TsMs, 10) + "}"
			if r.Raw != want || r.Ev.User != r.Ev.Room {
				t.Fatalf("Lua built %s\n      Go builds %s", r.Raw, want)
			}
		}
		s.ExpectNone(100 * time.Millisecond)
	})
}

func scanAll(t *testing.T, rdb *redis.Client, pattern string) []string {
	t.Helper()
	var out []string
	iter := rdb.Scan(context.Background(), 0, pattern, 100).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// A key prefix with glob characters (ELLIPSIS_KEY_PREFIX is free text) is
// escaped in store keys's SCAN pattern: a store never lists the typists of
// a deployment whose prefix the raw pattern would match.
func TestContractGlobKeyPrefix(t *testing.T) {
	t.Parallel()
	for _, be := range storetest.Backends {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			requireServices(t)
			url, _ := storetest.RedisURLFor(t, be)
			opts, err := redis.ParseURL(url)
			if err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(opts)
			base := "t-" + testkit.RandHex(5) // every prefix below starts with it: cleanup stays ours
			t.Cleanup(func() { testkit.CleanupKeys(rdb, base); rdb.Close() })
			m, err := newMetrics(prometheus.NewRegistry(), false)
			if err != nil {
				t.Fatal(err)
			}
			// "[ab]*" unescaped would match the prefixes "a-x" and "b":
			prefixes := []string{base + "[ab]*:", base + "a-x:", base + "b:", base + "\\:"}
			stores := map[string]Store{}
			for _, p := range prefixes {
				st, err := New(Options{Kind: config.StoreKeys, PubSub: storetest.PubSub, Redis: rdb, Names: names.New(p, ""), TTL: stTTL, Throttle: stThrottle, Metrics: m, Log: zap.NewNop(), RateLog: testRateLog{zap.NewNop()}})
				if err != nil {
					t.Fatal(err)
				}
				stores[p] = st
				if _, err := st.Start(context.Background(), protocol.Command{V: 1, Op: "start", Room: "r", User: "u-" + p, Conn: "c"}); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range prefixes {
				snap, err := stores[p].Snapshot(context.Background(), "r", 10)
				users := snap.Users
				if err != nil || len(users) != 1 || users[0].User != "u-"+p {
					t.Fatalf("prefix %q: snapshot %v, %v; want only u-%s", p, users, err, p)
				}
			}
		})
	}
}

// A start whose script ran but whose reply was lost is retried and answers
// stale; the room must still be indexed, or its typist's expired stop would
// never be pushed (on Redis Cluster the sweep index lives outside the
// room's slot, so the worker indexes the room after the script).
func TestContractLostStartReplyStillIndexed(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		s := se.subscribe("r")
		cmd := protocol.Command{V: 1, Op: protocol.OpStart, Room: "r", User: "u", Conn: "c", Seq: 1, Name: "N"}
		// As on Redis Cluster, where the start script cannot touch the
		// bucket (elsewhere it indexes the room itself, atomically).
		st := se.st.(*redisStore)
		st.indexAfter = true
		c := st.commandCall(st.lua.start, st.startArgs(cmd))
		// The first try runs on the server; its reply is lost.
		if err := c.script.Run(ctx, se.rdb, c.keys, c.args...).Err(); err != nil {
			t.Fatal(err)
		}
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		// The retry is stale and changes nothing, but indexes the room.
		if out, err := se.st.Start(ctx, cmd); err != nil || out != OutcomeStale {
			t.Fatalf("retry: %q, %v; want stale", out, err)
		}
		se.advance(stTTL + stMargin)
		if r := se.sweep(); r.Stops != 1 {
			t.Fatalf("sweep after the expiry: %+v, want one stop", r)
		}
		s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonExpired, waitLong)
	})
}

// New builds the store of each kind and refuses any other (the worker's
// New names ELLIPSIS_STORE; see TestContractStoreSelection there).
func TestNewSelectsLayout(t *testing.T) {
	m, _ := newMetrics(prometheus.NewRegistry(), false)
	if _, err := New(Options{Kind: "", PubSub: storetest.PubSub, Names: names.New("", ""), TTL: time.Second, Throttle: 0, Metrics: m, Log: zap.NewNop()}); !errors.Is(err, ErrUnknownStore) {
		t.Fatalf("New(\"\"): %v, want ErrUnknownStore", err)
	}
	st, err := New(Options{Kind: config.StoreKeys, PubSub: storetest.PubSub, Names: names.New("", ""), TTL: time.Second, Throttle: 0, Metrics: m, Log: zap.NewNop()})
	if err != nil {
		t.Fatalf("New(keys): %v", err)
	}
	if _, ok := st.(*redisStore).lay.(*keysLayout); !ok {
		t.Fatalf("New(keys): %T, %v", st, err)
	}
}
