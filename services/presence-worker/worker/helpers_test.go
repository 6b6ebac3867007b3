package worker

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Test timings: short, and valid for config.Validate (throttle < refresh <
// ttl, idle < ttl).
const (
	testTTL      = time.Second
	testThrottle = 300 * time.Millisecond
	testSweep    = 100 * time.Millisecond
	// expiryBound is docs/protocol.md's bound ("Timing") for an expired entry's stop to
	// reach receivers: ttl + 1 s.
	expiryBound = testTTL + time.Second
	// waitLong bounds waits for things that should happen at once; it only
	// matters when a test fails.
	waitLong = 5 * time.Second
)

// testBatchWindow is ELLIPSIS_TEST_BATCH_WINDOW (a duration, e.g. 2ms),
// the ELLIPSIS_WORKER_BATCH_WINDOW every test worker runs with, so the package's
// contract can be run with batching on; unset: 0, the default.
func testBatchWindow(t testing.TB) time.Duration {
	v := os.Getenv("ELLIPSIS_TEST_BATCH_WINDOW")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("ELLIPSIS_TEST_BATCH_WINDOW: %v", err)
	}
	return d
}

// requireServices fails the test when the test Redis or NATS is not
// reachable (never a skip: a skipped contract test would read as a pass).
func requireServices(t testing.TB) {
	t.Helper()
	testkit.RequireReachable(t, testkit.RedisURL(), testkit.NATSURL())
}

// env is one test's world: a config with unique prefixes, Redis and NATS
// clients of the test itself, and the workers it started.
// The tests run against the Redis and NATS of the test environment
// (testkit.RedisURL, testkit.NATSURL), with a unique key prefix and subject
// prefix per test, and against miniredis (one server per test) for the same
// contract: the backends of package storetest. Set ELLIPSIS_TEST_LOG=1 to
// see worker logs.
type env struct {
	t     *testing.T
	be    storetest.Backend
	mr    *miniredis.Miniredis
	cfg   config.Config
	names names.Names
	rdb   *redis.Client
	nc    *nats.Conn

	mu      sync.Mutex
	workers []*Server
	regs    []*prometheus.Registry
}

func newEnv(t *testing.T, be storetest.Backend, mods ...func(*config.Config)) *env {
	t.Helper()
	requireServices(t)
	id := testkit.RandHex(5)
	cfg := config.Dev()
	cfg.AdminAddr = ""
	cfg.NATSURL = testkit.NATSURL()
	cfg.SubjectPrefix = "t" + id
	cfg.KeyPrefix = "t-" + id + ":"
	cfg.TypingTTL = testTTL
	cfg.TypingThrottle = testThrottle
	cfg.TypingRefresh = 600 * time.Millisecond
	cfg.TypingIdleStop = 500 * time.Millisecond
	cfg.SweepInterval = testSweep
	cfg.WorkerShards = 4
	cfg.LogLevel = "warn"
	cfg.WorkerBatchWindow = testBatchWindow(t)
	var mr *miniredis.Miniredis
	cfg.RedisURL, mr = storetest.RedisURLFor(t, be)
	cfg.RedisPubSub = be.PubSub
	for _, m := range mods {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	ropts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(ropts)
	nc, err := nats.Connect(testkit.NATSURL(), nats.Name("presence-worker-test"))
	if err != nil {
		t.Fatalf("nats: %v", err)
	}
	e := &env{t: t, be: be, mr: mr, cfg: cfg, names: names.New(cfg.KeyPrefix, cfg.SubjectPrefix), rdb: rdb, nc: nc}
	t.Cleanup(func() {
		e.mu.Lock()
		ws := e.workers
		e.mu.Unlock()
		for _, w := range ws {
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			if err := w.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			cancel()
		}
		nc.Close()
		if !be.Mini {
			testkit.CleanupKeys(rdb, cfg.KeyPrefix)
		}
		rdb.Close()
	})
	return e
}

// startWorker starts one more worker on the env's config (mods may change
// it), with its own metrics registry.
func (e *env) startWorker(mods ...func(*config.Config)) *Server {
	e.t.Helper()
	return e.startWorkerWith(Options{}, mods...)
}

// startWorkerWith is startWorker with the test-only fields of opts
// (sweepInterval, commandBatch); its Config, Logger and Registry are set
// here.
func (e *env) startWorkerWith(opts Options, mods ...func(*config.Config)) *Server {
	e.t.Helper()
	cfg := e.cfg
	for _, m := range mods {
		m(&cfg)
	}
	reg := prometheus.NewRegistry()
	opts.Config, opts.Logger, opts.Registry = cfg, testkit.Logger(), reg
	w, err := New(opts)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	if err := w.Start(context.Background()); err != nil {
		e.t.Fatalf("Start: %v", err)
	}
	e.mu.Lock()
	e.workers = append(e.workers, w)
	e.regs = append(e.regs, reg)
	e.mu.Unlock()
	return w
}

// metric sums a metric family over every worker's registry, optionally
// only the series whose labels include all of want.
func (e *env) metric(name string, want map[string]string) float64 {
	e.mu.Lock()
	regs := append([]*prometheus.Registry(nil), e.regs...)
	e.mu.Unlock()
	var sum float64
	for _, r := range regs {
		sum += storetest.GatherSum(e.t, r, name, want)
	}
	return sum
}

// processed is how many command payloads the workers have finished
// (applied, found invalid, or failed).
func (e *env) processed() float64 { return e.metric("ellipsis_worker_commands_total", nil) }

// eventually polls cond until it holds or waitLong passes.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	testkit.WaitFor(e.t, waitLong, what, cond)
}

