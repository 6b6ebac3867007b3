package store

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The contract suite, continued: a user's state in a room is bounded by
// their live connections (scripts/lib.lua's header), on both stores and
// both backends.

// userHash reads the user hash of user in room whole.
func (se *storeEnv) userHash(room, user string) map[string]string {
	se.t.Helper()
	h, err := se.rdb.HGetAll(context.Background(), userKeyPrefix(se.names, room)+names.Enc(user)).Result()
	if err != nil {
		se.t.Fatal(err)
	}
	return h
}

// connFields lists the fields of hash h that belong to conn (c:, q:, s:).
func connFields(h map[string]string, conn string) []string {
	var out []string
	for _, p := range []string{"c:", "q:", "s:"} {
		if _, ok := h[p+conn]; ok {
			out = append(out, p+conn)
		}
	}
	return out
}

// A disconnect takes the connection's entry and seq record out of the user
// hash in every room it names and leaves a tombstone there; a start or
// stop of it delayed past the disconnect (another worker of the queue
// group applying it late) is stale: no ghost entry, no record written
// back, nothing published. Through Disconnect and through Apply (the
// worker's batched path).
func TestContractDisconnectRemovesConnRecords(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		se.startNamed("r", "u", "", "c", 1, OutcomeStarted)
		se.stopReason("r", "u", "c", 2, protocol.ReasonStopped, OutcomeStopped)
		se.startNamed("r2", "u", "", "c", 3, OutcomeStarted)
		if f := connFields(se.userHash("r", "u"), "c"); len(f) != 1 || f[0] != "q:c" {
			t.Fatalf("r before the disconnect: conn fields %v, want its seq record q:c", f)
		}
		if q := se.userHash("r2", "u")["q:c"]; !strings.HasPrefix(q, "3 ") {
			t.Fatalf("seq record %q, want \"3 <unix ms>\"", q)
		}
		s := se.subscribe("r", "r2")
		if _, err := se.st.Disconnect(ctx, disconnect("u", "c", 4, "r", "r2")); err != nil {
			t.Fatal(err)
		}
		s.expect(protocol.TypeTypingStop, "r2", "u", protocol.ReasonDisconnected, waitLong)
		for _, room := range []string{"r", "r2"} {
			if f := connFields(se.userHash(room, "u"), "c"); len(f) != 0 {
				t.Fatalf("%s after the disconnect: conn fields %v left", room, f)
			}
			sc, err := se.rdb.ZScore(ctx, GoneKey(se.names, room), "c").Result()
			if err != nil || int64(sc) <= se.redisNowMs() {
				t.Fatalf("%s: tombstone %v, %v; want one ending after now", room, sc, err)
			}
			if seq, err := se.rdb.HGet(ctx, GoneSeqKey(se.names, room), "c").Result(); err != nil || seq != "4" {
				t.Fatalf("%s: tombstone seq %q, %v; want the disconnect's 4", room, seq, err)
			}
		}
		// Delayed commands of the gone connection, each alone and batched.
		se.startNamed("r", "u", "", "c", 3, OutcomeStale)
		se.stopReason("r2", "u", "c", 2, protocol.ReasonStopped, OutcomeStale)
		outs, errs := se.st.Apply(ctx, []protocol.Command{start("r", "u", "", "c", 2), stop("r2", "u", "c", 1)})
		for i := range outs {
			if errs[i] != nil || outs[i] != OutcomeStale {
				t.Fatalf("batched delayed command %d: %q, %v; want stale", i, outs[i], errs[i])
			}
		}
		for _, room := range []string{"r", "r2"} {
			if f := connFields(se.userHash(room, "u"), "c"); len(f) != 0 {
				t.Fatalf("%s after the delayed commands: conn fields %v written back", room, f)
			}
			if got := se.snapshotOf(room); len(got) != 0 {
				t.Fatalf("%s after a delayed start: %v, want nobody (a ghost)", room, got)
			}
		}
		s.expectNone(100 * time.Millisecond)
		// Another connection of the user is unaffected.
		se.startNamed("r", "u", "", "d", 1, OutcomeStarted)
	})
}

// A leave takes the connection's records out of the room's user hash and
// leaves its tombstone with the leave's seq: a delayed command from before
// the leave is stale, and the connection's commands after a rejoin (higher
// seq) apply.
func TestContractLeaveRemovesConnRecords(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		se.startNamed("r", "u", "", "c", 1, OutcomeStarted)
		se.stopReason("r", "u", "c", 2, protocol.ReasonLeft, OutcomeStopped)
		if f := connFields(se.userHash("r", "u"), "c"); len(f) != 0 {
			t.Fatalf("after the leave: conn fields %v left", f)
		}
		se.startNamed("r", "u", "", "c", 1, OutcomeStale)
		se.stopReason("r", "u", "c", 2, protocol.ReasonStopped, OutcomeStale)
		if f := connFields(se.userHash("r", "u"), "c"); len(f) != 0 {
			t.Fatalf("after delayed commands: conn fields %v written back", f)
		}
		// Rejoined: its next commands apply and are ordered again.
		se.advance(se.throttle)
		se.startNamed("r", "u", "", "c", 3, OutcomeStarted)
		se.startNamed("r", "u", "", "c", 3, OutcomeStale)
		if got := se.snapshotOf("r"); len(got) != 1 {
			t.Fatalf("after the rejoin's start: %v, want u", got)
		}
	})
}

