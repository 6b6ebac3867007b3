package store

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// The store comparison of docs/BENCHMARKS.md: seed pattern 1 (store keys)
// against pattern 2 (store zset). These run only with -bench; plain
// `go test ./...` compiles them and runs none.
//
//	go test -run '^$' -bench 'Stores|MemoryPerTypist' -benchmem -timeout 30m
//	ELLIPSIS_BENCH_KEYSPACE=1e3,1e4,1e5,1e6 go test -run '^$' -bench Stores -benchmem -timeout 60m
//	go test -run '^$' -bench 'CommandThroughput' -benchmem
//	go test -run '^$' -bench 'WorkerThroughput' -benchtime 20000x -benchmem -count 5
//
// BenchmarkStores and BenchmarkMemoryPerTypist start a private redis-server
// (ELLIPSIS_BENCH_REDIS_SERVER, default /usr/bin/redis-server) on a free
// loopback port, without persistence, fill it with unrelated keys (DEBUG
// POPULATE), and stop it at the end: they never fill or KEYS the shared
// Redis. The throughput benchmarks use the shared Redis and NATS with a
// unique prefix, like the tests.

// benchKeyspaces are the sizes of unrelated keyspace BenchmarkStores runs
// at: ELLIPSIS_BENCH_KEYSPACE (comma-separated, 1e6 notation allowed),
// default 1e3,1e4,1e5 (1e6 takes a few minutes more, mostly store keys's
// snapshot and the cleanups).
func benchKeyspaces(b *testing.B) []int {
	spec := testkit.EnvOr("ELLIPSIS_BENCH_KEYSPACE", "1e3,1e4,1e5")
	var out []int
	for _, f := range strings.Split(spec, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 || v > 1e8 {
			b.Fatalf("ELLIPSIS_BENCH_KEYSPACE: bad size %q", f)
		}
		out = append(out, int(v))
	}
	return out
}

// sizeLabel prints 1000 as 1e3, 20000 as 2e4; other sizes as they are.
func sizeLabel(n int) string {
	if n <= 0 {
		return "0"
	}
	e := int(math.Log10(float64(n)))
	m := n / int(math.Pow10(e))
	if m*int(math.Pow10(e)) == n {
		return fmt.Sprintf("%de%d", m, e)
	}
	return strconv.Itoa(n)
}

// privateRedis is a redis-server of the benchmark's own.
type privateRedis struct {
	addr string
	rdb  *redis.Client
}

