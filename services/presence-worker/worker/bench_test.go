package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// BenchmarkStartCommand measures the start command path against the real
// Redis, as a shard runs it: decode the NATS payload, run start.lua (one
// EVALSHA round trip), count the outcome. No NATS.
//
//	go test -run '^$' -bench StartCommand -benchmem
//
//	refresh      the same connection over and over: ZSCORE fast path, throttled
//	new_typist   a new user in a new room each time: full path, PUBLISH
//	busy_room    a new user joining a room of 50 typists: user scan of the set
//	parallel     refreshes of 1000 connections from GOMAXPROCS goroutines
func BenchmarkStartCommand(b *testing.B) {
	requireServices(b)
	opts, err := redis.ParseURL(testkit.RedisURL())
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	m, err := newMetrics(prometheus.NewRegistry(), false)
	if err != nil {
		b.Fatal(err)
	}
	n := names.New("t-bench-"+testkit.RandHex(4)+":", "")
	defer testkit.CleanupKeys(rdb, n.KeyPrefix())
	st, err := store.New(store.Options{Kind: config.StoreZSet, PubSub: storetest.PubSub, Redis: rdb, Names: n, TTL: config.Default().TypingTTL, Throttle: config.Default().TypingThrottle, Metrics: &m.Metrics, Log: zap.NewNop(), RateLog: ratelog.New(zap.NewNop(), time.Minute)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Prepare(ctx); err != nil {
		b.Fatal(err)
	}
	s := &Server{st: st, m: m, rl: ratelog.New(zap.NewNop(), time.Minute), log: zap.NewNop()}
	sb := &startCommandBench{ctx: ctx, s: s}
	errors := func() float64 { return gatherSumB(m, "error") }

	b.Run("refresh", sb.refresh)
	b.Run("new_typist", sb.newTypist)
	b.Run("busy_room", sb.busyRoom)
	b.Run("parallel", sb.parallel)
	if e := errors(); e != 0 {
		b.Fatalf("%v commands failed", e)
	}
}

// startCommandBench is the worker of BenchmarkStartCommand; its methods
// are the sub-benchmarks.
type startCommandBench struct {
	ctx context.Context
	s   *Server
}

// apply decodes payload and applies it as the command path does.
func (sb *startCommandBench) apply(b *testing.B, payload []byte) {
	cmd, err := protocol.DecodeCommand(payload)
	if err != nil {
		b.Fatal(err)
	}
	sb.s.apply(sb.ctx, cmd)
}

// payload is a start of user on conn in room, encoded.
func (sb *startCommandBench) payload(room, user, conn string) []byte {
	p, _ := json.Marshal(protocol.Command{V: 1, Op: "start", Room: room, User: user, Name: "Some Body", Conn: conn})
	return p
}

func (sb *startCommandBench) refresh(b *testing.B) {
	p := sb.payload("bench-room", "alice", "gw-a1b2:17")
	b.ReportAllocs()
	for b.Loop() {
		sb.apply(b, p)
	}
}

func (sb *startCommandBench) newTypist(b *testing.B) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		sb.apply(b, sb.payload(fmt.Sprintf("nt-room-%d", i), fmt.Sprintf("user-%d", i), "gw:1"))
	}
}

func (sb *startCommandBench) busyRoom(b *testing.B) {
	for j := range 50 {
		sb.apply(b, sb.payload("busy", fmt.Sprintf("typist-%d", j), "gw:1"))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		sb.apply(b, sb.payload("busy", fmt.Sprintf("joiner-%d", i), "gw:2"))
		b.StopTimer()
		sb.s.apply(sb.ctx, protocol.Command{V: 1, Op: "stop", Room: "busy", User: fmt.Sprintf("joiner-%d", i)})
		b.StartTimer()
	}
}

func (sb *startCommandBench) parallel(b *testing.B) {
	ps := make([][]byte, 1000)
	for i := range ps {
		ps[i] = sb.payload(fmt.Sprintf("par-room-%d", i%50), fmt.Sprintf("u%d", i), fmt.Sprintf("gw:%d", i))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			cmd, _ := protocol.DecodeCommand(ps[i%len(ps)])
			sb.s.apply(sb.ctx, cmd)
			i++
		}
	})
}

