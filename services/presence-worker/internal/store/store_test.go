package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// The script suite, without NATS: the store's scripts called directly, time
// stepped with miniredis.SetTime on miniredis (exact, frozen between steps)
// and with sleeps on Redis. No sweeper runs unless a test calls sweep, so
// "expired but not yet swept" states are reachable on both.

const (
	stTTL      = time.Second // long enough that a loaded machine does not expire live entries between two steps
	stThrottle = 150 * time.Millisecond
	stMargin   = 30 * time.Millisecond
)

type storeEnv struct {
	t      *testing.T
	kind   string // config.StoreZSet or config.StoreKeys
	pubsub string
	st     Store
	rdb    *redis.Client
	mr     *miniredis.Miniredis
	now    time.Time // miniredis: the frozen clock
	reg    *prometheus.Registry
	names  names.Names
	// throttle is the store's (stThrottle, or forEachKindTiming's).
	throttle time.Duration
}

// newStoreEnv builds a zset store (the script suite below is about its
// scripts); the contract suite uses newStoreEnvKind for both stores.
func newStoreEnv(t *testing.T, be storetest.Backend) *storeEnv {
	t.Helper()
	return newStoreEnvKind(t, be, config.StoreZSet)
}

func newStoreEnvKind(t *testing.T, be storetest.Backend, kind string) *storeEnv {
	t.Helper()
	return newStoreEnvTTL(t, be, kind, stTTL)
}

func newStoreEnvTTL(t *testing.T, be storetest.Backend, kind string, ttl time.Duration) *storeEnv {
	t.Helper()
	return newStoreEnvTiming(t, be, kind, ttl, stThrottle)
}

func newStoreEnvTiming(t *testing.T, be storetest.Backend, kind string, ttl, throttle time.Duration) *storeEnv {
	t.Helper()
	requireServices(t)
	url, mr := storetest.RedisURLFor(t, be)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, false)
	if err != nil {
		t.Fatal(err)
	}
	n := names.New("t-"+testkit.RandHex(5)+":", "")
	st, err := New(Options{Kind: kind, PubSub: be.PubSub, Redis: rdb, Names: n, TTL: ttl, Throttle: throttle, Metrics: m, Log: testkit.Logger(), RateLog: testRateLog{zap.NewNop()}})
	if err != nil {
		t.Fatal(err)
	}
	se := &storeEnv{t: t, kind: kind, pubsub: be.PubSub, st: st, rdb: rdb, mr: mr, reg: reg, names: n, throttle: throttle}
	if mr != nil {
		se.now = time.Now()
		mr.SetTime(se.now)
	}
	t.Cleanup(func() {
		if mr == nil {
			testkit.CleanupKeys(rdb, n.KeyPrefix())
		}
		rdb.Close()
	})
	return se
}

// advance moves Redis time forward by d.
func (se *storeEnv) advance(d time.Duration) {
	if se.mr != nil {
		se.now = se.now.Add(d)
		se.mr.SetTime(se.now)
		return
	}
	time.Sleep(d)
}

func (se *storeEnv) subscribe(rooms ...string) *storetest.Stream {
	return storetest.SubscribeRooms(se.t, se.rdb, se.names, se.pubsub, rooms...)
}

func (se *storeEnv) start(room, user, conn string, seq uint64, want Outcome) {
	se.t.Helper()
	se.startWith(se.st, room, user, conn, seq, want)
}

// startWith applies a start named "N" through st (another store on se's
// Redis) and wants outcome want.
func (se *storeEnv) startWith(st Store, room, user, conn string, seq uint64, want Outcome) {
	se.t.Helper()
	out, err := st.Start(context.Background(), protocol.Command{V: 1, Op: "start", Room: room, User: user, Conn: conn, Seq: seq, Name: "N"})
	if err != nil || out != want {
		se.t.Fatalf("start %s/%s/%s seq %d: %q, %v; want %q", room, user, conn, seq, out, err, want)
	}
}