// startPrivateRedis starts a redis-server (ELLIPSIS_BENCH_REDIS_SERVER, else
// the one found) on a spare loopback port, without persistence, with DEBUG
// allowed from loopback; it is killed when the benchmark (or test) ends.
func startPrivateRedis(b testing.TB) *privateRedis {
	b.Helper()
	srv := testkit.StartRedis(b, os.Getenv("ELLIPSIS_BENCH_REDIS_SERVER"), "--enable-debug-command", "local", "--logfile", "")
	p := &privateRedis{addr: srv.Addr()}
	p.rdb = redis.NewClient(&redis.Options{Addr: p.addr, PoolSize: 32, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	b.Cleanup(func() { p.rdb.Close() })
	return p
}

// populate grows the unrelated keyspace ("unrelated:<i>", 16-byte strings,
// no TTL) to n keys: DEBUG POPULATE, or pipelined SETs where DEBUG is off.
func (p *privateRedis) populate(b *testing.B, n int) {
	b.Helper()
	ctx := context.Background()
	if err := p.rdb.Do(ctx, "DEBUG", "POPULATE", n, "unrelated", 16).Err(); err != nil {
		for i := 0; i < n; i += 10000 {
			pipe := p.rdb.Pipeline()
			for j := i; j < min(n, i+10000); j++ {
				pipe.Set(ctx, "unrelated:"+strconv.Itoa(j), "0123456789abcdef", 0)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// dropPrefix unlinks every key under prefix (SCAN, never KEYS), untimed:
// deferred at the end of a benchmark, it would otherwise be timed (a SCAN
// of a million keys takes about a second).
func (p *privateRedis) dropPrefix(b *testing.B, prefix string) {
	b.Helper()
	b.StopTimer()
	ctx := context.Background()
	iter := p.rdb.Scan(ctx, 0, prefix+"*", 10000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			p.rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		p.rdb.Unlink(ctx, batch...)
	}
	if err := iter.Err(); err != nil {
		b.Fatal(err)
	}
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct{ calls, usec int64 }

func (p *privateRedis) cmdStats(b testing.TB) map[string]cmdStat {
	b.Helper()
	s, err := p.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]cmdStat{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls = n
			case "usec":
				st.usec = n
			}
		}
		out[name] = st
	}
	return out
}

// The commands an operation sends itself, whose usec in INFO commandstats
// is its server time. A script's usec includes the commands it runs, which
// INFO commandstats also counts under their own names, so an operation
// that runs scripts counts only EVALSHA and EVAL.
var (
	scriptCmds       = []string{"evalsha", "eval"}
	keysSnapshotCmds = []string{"scan", "time", "zmscore", "hgetall", "hmget"} // keysLayout.snapshot, no script
	keysCmds         = []string{"keys"}
)

// snapshotCmds are the commands of st's Snapshot.
func snapshotCmds(st Store) []string {
	if _, ok := st.(*redisStore).lay.(*keysLayout); ok {
		return keysSnapshotCmds
	}
	return scriptCmds
}

// serverCost resets the private server's command stats, runs f, and
// reports the server time and round trips per op of the commands cmds.
func (p *privateRedis) serverCost(b *testing.B, cmds []string, f func()) {
	b.Helper()
	if err := p.rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	f()
	st := p.cmdStats(b)
	var calls, usec int64
	for _, c := range cmds {
		calls += st[c].calls
		usec += st[c].usec
	}
	if b.N > 0 && calls > 0 {
		b.ReportMetric(float64(usec)/float64(b.N), "srv-µs/op")
		b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
		// The mean time one call holds Redis, during which every other
		// client waits: a whole KEYS, one SCAN step, one script.
		b.ReportMetric(float64(usec)/float64(calls), "srv-µs/call")
	}
}

// probe pings the server every millisecond from its own connection while
// the benchmark runs and reports the longest PING: how long one operation
// holds Redis from every other client.
func (p *privateRedis) probe(b *testing.B) (stop func()) {
	c := redis.NewClient(&redis.Options{Addr: p.addr, PoolSize: 1, ReadTimeout: time.Minute})
	done := make(chan struct{})
	var worst atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			t := time.Now()
			_ = c.Ping(context.Background()).Err()
			if d := int64(time.Since(t)); d > worst.Load() {
				worst.Store(d)
			}
			time.Sleep(time.Millisecond)
		}
	})
	return func() {
		close(done)
		wg.Wait()
		c.Close()
		b.ReportMetric(float64(worst.Load())/1e6, "max-ping-ms")
	}
}

// benchStore builds a store of kind on rdb under prefix "b:" with a long
// ttl and throttle, so typists neither expire nor leave the refresh window
// during a measurement (neither changes a command's cost).
func benchStore(b *testing.B, kind string, rdb redis.UniversalClient) (Store, names.Names) {
	b.Helper()
	m, err := newMetrics(prometheus.NewRegistry(), false)
	if err != nil {
		b.Fatal(err)
	}
	n := names.New("b:", "")
	st, err := New(Options{Kind: kind, PubSub: storetest.PubSub, Redis: rdb, Names: n, TTL: time.Hour, Throttle: 30 * time.Minute, Metrics: m, Log: zap.NewNop(), RateLog: testRateLog{zap.NewNop()}})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Prepare(context.Background()); err != nil {
		b.Fatal(err)
	}
	return st, n
}

func mustOutcome(b *testing.B, want Outcome) func(Outcome, error) {
	return func(out Outcome, err error) {
		if err != nil || out != want {
			b.Fatalf("outcome %q, %v; want %q", out, err, want)
		}
	}
}

// BenchmarkStores measures each store's commands and "who is typing"
// against keyspace size (unrelated keys) and typists per room, on a
// private redis-server, and what KEYS would cost instead of SCAN;
// op=stop_churned is a stop of a user after benchChurn connections of
// theirs came and went (benchChurnedStop).
//
// Metrics besides ns/op (the client's round trip): srv-µs/op, the server's
// own time per op (INFO commandstats); calls/op, round trips per op;
// srv-µs/call, how long one call holds Redis (every other client waits
// meanwhile); max-ping-ms, the longest a 1 ms PING probe waited during the
// run (the same, seen from outside, plus the machine's scheduling noise).
func BenchmarkStores(b *testing.B) {
	p := startPrivateRedis(b)
	for _, size := range benchKeyspaces(b) {
		p.populate(b, size)
		ks := "keyspace=" + sizeLabel(size)
		for _, kind := range storetest.Kinds {
			st, n := benchStore(b, kind, p.rdb)
			pfx := ks + "/store=" + kind
			b.Run(pfx+"/op=start_new", func(b *testing.B) { benchStartNew(b, p, st, n) })
			b.Run(pfx+"/op=refresh", func(b *testing.B) { benchRefresh(b, p, st, n) })
			b.Run(pfx+"/op=stop", func(b *testing.B) { benchStop(b, p, st, n) })
			// A stop of a user after benchChurn connections of theirs
			// started, stopped and disconnected (benchChurnedStop).
			b.Run(pfx+"/op=stop_churned", func(b *testing.B) {
				defer p.dropPrefix(b, n.KeyPrefix())
				benchChurnedStop(b, st, func() int64 { return evalsUsec(b, p) })
			})
			for _, typists := range []int{1, 10, 100} {
				b.Run(fmt.Sprintf("%s/op=snapshot/typists=%d", pfx, typists), func(b *testing.B) {
					benchSnapshot(b, p, st, n, typists)
				})
			}
			if k, ok := st.(*redisStore).lay.(*keysLayout); ok {
				// SCAN's COUNT: fewer round trips against a longer hold of Redis.
				for _, count := range []int64{100, 10000} {
					b.Run(fmt.Sprintf("%s/op=snapshot/typists=10/scan_count=%d", pfx, count), func(b *testing.B) {
						k.scanCount = count
						defer func() { k.scanCount = DefaultScanCount }()
						benchSnapshot(b, p, st, n, 10)
					})
				}
			}
		}
		b.Run(ks+"/op=KEYS", func(b *testing.B) { benchKEYS(b, p) })
	}
}

// benchStartNew times a start of a new user in a new room, b.N of them.
func benchStartNew(b *testing.B, p *privateRedis, st Store, n names.Names) {
	ctx := context.Background()
	defer p.dropPrefix(b, n.KeyPrefix())
	ok := mustOutcome(b, OutcomeStarted)
	b.ReportAllocs()
	p.serverCost(b, scriptCmds, func() {
		for i := range b.N {
			ok(st.Start(ctx, protocol.Command{V: 1, Op: "start", Room: "room-" + strconv.Itoa(i), User: "user-" + strconv.Itoa(i), Name: "Some Body", Conn: "gw-a1b2:" + strconv.Itoa(i), Seq: 1}))
		}
	})
}

// benchRefresh times a throttled refresh of one typing user.
func benchRefresh(b *testing.B, p *privateRedis, st Store, n names.Names) {
	ctx := context.Background()
	defer p.dropPrefix(b, n.KeyPrefix())
	cmd := protocol.Command{V: 1, Op: "start", Room: "busy", User: "alice", Name: "Alice", Conn: "gw-a1b2:17"}
	_, _ = st.Start(ctx, cmd)
	ok := mustOutcome(b, OutcomeThrottled)
	b.ReportAllocs()
	b.ResetTimer()
	p.serverCost(b, scriptCmds, func() {
		for range b.N {
			ok(st.Start(ctx, cmd))
		}
	})
}

// benchStop times the stop of b.N typing users, each alone in a room.
func benchStop(b *testing.B, p *privateRedis, st Store, n names.Names) {
	ctx := context.Background()
	defer p.dropPrefix(b, n.KeyPrefix())
	cmd := func(i int) protocol.Command {
		return protocol.Command{V: 1, Op: "start", Room: "room-" + strconv.Itoa(i), User: "user-" + strconv.Itoa(i), Conn: "gw-a1b2:" + strconv.Itoa(i), Seq: 1}
	}
	for i := range b.N {
		_, _ = st.Start(ctx, cmd(i))
	}
	ok := mustOutcome(b, OutcomeStopped)
	b.ReportAllocs()
	b.ResetTimer()
	p.serverCost(b, scriptCmds, func() {
		for i := range b.N {
			c := cmd(i)
			c.Op, c.Seq = "stop", 2
			ok(st.Stop(ctx, c, protocol.ReasonStopped))
		}
	})
}

// benchKEYS times what the seed forbids: pattern 1's listing with KEYS,
// one blocking O(keyspace) call, with 10 typists in the room.
func benchKEYS(b *testing.B, p *privateRedis) {
	ctx := context.Background()
	st, n := benchStore(b, config.StoreKeys, p.rdb)
	defer p.dropPrefix(b, n.KeyPrefix())
	for i := range 10 {
		_, _ = st.Start(ctx, protocol.Command{V: 1, Op: "start", Room: "r", User: "u" + strconv.Itoa(i), Conn: "c"})
	}
	pattern := n.TypistPattern("r")
	b.ReportAllocs()
	b.ResetTimer()
	stop := p.probe(b)
	p.serverCost(b, keysCmds, func() {
		for range b.N {
			keys, err := p.rdb.Keys(ctx, pattern).Result()
			if err != nil || len(keys) != 10 {
				b.Fatalf("KEYS: %d keys, %v", len(keys), err)
			}
		}
	})
	stop()
}

// benchSnapshot times Snapshot of a room with typists typists (one
// connection each, named), with the PING probe running.
func benchSnapshot(b *testing.B, p *privateRedis, st Store, n names.Names, typists int) {
	ctx := context.Background()
	defer p.dropPrefix(b, n.KeyPrefix())
	for i := range typists {
		_, _ = st.Start(ctx, protocol.Command{V: 1, Op: "start", Room: "room-42", User: "user-" + strconv.Itoa(i), Name: "Some Body", Conn: "gw-a1b2:" + strconv.Itoa(i), Seq: 1})
	}
	if snap, err := st.Snapshot(ctx, "room-42", MaxSnapshotLimit); err != nil || len(snap.Users) != typists {
		b.Fatalf("snapshot: %d users, %v; want %d", len(snap.Users), err, typists)
	}
	b.ReportAllocs()
	b.ResetTimer()
	stop := p.probe(b)
	p.serverCost(b, snapshotCmds(st), func() {
		for range b.N {
			if _, err := st.Snapshot(ctx, "room-42", MaxSnapshotLimit); err != nil {
				b.Fatal(err)
			}
		}
	})
	stop()
}

// memoryResult is one line of BenchmarkMemoryPerTypist.
type memoryResult struct {
	all    float64            // bytes per typist: every key
	byKind map[string]float64 // MEMORY USAGE per typist, by key kind
}

// BenchmarkMemoryPerTypist measures Redis memory per typist (INFO
// used_memory delta over 10,000 typists, on an emptied private server) for
// each store and 1, 10 or 100 typists per room, and for reference the
// seed's bare patterns: pattern 1 as one string per typist (SET PX), and
// pattern 2 as one sorted-set member per typist. Each typist has one
// connection, a 9-byte name and a seq; B/typist counts every key the store
// writes. ns/op is meaningless here.
func BenchmarkMemoryPerTypist(b *testing.B) {
	m := &memoryBench{b: b, p: startPrivateRedis(b), ctx: context.Background()}
	for _, perRoom := range []int{1, 10, 100} {
		for _, kind := range storetest.Kinds {
			r := m.measure(func() { m.fillStore(kind, perRoom) }, "b:")
			m.report(fmt.Sprintf("store=%s/typists_per_room=%d", kind, perRoom), r)
		}
		// The seed's bare patterns, for reference (no names, seq, throttle).
		n := names.New("b:", "")
		r := m.measure(func() { m.fillPattern1(n, perRoom) }, "b:")
		m.report(fmt.Sprintf("seed=pattern1_string/typists_per_room=%d", perRoom), r)
		r = m.measure(func() { m.fillPattern2(n, perRoom) }, "b:")
		m.report(fmt.Sprintf("seed=pattern2_zset/typists_per_room=%d", perRoom), r)
	}
}

// memoryTypists is how many typists each BenchmarkMemoryPerTypist
// measurement writes.
const memoryTypists = 10000

// memoryBench is BenchmarkMemoryPerTypist's private server.
type memoryBench struct {
	b   *testing.B
	p   *privateRedis
	ctx context.Context
}

// used is INFO used_memory after MEMORY PURGE (bytes).
func (m *memoryBench) used() float64 {
	_ = m.p.rdb.Do(m.ctx, "MEMORY", "PURGE").Err()
	s := m.p.rdb.Info(m.ctx, "memory").Val()
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	m.b.Fatal("no used_memory in INFO")
	return 0
}

// usageByKind sums MEMORY USAGE of every key by the first segments of
// its name before the hash tag (typing:user, typing:users, typing:{
// for the keys store's typist keys, typing:sweep; see shared/names).
func (m *memoryBench) usageByKind(prefix string) map[string]float64 {
	out := map[string]float64{}
	iter := m.p.rdb.Scan(m.ctx, 0, prefix+"*", 10000).Iterator()
	for iter.Next(m.ctx) {
		k := iter.Val()
		rest := strings.TrimPrefix(k, prefix)
		kind := rest
		if i := strings.IndexByte(rest, '{'); i >= 0 {
			kind = rest[:i] + "{R}"
		}
		u, _ := m.p.rdb.MemoryUsage(m.ctx, k).Result()
		out[kind] += float64(u) / memoryTypists
	}
	return out
}

// measure empties the server, runs fill, and returns the memory it added
// per typist.
func (m *memoryBench) measure(fill func(), prefix string) memoryResult {
	if err := m.p.rdb.FlushAll(m.ctx).Err(); err != nil { // the private server only
		m.b.Fatal(err)
	}
	before := m.used()
	fill()
	r := memoryResult{byKind: m.usageByKind(prefix)}
	r.all = (m.used() - before) / memoryTypists
	return r
}

// report runs the sub-benchmark name, which reports r.
func (m *memoryBench) report(name string, r memoryResult) {
	m.b.Run(name, func(b *testing.B) {
		for b.Loop() {
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(r.all, "B/typist")
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.byKind)) {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, r.byKind[k]))
		}
		b.Logf("MEMORY USAGE per typist by key: %s", strings.Join(parts, " "))
	})
}