// The seq record of a connection that vanished without a disconnect (a
// killed gateway) goes keypx after its last write, at the user's next stop
// or sweep; so does an older worker's s:<conn> once its connection's entry
// is gone. Records younger than keypx stay: they still order their
// connection's commands.
func TestContractVanishedConnRecordsPruned(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		key := userKeyPrefix(se.names, "r") + names.Enc("u")
		keyPx := (stTTL + DefaultKeyGrace + stThrottle).Milliseconds()
		old := func() {
			t.Helper()
			now := se.redisNowMs()
			// A record last written keypx ago, one just younger, and an
			// older worker's record of a connection without an entry.
			if err := se.rdb.HSet(ctx, key, "q:old", "5 "+strconv.FormatInt(now-keyPx-1, 10),
				"q:young", "5 "+strconv.FormatInt(now-keyPx+60_000, 10), "s:legacy", "9").Err(); err != nil {
				t.Fatal(err)
			}
		}
		want := func(what string) {
			t.Helper()
			h := se.userHash("r", "u")
			for _, f := range []string{"q:old", "s:legacy"} {
				if _, ok := h[f]; ok {
					t.Fatalf("%s: spent record %s left: %v", what, f, h)
				}
			}
			if _, ok := h["q:young"]; !ok {
				t.Fatalf("%s: a record younger than keypx was deleted: %v", what, h)
			}
		}
		// At a stop of another connection of the user.
		se.startNamed("r", "u", "", "a", 1, OutcomeStarted)
		old()
		se.stopReason("r", "u", "a", 2, protocol.ReasonStopped, OutcomeStopped)
		want("after a stop")
		// At the sweep that removes the user.
		if err := se.rdb.HDel(ctx, key, "q:young").Err(); err != nil {
			t.Fatal(err)
		}
		se.startNamed("r", "u", "", "a", 3, OutcomeStarted)
		old()
		se.advance(stTTL + 100*time.Millisecond)
		if r := se.sweep(); r.Stops != 1 {
			t.Fatalf("sweep past the ttl: %+v, want one stop", r)
		}
		want("after the sweep")
		if _, ok := se.userHash("r", "u")["c:a"]; ok {
			t.Fatalf("the sweep left the expired entry c:a")
		}
		// The young record still orders its connection.
		se.startNamed("r", "u", "", "young", 5, OutcomeStale)
		if se.mr != nil {
			// The whole way on miniredis's clock: written, keypx passes,
			// pruned by the next stop.
			se.startNamed("r", "u", "", "v", 1, OutcomeStarted)
			se.advance(time.Duration(keyPx+1) * time.Millisecond)
			se.startNamed("r", "u", "", "a", 4, OutcomeStarted)
			se.stopReason("r", "u", "a", 5, protocol.ReasonStopped, OutcomeStopped)
			if f := connFields(se.userHash("r", "u"), "v"); len(f) != 0 {
				t.Fatalf("vanished connection's fields %v left keypx after its last write", f)
			}
		}
	})
}

// churnBound is the most fields the user hash of a user with at most one
// live connection may hold: p, w, g, x, n, e, z, i, and that connection's
// c: and q:.
const churnBound = 10

// A user whose connections come and go (each starts and/or stops, then
// disconnects or leaves) keeps a bounded user hash, and a stop of theirs costs the
// same Redis time after 2,000 such connections as after 100: the stop
// script's usec per call from INFO commandstats on a private redis-server
// (nothing else calls it), late against early in the churn. On miniredis
// (no INFO) the hash's bound only.
func TestContractChurnedUserBounded(t *testing.T) {
	t.Parallel()
	p := startPrivateRedis(t)
	for _, kind := range storeKinds {
		t.Run(kind+"/redis", func(t *testing.T) {
			m, _ := newMetrics(prometheus.NewRegistry(), false)
			n := names.New("churn-"+kind+":", "")
			st, err := New(Options{Kind: kind, PubSub: testPubSub, Redis: p.rdb, Names: n, TTL: stTTL, Throttle: stThrottle, Metrics: m, Log: zap.NewNop(), RateLog: testRateLog{zap.NewNop()}})
			if err != nil {
				t.Fatal(err)
			}
			stops := churn(t, st, p.rdb, p, userKeyPrefix(n, "r")+names.Enc("u"))
			early, late := stops[0], stops[1]
			if late > 3*early+20 {
				t.Fatalf("stop script: %.1f µs per call after 2,000 connections against %.1f after 100; want flat (at most 3x + 20 µs)", late, early)
			}
			t.Logf("stop script: %.1f µs per call early, %.1f late", early, late)
		})
		t.Run(kind+"/miniredis", func(t *testing.T) {
			se := newStoreEnvKind(t, backend{name: "miniredis", mini: true, pubsub: testPubSub}, kind)
			churn(t, se.st, se.rdb, nil, userKeyPrefix(se.names, "r")+names.Enc("u"))
		})
	}
}