// publishRaw publishes payloads on the command subject and flushes.
func (e *env) publishRaw(payloads ...[]byte) {
	e.t.Helper()
	for _, p := range payloads {
		if err := e.nc.Publish(e.names.CommandSubject(), p); err != nil {
			e.t.Fatalf("publish: %v", err)
		}
	}
	if err := e.nc.FlushTimeout(waitLong); err != nil {
		e.t.Fatalf("flush: %v", err)
	}
}

// send publishes commands in order and waits until the workers have
// processed them all (a barrier: commands of different connections may go
// to different shards, so a test that needs an order across connections
// sends them one send at a time).
func (e *env) send(cmds ...protocol.Command) {
	e.t.Helper()
	before := e.processed()
	var ps [][]byte
	for _, c := range cmds {
		if c.V == 0 {
			c.V = protocol.Version
		}
		b, err := json.Marshal(c)
		if err != nil {
			e.t.Fatal(err)
		}
		ps = append(ps, b)
	}
	e.publishRaw(ps...)
	want := before + float64(len(cmds))
	e.eventually("commands processed", func() bool { return e.processed() >= want })
}

// sendRaw publishes raw payloads and waits until they are processed.
func (e *env) sendRaw(payloads ...[]byte) {
	e.t.Helper()
	before := e.processed()
	e.publishRaw(payloads...)
	want := before + float64(len(payloads))
	e.eventually("payloads processed", func() bool { return e.processed() >= want })
}

func start(room, user, name, conn string, seq uint64) protocol.Command {
	return protocol.Command{V: 1, Op: protocol.OpStart, Room: room, User: user, Name: name, Conn: conn, Seq: seq}
}

func stop(room, user, conn string, seq uint64) protocol.Command {
	return protocol.Command{V: 1, Op: protocol.OpStop, Room: room, User: user, Conn: conn, Seq: seq}
}

// snapshot asks the workers who is typing in room.
func (e *env) snapshot(room string) protocol.SnapshotReply {
	e.t.Helper()
	b, _ := json.Marshal(protocol.SnapshotRequest{V: 1, Room: room})
	return e.snapshotRaw(b)
}

func (e *env) snapshotRaw(req []byte) protocol.SnapshotReply {
	e.t.Helper()
	msg, err := e.nc.Request(e.names.SnapshotSubject(), req, waitLong)
	if err != nil {
		e.t.Fatalf("snapshot request: %v", err)
	}
	r, err := protocol.DecodeSnapshotReply(msg.Data)
	if err != nil {
		e.t.Fatalf("snapshot reply %s: %v", msg.Data, err)
	}
	return r
}

// typists returns "user/name" strings of a snapshot, in reply order.
func typists(r protocol.SnapshotReply) []string {
	out := []string{}
	for _, u := range r.Users {
		out = append(out, u.User+"/"+u.Name)
	}
	return out
}

// subscribe subscribes to the rooms' channels and returns once Redis has
// confirmed every subscription.
func (e *env) subscribe(rooms ...string) *storetest.Stream {
	e.t.Helper()
	return storetest.SubscribeRooms(e.t, e.rdb, e.names, e.be.PubSub, rooms...)
}