// fillStore starts memoryTypists typists, perRoom to a room, in a store
// of kind.
func (m *memoryBench) fillStore(kind string, perRoom int) {
	st, _ := benchStore(m.b, kind, m.p.rdb)
	for i := range memoryTypists {
		if _, err := st.Start(m.ctx, protocol.Command{V: 1, Op: "start", Room: fmt.Sprintf("room-%06d", i/perRoom), User: fmt.Sprintf("user-%06d", i), Name: "Some Body", Conn: fmt.Sprintf("gw-a1b2:%06d", i), Seq: 1}); err != nil {
			m.b.Fatal(err)
		}
	}
}

// fillPattern1 writes the seed's pattern 1: one string per typist (SET PX).
func (m *memoryBench) fillPattern1(n names.Names, perRoom int) {
	pipe := m.p.rdb.Pipeline()
	for i := range memoryTypists {
		pipe.Set(m.ctx, n.TypistKey(fmt.Sprintf("room-%06d", i/perRoom), fmt.Sprintf("user-%06d", i)), "1", 5*time.Second)
	}
	if _, err := pipe.Exec(m.ctx); err != nil {
		m.b.Fatal(err)
	}
}

// fillPattern2 writes the seed's pattern 2: one sorted-set member per
// typist.
func (m *memoryBench) fillPattern2(n names.Names, perRoom int) {
	pipe := m.p.rdb.Pipeline()
	exp := float64(time.Now().Add(5 * time.Second).UnixMilli())
	for i := range memoryTypists {
		pipe.ZAdd(m.ctx, n.UsersKey(fmt.Sprintf("room-%06d", i/perRoom)), redis.Z{Score: exp, Member: fmt.Sprintf("user-%06d", i)})
	}
	if _, err := pipe.Exec(m.ctx); err != nil {
		m.b.Fatal(err)
	}
}