func (se *storeEnv) stop(room, user, conn string, seq uint64, want Outcome) {
	se.t.Helper()
	out, err := se.st.Stop(context.Background(), protocol.Command{V: 1, Op: "stop", Room: room, User: user, Conn: conn, Seq: seq}, protocol.ReasonStopped)
	if err != nil || out != want {
		se.t.Fatalf("stop %s/%s/%s seq %d: %q, %v; want %q", room, user, conn, seq, out, err, want)
	}
}

func (se *storeEnv) sweep() SweepResult {
	se.t.Helper()
	r, err := se.st.Sweep(context.Background())
	if err != nil {
		se.t.Fatalf("sweep: %v", err)
	}
	return r
}

func (se *storeEnv) typing(room string) []string {
	se.t.Helper()
	snap, err := se.st.Snapshot(context.Background(), room, MaxSnapshotLimit)
	if err != nil {
		se.t.Fatalf("snapshot: %v", err)
	}
	out := []string{}
	for _, u := range snap.Users {
		out = append(out, u.User)
	}
	return out
}

func forEachStore(t *testing.T, f func(t *testing.T, se *storeEnv)) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) { f(t, newStoreEnv(t, be)) })
}

func TestScriptThrottleWindow(t *testing.T) {
	forEachStore(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.start("r", "u", "c", 0, OutcomeStarted)
		se.start("r", "u", "c", 0, OutcomeThrottled)
		se.advance(stThrottle + stMargin)
		se.start("r", "u", "c", 0, OutcomeRefreshed)
		se.start("r", "u", "c", 0, OutcomeThrottled)
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.ExpectNone(100 * time.Millisecond)
	})
}

func TestScriptStartAfterUnsweptExpiryDoesNotStop(t *testing.T) {
	forEachStore(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.start("r", "u", "phone", 0, OutcomeStarted)
		se.advance(stTTL + stMargin) // phone's entry expired, nobody swept
		if got := se.typing("r"); len(got) != 0 {
			t.Fatalf("typing after expiry: %v", got)
		}
		// Receivers still show u (no stop pushed): the start refreshes them.
		se.start("r", "u", "laptop", 0, OutcomeRefreshed)
		r := se.sweep()
		if r.Stops != 0 || r.Removed != 0 {
			t.Fatalf("sweep %+v, want nothing expired and no stop", r)
		}
		if got := se.typing("r"); !slices.Equal(got, []string{"u"}) {
			t.Fatalf("typing %v", got)
		}
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.ExpectNone(100 * time.Millisecond)
	})
}

func TestScriptStopOfUnsweptTypistStopsOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.start("r", "u", "c", 1, OutcomeStarted)
		se.advance(stTTL + stMargin)
		// Receivers still show u (no stop pushed yet): the stop is published,
		// and the sweeper finds nothing left to expire.
		se.stop("r", "u", "c", 2, OutcomeStopped)
		if r := se.sweep(); r.Stops != 0 || r.Removed != 0 {
			t.Fatalf("sweep after stop: %+v", r)
		}
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonStopped, waitLong)
		s.ExpectNone(100 * time.Millisecond)
	})
}

func TestScriptParallelSweepsPushEachExpiryOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r1", "r2")
		se.start("r1", "alice", "a", 0, OutcomeStarted)
		se.start("r1", "bob", "b1", 0, OutcomeStarted)
		se.start("r1", "bob", "b2", 0, OutcomeThrottled)
		se.start("r1", "carol", "c", 0, OutcomeStarted)
		se.start("r2", "dave", "d", 0, OutcomeStarted)
		for range 4 {
			s.Next(waitLong) // the starts
		}
		se.advance(stTTL + stMargin)
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := SweepResult{}
		for range 4 {
			wg.Go(func() {
				r, err := se.st.Sweep(context.Background())
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				total.Stops += r.Stops
				total.Removed += r.Removed
				mu.Unlock()
			})
		}
		wg.Wait()
		if total.Stops != 4 || total.Removed != 4 {
			t.Fatalf("4 parallel sweeps: %+v, want 4 stops and 4 users", total)
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
		// The expired typists are gone from their rooms, and marked hidden.
		if n := se.rdb.Exists(context.Background(), se.names.UsersKey("r1"), se.names.UsersKey("r2")).Val(); n != 0 {
			t.Fatalf("%d rooms left after expiry", n)
		}
		if p := se.rdb.HGet(context.Background(), se.names.UserKeyPrefix("r1")+"bob", "p").Val(); p != "0" {
			t.Fatalf("bob's published state %q after expiry, want 0", p)
		}
	})
}

