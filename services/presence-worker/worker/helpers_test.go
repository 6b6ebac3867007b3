package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
)

// The tests run against the Redis and NATS of this machine (override with
// ELLIPSIS_TEST_REDIS_URL and ELLIPSIS_TEST_NATS_URL), with a unique key
// prefix and subject prefix per test, and against miniredis (one server per
// test) for the same contract. Set ELLIPSIS_TEST_LOG=1 to see worker logs.
var (
	testRedisURL = envOr("ELLIPSIS_TEST_REDIS_URL", "redis://127.0.0.1:6379")
	testNATSURL  = envOr("ELLIPSIS_TEST_NATS_URL", "nats://127.0.0.1:4222")
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

func envOr(k, def string) string {
	if v, ok := os.LookupEnv(k); ok && v != "" {
		return v
	}
	return def
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var (
	servicesOnce sync.Once
	servicesErr  string
)

// requireServices skips the test when the machine's Redis or NATS is not
// reachable (say so loudly: these tests are the contract).
func requireServices(t testing.TB) {
	t.Helper()
	servicesOnce.Do(func() {
		for _, u := range []string{testRedisURL, testNATSURL} {
			p, err := url.Parse(u)
			if err != nil {
				servicesErr = err.Error()
				return
			}
			c, err := net.DialTimeout("tcp", p.Host, time.Second)
			if err != nil {
				servicesErr = "service not reachable: " + err.Error()
				return
			}
			c.Close()
		}
	})
	if servicesErr != "" {
		// Never skip: .ci/run starts Redis and NATS, and a skipped contract
		// test would read as a pass.
		t.Fatalf("Redis and NATS are required (%s); start them (.ci/run does) or set ELLIPSIS_TEST_REDIS_URL / ELLIPSIS_TEST_NATS_URL", servicesErr)
	}
}

// backend is where Redis state lives in a test.
type backend struct {
	name   string
	mini   bool
	pubsub string // redisconn.PubSubClassic or PubSubSharded
}

// testPubSub is the Pub/Sub mode of tests that do not vary it.
const testPubSub = redisconn.PubSubClassic

// backends: Redis 7 with each Pub/Sub mode, and miniredis (classic only:
// it has no SPUBLISH).
var backends = []backend{
	{name: "redis", pubsub: redisconn.PubSubClassic},
	{name: "redis-sharded", pubsub: redisconn.PubSubSharded},
	{name: "miniredis", mini: true, pubsub: redisconn.PubSubClassic},
}

// forEachBackend runs f as a parallel subtest per backend: the same
// contract on Redis 7 and on miniredis.
func forEachBackend(t *testing.T, f func(t *testing.T, be backend)) {
	t.Helper()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			f(t, be)
		})
	}
}

func testLogger() *zap.Logger {
	if os.Getenv("ELLIPSIS_TEST_LOG") != "" {
		l, _ := zap.NewDevelopment()
		return l
	}
	return zap.NewNop()
}

// redisURLFor returns the Redis URL of a backend, starting a miniredis
// (with ClockTTL, so key TTLs run on its clock) for the mini one.
func redisURLFor(t testing.TB, be backend) (string, *miniredis.Miniredis) {
	if !be.mini {
		return testRedisURL, nil
	}
	mr := miniredis.RunT(t)
	mr.ClockTTL(true)
	return "redis://" + mr.Addr(), mr
}

// cleanupKeys deletes every key under prefix (SCAN, never KEYS).
func cleanupKeys(rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		rdb.Del(ctx, keys[:n]...)
		keys = keys[n:]
	}
}

// env is one test's world: a config with unique prefixes, Redis and NATS
// clients of the test itself, and the workers it started.
type env struct {
	t     *testing.T
	be    backend
	mr    *miniredis.Miniredis
	cfg   config.Config
	names names.Names
	rdb   *redis.Client
	nc    *nats.Conn

	mu      sync.Mutex
	workers []*Server
	regs    []*prometheus.Registry
}