func gatherSumB(m *metrics, outcome string) float64 {
	reg := prometheus.NewRegistry()
	_ = reg.Register(m.commands)
	mfs, _ := reg.Gather()
	var sum float64
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			for _, l := range mm.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					sum += mm.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// BenchmarkCommandThroughput measures the command path (decode, store
// script, outcome metric) with 16 goroutines, the default
// ELLIPSIS_WORKER_SHARDS, against the machine's Redis: commands per second
// one worker's shards can apply. Workload: typing episodes (storetest.ThroughputMix)
// of 1,600 connections over 100 rooms. The store's ceiling with
// pipelining is internal/store's BenchmarkCommandThroughput.
func BenchmarkCommandThroughput(b *testing.B) {
	requireServices(b)
	rdb := storetest.BenchRedis(b)
	for _, kind := range storetest.Kinds {
		b.Run("store="+kind+"/shards=16", func(b *testing.B) {
			m, err := newMetrics(prometheus.NewRegistry(), false)
			if err != nil {
				b.Fatal(err)
			}
			n := storetest.BenchNames(b, rdb)
			st, err := store.New(store.Options{Kind: kind, PubSub: storetest.PubSub, Redis: rdb, Names: n, TTL: config.Default().TypingTTL, Throttle: config.Default().TypingThrottle, Metrics: &m.Metrics, Log: zap.NewNop(), RateLog: ratelog.New(zap.NewNop(), time.Minute)})
			if err != nil {
				b.Fatal(err)
			}
			if err := st.Prepare(context.Background()); err != nil {
				b.Fatal(err)
			}
			s := &Server{st: st, m: m, rl: ratelog.New(zap.NewNop(), time.Minute), log: zap.NewNop()}
			shards := Shards(config.Default().WorkerShards, redisconn.Standalone)
			var next atomic.Int64
			b.SetParallelism(max(1, shards/runtime.GOMAXPROCS(0))) // shards goroutines in all
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				g := next.Add(1)
				ctx := context.Background()
				var payloads [][]byte
				i, episode := 0, 0
				for pb.Next() {
					if i == len(payloads) {
						// 100 connections per goroutine, in turn; seq grows per connection.
						conn, seq := int(g)*100+episode%100, uint64(episode/100)*5+1
						payloads = payloads[:0]
						for _, c := range storetest.ThroughputMix(fmt.Sprintf("room-%d", conn%100), fmt.Sprintf("user-%d", conn), fmt.Sprintf("gw:%d", conn), seq) {
							p, _ := json.Marshal(c)
							payloads = append(payloads, p)
						}
						episode++
						i = 0
					}
					cmd, err := protocol.DecodeCommand(payloads[i])
					if err != nil {
						b.Error(err)
						return
					}
					s.apply(ctx, cmd)
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cmds/s")
			if e := gatherSumB(m, store.OutcomeError.String()); e != 0 {
				b.Fatalf("%v commands failed", e)
			}
		})
	}
}

// BenchmarkWorkerThroughput measures one whole worker (New/Start, 16
// shards, each store) end to end: commands published on the machine's
// NATS, applied on the machine's Redis; cmds/s is the rate at which the
// worker applied them (any outcome but shed and overflow: those are
// dropped by dispatch and reported apart, as shed and overflow per run). At most 8,192 commands are in flight (below the
// subscription's pending limit, so none is dropped).
//
// batch is the shards' cap on script calls per pipeline (Options.commandBatch):
// 1 is one command per round trip (no batching); 64 is
// DefaultCommandBatch. One op is one command, and the commands are the same
// sequence whatever b.N (episodes of 1,600 connections), so
// -benchtime 20000x runs every case on the same 20,000 commands.
func BenchmarkWorkerThroughput(b *testing.B) {
	requireServices(b)
	for _, kind := range storetest.Kinds {
		for _, batch := range []int{1, 16, 64, 256} {
			b.Run(fmt.Sprintf("store=%s/batch=%d", kind, batch), func(b *testing.B) {
				benchWorkerThroughput(b, kind, batch)
			})
		}
	}
}

func benchWorkerThroughput(b *testing.B, kind string, batch int) {
	id := testkit.RandHex(5)
	cfg := config.Dev()
	cfg.AdminAddr = ""
	cfg.NATSURL = testkit.NATSURL()
	cfg.RedisURL = testkit.RedisURL()
	cfg.SubjectPrefix = "tb" + id
	cfg.KeyPrefix = "t-bench-" + id + ":"
	cfg.Store = kind
	cfg.LogLevel = "warn"
	reg := prometheus.NewRegistry()
	w, err := New(Options{Config: cfg, Registry: reg, commandBatch: batch})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	ropts, _ := redis.ParseURL(testkit.RedisURL())
	rdb := redis.NewClient(ropts)
	defer func() {
		_ = w.Shutdown(context.Background())
		testkit.CleanupKeys(rdb, cfg.KeyPrefix)
		rdb.Close()
	}()
	nc, err := nats.Connect(testkit.NATSURL(), nats.Name("presence-worker-bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	subject := names.New(cfg.KeyPrefix, cfg.SubjectPrefix).CommandSubject()
	// Payloads first, untimed: 1,600 connections' episodes.
	payloads := throughputPayloads(b.N)
	processed := func() float64 { return storetest.GatherSum(b, reg, "ellipsis_worker_commands_total", nil) }
	b.ResetTimer()
	publishWindowed(b, nc, subject, payloads, processed)
	_ = nc.Flush()
	deadline := time.Now().Add(time.Minute)
	for processed() < float64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("%v of %d commands processed", processed(), b.N)
		}
		time.Sleep(200 * time.Microsecond)
	}
	b.StopTimer()
	reportThroughput(b, reg, processed)
}

// throughputPayloads is n encoded commands of storetest.ThroughputMix
// episodes of 1,600 connections over 100 rooms.
func throughputPayloads(n int) [][]byte {
	payloads := make([][]byte, 0, n+5)
	for conn := 0; len(payloads) < n; conn++ {
		c := conn % 1600
		for _, cmd := range storetest.ThroughputMix(fmt.Sprintf("room-%d", c%100), fmt.Sprintf("user-%d", c), fmt.Sprintf("gw:%d", c), uint64(conn/1600)*5+1) {
			p, _ := json.Marshal(cmd)
			payloads = append(payloads, p)
		}
	}
	payloads = payloads[:n]
	return payloads
}

// publishWindowed publishes payloads on subject, pausing while more than
// window of them are in flight (published, not yet processed).
func publishWindowed(b *testing.B, nc *nats.Conn, subject string, payloads [][]byte, processed func() float64) {
	b.Helper()
	// At most window commands in flight: 256 per shard on average, a third of
	// the queue depth at which a shard sheds starts (shardStartRoom), so
	// the benchmark measures the applied rate, not dispatch dropping.
	const window = 4096
	for i, p := range payloads {
		if i%1024 == 0 {
			for float64(i)-processed() > window {
				time.Sleep(200 * time.Microsecond)
			}
		}
		if err := nc.Publish(subject, p); err != nil {
			b.Fatal(err)
		}
	}
}

// reportThroughput reports cmds/s, shed and overflow of a run, and fails
// it on any failed command or NATS error.
func reportThroughput(b *testing.B, reg *prometheus.Registry, processed func() float64) {
	b.Helper()
	// Throughput counts only the commands that reached Redis: a command
	// dispatch shed (a start, its shard's queue past 768) or refused (queue
	// full) is counted in commands_total but never applied, so it is
	// reported on its own, never as work done.
	dropped := func(o store.Outcome) float64 {
		return storetest.GatherSum(b, reg, "ellipsis_worker_commands_total", map[string]string{"outcome": o.String()})
	}
	shed, overflow := dropped(OutcomeShed), dropped(OutcomeOverflow)
	applied := processed() - shed - overflow
	b.ReportMetric(applied/b.Elapsed().Seconds(), "cmds/s")
	b.ReportMetric(shed, "shed")
	b.ReportMetric(overflow, "overflow")
	if e := storetest.GatherSum(b, reg, "ellipsis_worker_commands_total", map[string]string{"outcome": store.OutcomeError.String()}); e != 0 {
		b.Fatalf("%v commands failed", e)
	}
	if e := storetest.GatherSum(b, reg, "ellipsis_worker_nats_errors_total", nil); e != 0 {
		b.Fatalf("%v NATS errors (slow consumer?)", e)
	}
}
