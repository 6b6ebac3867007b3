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

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The contract suite, continued: a user's state in a room is bounded by
// their live connections (scripts/lib.lua's header), on both stores and
// both backends.

// userHash reads the user hash of user in room whole.
func (se *storeEnv) userHash(room, user string) map[string]string {
	se.t.Helper()
	h, err := se.rdb.HGetAll(context.Background(), se.names.UserKey(room, user)).Result()
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
		s.Expect(protocol.TypeTypingStop, "r2", "u", protocol.ReasonDisconnected, waitLong)
		for _, room := range []string{"r", "r2"} {
			if f := connFields(se.userHash(room, "u"), "c"); len(f) != 0 {
				t.Fatalf("%s after the disconnect: conn fields %v left", room, f)
			}
			// c had a record in both rooms (a seq record in r, an entry
			// in r2): a typist's tombstone, none among the readers'.
			sc, err := se.rdb.ZScore(ctx, se.names.GoneTypedKey(room), "c").Result()
			if err != nil || int64(sc) <= se.redisNowMs() {
				t.Fatalf("%s: typist's tombstone %v, %v; want one ending after now", room, sc, err)
			}
			if seq, err := se.rdb.HGet(ctx, se.names.GoneTypedSeqKey(room), "c").Result(); err != nil || seq != "4" {
				t.Fatalf("%s: tombstone seq %q, %v; want the disconnect's 4", room, seq, err)
			}
			if n, err := se.rdb.Exists(ctx, se.names.GoneKey(room), se.names.GoneSeqKey(room)).Result(); err != nil || n != 0 {
				t.Fatalf("%s: %d readers' tombstone keys, %v; want none", room, n, err)
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
		s.ExpectNone(100 * time.Millisecond)
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
		key := se.names.UserKey("r", "u")
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
	for _, kind := range storetest.Kinds {
		t.Run(kind+"/redis", func(t *testing.T) {
			m, _ := newMetrics(prometheus.NewRegistry(), false)
			n := names.New("churn-"+kind+":", "")
			st, err := New(Options{Kind: kind, PubSub: storetest.PubSub, Redis: p.rdb, Names: n, TTL: stTTL, Throttle: stThrottle, Metrics: m, Log: zap.NewNop(), RateLog: testRateLog{zap.NewNop()}})
			if err != nil {
				t.Fatal(err)
			}
			stops := churn(t, st, p.rdb, p, n.UserKey("r", "u"))
			early, late := stops[0], stops[1]
			if late > 3*early+20 {
				t.Fatalf("stop script: %.1f µs per call after 2,000 connections against %.1f after 100; want flat (at most 3x + 20 µs)", late, early)
			}
			t.Logf("stop script: %.1f µs per call early, %.1f late", early, late)
		})
		t.Run(kind+"/miniredis", func(t *testing.T) {
			se := newStoreEnvKind(t, storetest.Backend{Name: "miniredis", Mini: true, PubSub: storetest.PubSub}, kind)
			churn(t, se.st, se.rdb, nil, se.names.UserKey("r", "u"))
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
// ones of its class (from both keys), and past 10,000 (GONE_MAX in
// scripts/lib.lua) those of its class that end first. Here the readers'
// class (disconnects of connections that never commanded in the room);
// TestContractTypistTombstoneOutlivesReaders has the typists'. The cap on
// Redis 7 only (10,000 calls).
func TestContractTombstonesBounded(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		ends, seqs := se.names.GoneKey("r"), se.names.GoneSeqKey("r")
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
		if se.mr != nil || se.kind != storetest.Kinds[0] || se.pubsub != storetest.PubSub {
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

// tombClass is one class of a room's tombstones: its ends zset and its
// seq hash (scripts/lib.lua's header).
type tombClass struct {
	se         *storeEnv
	ends, seqs string
}

// has reports whether conn has a tombstone in the class, failing the
// test when only one of the two keys holds it.
func (c tombClass) has(conn string) bool {
	c.se.t.Helper()
	ctx := context.Background()
	_, zerr := c.se.rdb.ZScore(ctx, c.ends, conn).Result()
	_, herr := c.se.rdb.HGet(ctx, c.seqs, conn).Result()
	if (zerr == nil) != (herr == nil) {
		c.se.t.Fatalf("tombstone %s half kept in %s: end %v, seq %v", conn, c.ends, zerr, herr)
	}
	return zerr == nil
}

// count is how many tombstones the class holds, failing the test when
// its two keys disagree.
func (c tombClass) count() int64 {
	c.se.t.Helper()
	ctx := context.Background()
	z, zerr := c.se.rdb.ZCard(ctx, c.ends).Result()
	h, herr := c.se.rdb.HLen(ctx, c.seqs).Result()
	if zerr != nil || herr != nil || z != h {
		c.se.t.Fatalf("%s: %d ends (%v), %d seqs (%v)", c.ends, z, zerr, h, herr)
	}
	return z
}

// applyEach applies n commands, those cmdsOf(i) returns for i in [0, n), in
// batches of 256 (the worker's path), failing the test on any error.
func (se *storeEnv) applyEach(n int, cmdsOf func(i int) []protocol.Command) {
	se.t.Helper()
	var cmds []protocol.Command
	for i := range n {
		cmds = append(cmds, cmdsOf(i)...)
		if len(cmds) >= 256 || i == n-1 {
			for _, err := range se.applyAll(cmds) {
				if err != nil {
					se.t.Fatal(err)
				}
			}
			cmds = cmds[:0]
		}
	}
}

// A typist's tombstone (its connection had a record in the room at its
// leave or disconnect) is never pushed out by readers' (connections with
// none): 10,000 readers leaving fill their own class only, and the
// typist's start delayed past its disconnect stays stale. A reader's
// tombstone still makes its start delayed behind its leave stale (the
// leave arrived first). Each class is capped on its own: 10,000 typists
// leaving push out the earliest typist's tombstone and no reader's. The
// floods on Redis 7 only (10,000 and 20,000 calls).
func TestContractTypistTombstoneOutlivesReaders(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		typed := tombClass{se, se.names.GoneTypedKey("r"), se.names.GoneTypedSeqKey("r")}
		read := tombClass{se, se.names.GoneKey("r"), se.names.GoneSeqKey("r")}
		se.startNamed("r", "u", "", "t", 1, OutcomeStarted)
		if _, err := se.st.Disconnect(ctx, disconnect("u", "t", 2, "r")); err != nil {
			t.Fatal(err)
		}
		if out := se.apply(leave("r", "v", "early", 2)); out != OutcomeNoop {
			t.Fatalf("leave of a connection that never commanded: %q, want noop", out)
		}
		se.startNamed("r", "v", "", "early", 1, OutcomeStale)
		if !typed.has("t") || read.has("t") || !read.has("early") || typed.has("early") {
			t.Fatalf("classes: typist t typed %v read %v, reader early typed %v read %v; want t typed only, early read only",
				typed.has("t"), read.has("t"), typed.has("early"), read.has("early"))
		}
		if se.mr != nil || se.kind != storetest.Kinds[0] || se.pubsub != storetest.PubSub {
			se.startNamed("r", "u", "", "t", 1, OutcomeStale)
			return
		}
		se.applyEach(10000, func(i int) []protocol.Command {
			return []protocol.Command{leave("r", "v", "k"+strconv.Itoa(i), 1)}
		})
		if n := read.count(); n != 10000 || read.has("early") || !read.has("k9999") {
			t.Fatalf("readers' tombstones after 10,001 reader leaves: %d, early kept %v, k9999 kept %v; want 10,000, false, true", n, read.has("early"), read.has("k9999"))
		}
		if n := typed.count(); n != 1 || !typed.has("t") {
			t.Fatalf("typists' tombstones after the reader leaves: %d, t kept %v; want 1, true", n, typed.has("t"))
		}
		se.startNamed("r", "u", "", "t", 1, OutcomeStale)
		if got := se.snapshotOf("r"); len(got) != 0 {
			t.Fatalf("after the typist's delayed start: %v, want nobody (a ghost)", got)
		}
		// 10,000 typists: each starts, then leaves.
		se.applyEach(10000, func(i int) []protocol.Command {
			c := "w" + strconv.Itoa(i)
			return []protocol.Command{start("r", "x", "", c, 1), leave("r", "x", c, 2)}
		})
		if n := typed.count(); n != 10000 || typed.has("t") || !typed.has("w0") || !typed.has("w9999") {
			t.Fatalf("typists' tombstones after 10,001 typists left: %d, t kept %v, w0 %v, w9999 %v; want 10,000, false, true, true",
				n, typed.has("t"), typed.has("w0"), typed.has("w9999"))
		}
		if n := read.count(); n != 10000 || !read.has("k0") {
			t.Fatalf("readers' tombstones after the typists left: %d, k0 kept %v; want 10,000, true", n, read.has("k0"))
		}
	})
}

// A worker with a shorter ttl (a rollout of ELLIPSIS_TYPING_TTL) never
// shortens the life of a room's tombstone keys below what a longer-ttl
// worker's tombstones need: each bury only moves the keys' expiry later
// (scripts/lib.lua, outlive), and gives keys it creates one.
func TestContractTombstoneKeysNeverShortened(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		const longTTL = 30 * time.Second
		long, err := New(Options{Kind: se.kind, PubSub: se.pubsub, Redis: se.rdb, Names: se.names, TTL: longTTL, Throttle: stThrottle})
		if err != nil {
			t.Fatal(err)
		}
		shortPx := (stTTL + DefaultKeyGrace + stThrottle).Milliseconds()
		longPx := (longTTL + DefaultKeyGrace + stThrottle).Milliseconds()
		keys := []string{se.names.GoneKey("r"), se.names.GoneSeqKey("r"), se.names.GoneTypedKey("r"), se.names.GoneTypedSeqKey("r")}
		// Leaves of a reader and of a typist through st; px bounds the
		// keys' PTTL after them.
		buried := func(st Store, n int, px func(ms int64) bool, what string) {
			t.Helper()
			rc, tc := "reader"+strconv.Itoa(n), "typist"+strconv.Itoa(n)
			if out, err := st.Stop(ctx, leave("r", "v", rc, 1), protocol.ReasonLeft); err != nil || out != OutcomeNoop {
				t.Fatalf("%s: reader's leave %q, %v", what, out, err)
			}
			se.startWith(st, "r", "u"+strconv.Itoa(n), tc, 1, OutcomeStarted)
			if out, err := st.Stop(ctx, leave("r", "u"+strconv.Itoa(n), tc, 2), protocol.ReasonLeft); err != nil || out != OutcomeStopped {
				t.Fatalf("%s: typist's leave %q, %v", what, out, err)
			}
			for _, k := range keys {
				if ms, err := se.rdb.PTTL(ctx, k).Result(); err != nil || !px(ms.Milliseconds()) {
					t.Fatalf("%s: %s PTTL %v, %v", what, k, ms, err)
				}
			}
		}
		buried(se.st, 0, func(ms int64) bool { return ms > 0 && ms <= shortPx }, "short-ttl worker, new keys")
		buried(long, 1, func(ms int64) bool { return ms > shortPx && ms <= longPx }, "long-ttl worker")
		buried(se.st, 2, func(ms int64) bool { return ms > (shortPx+longPx)/2 }, "short-ttl worker after the long one")
	})
}