// BenchmarkCommandThroughput measures the command path (decode, store
// script, outcome metric) with 16 goroutines, the default
// ELLIPSIS_WORKER_SHARDS, against the machine's Redis: commands per second
// one worker's shards can apply. Workload: typing episodes (storetest.ThroughputMix)
// of 1,600 connections over 100 rooms.
func BenchmarkCommandThroughput(b *testing.B) {
	requireServices(b)
	rdb := storetest.BenchRedis(b)
	for _, kind := range storetest.Kinds {
		// The store's ceiling with pipelining: each goroutine (GOMAXPROCS of
		// them) sends 64 commands per round trip as one pipeline of scripts,
		// as a busy shard does (DefaultCommandBatch), without NATS, decoding
		// or the shard queue; BenchmarkWorkerThroughput measures the shards
		// themselves.
		b.Run("store="+kind+"/pipeline=64", func(b *testing.B) {
			m, err := newMetrics(prometheus.NewRegistry(), false)
			if err != nil {
				b.Fatal(err)
			}
			n := storetest.BenchNames(b, rdb)
			st, err := New(Options{Kind: kind, PubSub: storetest.PubSub, Redis: rdb, Names: n, TTL: config.Default().TypingTTL, Throttle: config.Default().TypingThrottle, Metrics: m, Log: zap.NewNop(), RateLog: testRateLog{zap.NewNop()}})
			if err != nil {
				b.Fatal(err)
			}
			bs := st.(*redisStore)
			var next atomic.Int64
			var failed atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				g := next.Add(1)
				ctx := context.Background()
				var calls []scriptCall
				flush := func() {
					if len(calls) == 0 {
						return
					}
					_, errs := bs.eval(ctx, "bench", calls)
					for _, err := range errs {
						if err != nil {
							failed.Add(1)
						}
					}
					calls = calls[:0]
				}
				var pending []protocol.Command
				episode := 0
				for pb.Next() {
					if len(pending) == 0 {
						conn, seq := int(g)*1000+episode%1000, uint64(episode/1000)*5+1
						for _, c := range storetest.ThroughputMix(fmt.Sprintf("room-%d", conn%100), fmt.Sprintf("user-%d", conn), fmt.Sprintf("gw:%d", conn), seq) {
							p, _ := json.Marshal(c)
							cmd, err := protocol.DecodeCommand(p)
							if err != nil {
								b.Error(err)
								return
							}
							pending = append(pending, cmd)
						}
						episode++
					}
					cmd := pending[0]
					pending = pending[1:]
					if cmd.Op == protocol.OpStart {
						calls = append(calls, bs.commandCall(bs.lua.start, bs.startArgs(cmd)))
					} else {
						calls = append(calls, bs.commandCall(bs.lua.stop, stopArgs(cmd, cmd.Room, protocol.ReasonStopped)))
					}
					if len(calls) == 64 {
						flush()
					}
				}
				flush()
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cmds/s")
			if f := failed.Load(); f != 0 {
				b.Fatalf("%d calls failed", f)
			}
		})
	}
}