func newEnv(t *testing.T, be backend, mods ...func(*config.Config)) *env {
	t.Helper()
	requireServices(t)
	id := randHex(5)
	cfg := config.Dev()
	cfg.AdminAddr = ""
	cfg.NATSURL = testNATSURL
	cfg.SubjectPrefix = "t" + id
	cfg.KeyPrefix = "t-" + id + ":"
	cfg.TypingTTL = testTTL
	cfg.TypingThrottle = testThrottle
	cfg.TypingRefresh = 600 * time.Millisecond
	cfg.TypingIdleStop = 500 * time.Millisecond
	cfg.SweepInterval = testSweep
	cfg.WorkerShards = 4
	cfg.LogLevel = "warn"
	var mr *miniredis.Miniredis
	cfg.RedisURL, mr = redisURLFor(t, be)
	cfg.RedisPubSub = be.pubsub
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
	nc, err := nats.Connect(testNATSURL, nats.Name("presence-worker-test"))
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
		if !be.mini {
			cleanupKeys(rdb, cfg.KeyPrefix)
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
	opts.Config, opts.Logger, opts.Registry = cfg, testLogger(), reg
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
		sum += gatherSum(e.t, r, name, want)
	}
	return sum
}

func gatherSum(t testing.TB, r *prometheus.Registry, name string, want map[string]string) float64 {
	mfs, err := r.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

// processed is how many command payloads the workers have finished
// (applied, found invalid, or failed).
func (e *env) processed() float64 { return e.metric("ellipsis_worker_commands_total", nil) }

// eventually polls cond until it holds or waitLong passes.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
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

// received is one room event off Redis Pub/Sub.
type received struct {
	ev  protocol.RoomEvent
	raw string
	err error
	at  time.Time
}

// stream receives the events of some rooms' channels, as a gateway does.
type stream struct {
	t  *testing.T
	ch chan received
}

// subscribe subscribes to the rooms' channels and returns once Redis has
// confirmed every subscription.
func (e *env) subscribe(rooms ...string) *stream {
	e.t.Helper()
	return subscribeRooms(e.t, e.rdb, e.names, e.be.pubsub, rooms...)
}

// subscribeRooms subscribes rooms' channels with SUBSCRIBE, or SSUBSCRIBE
// when pubsub is redisconn.PubSubSharded.
func subscribeRooms(t *testing.T, rdb *redis.Client, n names.Names, pubsub string, rooms ...string) *stream {
	t.Helper()
	ctx := context.Background()
	var chans []string
	for _, r := range rooms {
		chans = append(chans, n.RoomChannel(r))
	}
	var ps *redis.PubSub
	if pubsub == redisconn.PubSubSharded {
		ps = rdb.SSubscribe(ctx, chans...)
	} else {
		ps = rdb.Subscribe(ctx, chans...)
	}
	for range chans {
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatalf("subscribe: %v", err)
		}
	}
	s := &stream{t: t, ch: make(chan received, 4096)}
	msgs := ps.Channel()
	go func() {
		defer close(s.ch)
		for m := range msgs {
			ev, err := protocol.DecodeRoomEvent([]byte(m.Payload))
			if err == nil && m.Channel != n.RoomChannel(ev.Room) {
				err = &protocol.FieldError{Field: "room", Reason: "event on channel " + m.Channel}
			}
			s.ch <- received{ev: ev, raw: m.Payload, err: err, at: time.Now()}
		}
	}()
	t.Cleanup(func() { ps.Close() })
	return s
}

// next returns the next event within d.
func (s *stream) next(d time.Duration) (received, bool) {
	select {
	case r, ok := <-s.ch:
		if ok && r.err != nil {
			s.t.Fatalf("bad room event %q: %v", r.raw, r.err)
		}
		return r, ok
	case <-time.After(d):
		return received{}, false
	}
}

// expect asserts that the next event, within d, is typ for (room, user),
// with reason for typing_stop.
func (s *stream) expect(typ, room, user, reason string, d time.Duration) received {
	s.t.Helper()
	r, ok := s.next(d)
	if !ok {
		s.t.Fatalf("no %s %s/%s %s within %s", typ, room, user, reason, d)
	}
	ev := r.ev
	if ev.Type != typ || ev.Room != room || ev.User != user || ev.Reason != reason {
		s.t.Fatalf("got %s, want %s room=%q user=%q reason=%q", r.raw, typ, room, user, reason)
	}
	return r
}

// expectNone asserts that no event arrives within d.
func (s *stream) expectNone(d time.Duration) {
	s.t.Helper()
	if r, ok := s.next(d); ok {
		s.t.Fatalf("unexpected event %s", r.raw)
	}
}

// drain returns every event arriving within d.
func (s *stream) drain(d time.Duration) []received {
	var out []received
	deadline := time.After(d)
	for {
		select {
		case r, ok := <-s.ch:
			if !ok {
				return out
			}
			if r.err != nil {
				s.t.Fatalf("bad room event %q: %v", r.raw, r.err)
			}
			out = append(out, r)
		case <-deadline:
			return out
		}
	}
}