func TestScriptSweepIndexFollowsEarliestEntry(t *testing.T) {
	forEachStore(t, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		room, member := "r", "u"
		idx := func() (float64, bool) {
			v, err := se.rdb.ZScore(ctx, se.names.SweepKey(names.SweepBucket(room)), names.Enc(room)).Result()
			return v, err == nil
		}
		se.start(room, "u", "c", 0, OutcomeStarted)
		first := se.rdb.ZScore(ctx, se.names.UsersKey(room), member).Val()
		v0, ok := idx()
		if !ok || v0 != first {
			t.Fatalf("index %v %v, want the entry's expiry %v", v0, ok, first)
		}
		se.advance(stTTL / 2)
		se.start(room, "u", "c", 0, OutcomeRefreshed)
		second := se.rdb.ZScore(ctx, se.names.UsersKey(room), member).Val()
		if v, _ := idx(); v != v0 || second <= first {
			t.Fatalf("index %v after refresh, want the earlier %v (entry now %v)", v, v0, second)
		}
		se.advance(stTTL/2 + stMargin) // past first, before second
		if r := se.sweep(); r.Rooms != 1 || r.Stops != 0 || r.Removed != 0 {
			t.Fatalf("early sweep %+v", r)
		}
		if v, _ := idx(); v != second {
			t.Fatalf("index %v, want rescheduled to %v", v, second)
		}
		se.advance(stTTL)
		if r := se.sweep(); r.Stops != 1 {
			t.Fatalf("sweep %+v", r)
		}
		if _, ok := idx(); ok {
			t.Fatal("empty room still in the sweep index")
		}
		if r := se.sweep(); r.Rooms != 0 {
			t.Fatalf("nothing due, swept %+v", r)
		}
	})
}

func TestScriptSeqBeyondFloatPrecision(t *testing.T) {
	forEachStore(t, func(t *testing.T, se *storeEnv) {
		const p53 = uint64(1) << 53 // 2^53 and 2^53+1 are one double
		se.start("r", "u", "c", p53, OutcomeStarted)
		se.stop("r", "u", "c", p53+1, OutcomeStopped)
		se.start("r", "u", "c", p53+1, OutcomeStale)
		se.start("r", "u", "c", p53, OutcomeStale)
		se.start("r", "u", "c", ^uint64(0), OutcomeStarted)
		se.stop("r", "u", "c", ^uint64(0)-1, OutcomeStale)
		se.start("r", "u", "c", 0, OutcomeThrottled) // seq 0 is unordered: always applied
		// seq is per connection: another connection's low seq applies.
		se.stop("r", "u", "other", 1, OutcomeNoop)
		// A stop without conn ignores seq and clears every connection.
		se.stop("r", "u", "", 1, OutcomeStopped)
	})
}

func TestScriptKeyTTLs(t *testing.T) {
	forEachStore(t, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		se.start("r", "u", "c", 1, OutcomeStarted)
		n := se.names
		keys := []string{n.UsersKey("r"), n.UserKeyPrefix("r") + "u"}
		for _, k := range keys {
			d := se.rdb.PTTL(ctx, k).Val()
			if d <= stTTL+DefaultKeyGrace || d > stTTL+DefaultKeyGrace+stThrottle {
				t.Fatalf("PTTL %s = %s, want in (ttl+grace, ttl+grace+throttle]", k, d)
			}
		}
		if se.mr != nil {
			// An abandoned room frees its memory: no sweeper, no stop, keys gone.
			se.advance(stTTL + DefaultKeyGrace + stThrottle + time.Second)
			if c := se.rdb.Exists(ctx, keys...).Val(); c != 0 {
				t.Fatalf("%d keys outlived ttl + grace + throttle", c)
			}
		}
	})
}