// churn runs 2,000 connections of user u through room r of st (even ones
// start and stop, odd ones only stop, then each disconnects, or every
// third leaves the room and closes without a disconnect), checking
// the user hash (key, read through rdb) stays within churnBound fields.
// With p (whose client rdb then is), it returns
// the mean Redis time (µs) of the stop script over the stops of
// connections 100 to 299 and 1,800 to 1,999, from INFO commandstats
// around each stop.
func churn(t *testing.T, st Store, rdb *redis.Client, p *privateRedis, key string) [2]float64 {
	ctx := context.Background()
	var usec, calls [2]int64
	for i := range 2000 {
		c := churnCmds("r", "u", "gw:"+strconv.Itoa(i), i%2 == 0)
		if i%3 == 2 { // leaves the room instead, then closes: no disconnect
			c[len(c)-1] = stop("r", "u", "gw:"+strconv.Itoa(i), 3)
		}
		for _, cmd := range c[:len(c)-2] {
			if _, err := st.Start(ctx, cmd); err != nil {
				t.Fatal(err)
			}
		}
		window := -1
		switch {
		case i >= 100 && i < 300:
			window = 0
		case i >= 1800:
			window = 1
		}
		var before map[string]cmdStat
		if p != nil && window >= 0 {
			before = p.cmdStats(t)
		}
		if _, err := st.Stop(ctx, c[len(c)-2], protocol.ReasonStopped); err != nil {
			t.Fatal(err)
		}
		if before != nil {
			after := p.cmdStats(t)
			usec[window] += after["evalsha"].usec - before["evalsha"].usec
			calls[window] += after["evalsha"].calls - before["evalsha"].calls
		}
		var err error
		if last := c[len(c)-1]; last.Op == protocol.OpDisconnect {
			_, err = st.Disconnect(ctx, last)
		} else {
			_, err = st.Stop(ctx, last, protocol.ReasonLeft)
		}
		if err != nil {
			t.Fatal(err)
		}
		n, err := rdb.HLen(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > churnBound {
			t.Fatalf("after %d connections the user hash holds %d fields, want at most %d", i+1, n, churnBound)
		}
	}
	var out [2]float64
	for w := range out {
		if p != nil && calls[w] != 200 {
			t.Fatalf("window %d: %d EVALSHA calls for 200 stops", w, calls[w])
		}
		if calls[w] > 0 {
			out[w] = float64(usec[w]) / float64(calls[w])
		}
	}
	return out
}

// A room's tombstones are bounded: each leave or disconnect drops ended
// ones (from both keys), and past 10,000 (GONE_MAX in scripts/lib.lua)
// those that end first. The cap on Redis 7 only (10,000 calls).
func TestContractTombstonesBounded(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		ends, seqs := GoneKey(se.names, "r"), GoneSeqKey(se.names, "r")
		if err := se.rdb.ZAdd(ctx, ends, redis.Z{Score: float64(se.redisNowMs() - 1), Member: "ended"}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := se.rdb.HSet(ctx, seqs, "ended", "5").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := se.st.Disconnect(ctx, disconnect("u", "first", 2, "r")); err != nil {
			t.Fatal(err)
		}
		tomb := func(conn string) bool {
			t.Helper()
			_, zerr := se.rdb.ZScore(ctx, ends, conn).Result()
			_, herr := se.rdb.HGet(ctx, seqs, conn).Result()
			if (zerr == nil) != (herr == nil) {
				t.Fatalf("tombstone %s half kept: end %v, seq %v", conn, zerr, herr)
			}
			return zerr == nil
		}
		if tomb("ended") || !tomb("first") {
			t.Fatalf("after a disconnect: ended tombstone kept %v, new one kept %v; want false, true", tomb("ended"), tomb("first"))
		}
		if se.mr != nil || se.kind != storeKinds[0] || se.pubsub != testPubSub {
			return
		}
		var cmds []protocol.Command
		for i := range 10000 {
			cmds = append(cmds, disconnect("u", "k"+strconv.Itoa(i), 1, "r"))
			if len(cmds) == 256 || i == 9999 {
				for _, err := range second(se.st.Apply(ctx, cmds)) {
					if err != nil {
						t.Fatal(err)
					}
				}
				cmds = cmds[:0]
			}
		}
		n, err := se.rdb.ZCard(ctx, ends).Result()
		if err != nil || n != 10000 {
			t.Fatalf("tombstones after 10,001 disconnects: %d, %v; want 10,000", n, err)
		}
		if tomb("first") || !tomb("k0") || !tomb("k9999") {
			t.Fatalf("the cap dropped the wrong tombstone: first %v, k0 %v, k9999 %v", tomb("first"), tomb("k0"), tomb("k9999"))
		}
	})
}
