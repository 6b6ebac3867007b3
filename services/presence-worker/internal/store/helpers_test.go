package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
)

// The store tests run against the Redis of this machine (override with
// ELLIPSIS_TEST_REDIS_URL), with a unique key prefix per test, and against
// miniredis (one server per test) for the same contract. Set
// ELLIPSIS_TEST_LOG=1 to see the store's logs. (The worker's tests, one
// directory up, share these shapes: backend, stream.)
var testRedisURL = envOr("ELLIPSIS_TEST_REDIS_URL", "redis://127.0.0.1:6379")

// waitLong bounds waits for things that should happen at once; it only
// matters when a test fails.
const waitLong = 5 * time.Second

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

// requireServices fails the test when the machine's Redis is not
// reachable (never a skip: these tests are the contract).
func requireServices(t testing.TB) {
	t.Helper()
	servicesOnce.Do(func() {
		p, err := url.Parse(testRedisURL)
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
	})
	if servicesErr != "" {
		t.Fatalf("Redis is required (%s); start it (.ci/run does) or set ELLIPSIS_TEST_REDIS_URL", servicesErr)
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

// testRateLog is the store's RateLog in tests: every line, unlimited.
type testRateLog struct{ log *zap.Logger }

func (r testRateLog) Warn(_, msg string, fields ...zap.Field)  { r.log.Warn(msg, fields...) }
func (r testRateLog) Error(_, msg string, fields ...zap.Field) { r.log.Error(msg, fields...) }

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

func start(room, user, name, conn string, seq uint64) protocol.Command {
	return protocol.Command{V: 1, Op: protocol.OpStart, Room: room, User: user, Name: name, Conn: conn, Seq: seq}
}

func stop(room, user, conn string, seq uint64) protocol.Command {
	return protocol.Command{V: 1, Op: protocol.OpStop, Room: room, User: user, Conn: conn, Seq: seq}
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

// newMetrics builds the store's collectors under the worker's names
// (ellipsis_worker_*) and registers them on reg; private is unused (the
// worker's signature, so the tests read the same).
func newMetrics(reg *prometheus.Registry, _ bool) (*Metrics, error) {
	const ns, sub = "ellipsis", "worker"
	m := &Metrics{
		ScriptDuration:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "script_duration_seconds"}, []string{"script"}),
		RedisErrors:     prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "redis_errors_total"}),
		EventsPublished: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "events_published_total"}, []string{"type"}),
		ExpiredStops:    prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "expired_stops_total"}),
		SweepLag:        prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "sweep_lag_seconds"}),
	}
	for _, c := range []prometheus.Collector{m.ScriptDuration, m.RedisErrors, m.EventsPublished, m.ExpiredStops, m.SweepLag} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
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