// The sweep script builds typing_stop(expired) in Lua from enc(user): it
// must decode and JSON-encode any id exactly, byte for byte what Go builds.
func TestScriptExpiredEventMatchesGo(t *testing.T) {
	users := []string{"u", `a"b\c`, "%41", "%", "{x}", "café ☕", "a b", "ü:x:y", "a*b?c[d]", "tab\\t", "!abc:matrix.org"}
	rooms := []string{"42", "room:42", `{"x"}`, "café ☕", "a b"}
	forEachStore(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe(rooms...)
		for _, r := range rooms {
			for i, u := range users {
				se.start(r, u, "c"+strconv.Itoa(i), 0, OutcomeStarted)
			}
		}
		for range len(rooms) * len(users) {
			s.Next(waitLong)
		}
		se.advance(stTTL + stMargin)
		if r := se.sweep(); r.Stops != len(rooms)*len(users) {
			t.Fatalf("sweep %+v", r)
		}
		for range len(rooms) * len(users) {
			r, ok := s.Next(waitLong)
			if !ok {
				t.Fatal("missing expired stops")
			}
			want := string(protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: r.Ev.Room, User: r.Ev.User, Reason: protocol.ReasonExpired})) +
				strconv.FormatInt(r.Ev.TsMs, 10) + "}"
			if r.Raw != want {
				t.Fatalf("Lua built %s\n      Go builds %s", r.Raw, want)
			}
			if !slices.Contains(users, r.Ev.User) || !slices.Contains(rooms, r.Ev.Room) {
				t.Fatalf("event for unknown id: %s", r.Raw)
			}
		}
	})
}

func TestScriptDisconnectManyRooms(t *testing.T) {
	forEachStore(t, func(t *testing.T, se *storeEnv) {
		var rooms []string
		for i := range 60 {
			rooms = append(rooms, fmt.Sprintf("room-%d", i))
			if i%2 == 0 {
				se.start(rooms[i], "u", "c", uint64(i+1), OutcomeStarted)
			}
		}
		if se.mr != nil {
			// The server lost its script cache: the pipeline reloads and reruns.
			if err := se.rdb.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		outs, err := se.st.Disconnect(context.Background(), protocol.Command{V: 1, Op: "disconnect", Rooms: rooms, User: "u", Conn: "c", Seq: 100})
		if err != nil {
			t.Fatal(err)
		}
		if n := storetest.GatherSum(t, se.reg, "ellipsis_worker_redis_errors_total", nil); n != 0 {
			t.Fatalf("redis_errors_total %v", n)
		}
		for i, o := range outs {
			want := OutcomeNoop
			if i%2 == 0 {
				want = OutcomeStopped
			}
			if o != want {
				t.Fatalf("room %d: %s, want %s", i, o, want)
			}
		}
		if got := disconnectOutcome(outs, nil); got != OutcomeStopped {
			t.Fatalf("disconnect outcome %s", got)
		}
	})
}

func TestStopTemplate(t *testing.T) {
	head, tail, err := stopTemplate(`r"1`)
	if err != nil {
		t.Fatal(err)
	}
	if string(head) != `{"v":1,"type":"typing_stop","room":"r\"1","user":` || string(tail) != `,"reason":"expired","ts_ms":` {
		t.Fatalf("head %s tail %s", head, tail)
	}
}

// score is user's score in room's users set (ZSCORE; redis.Nil when the
// user is not in it).
func (se *storeEnv) score(room, user string) (float64, error) {
	return se.rdb.ZScore(context.Background(), se.names.UsersKey(room), names.Enc(user)).Result()
}
