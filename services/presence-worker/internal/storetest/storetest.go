// Package storetest is what the tests of the presence worker's packages
// (worker and internal/store) share: the Redis backends every contract test
// runs on (Redis 7 with each Pub/Sub mode, and miniredis), a room-event
// stream read off Redis Pub/Sub as a gateway reads it, and a metrics sum.
// The environment (ELLIPSIS_TEST_REDIS_URL, ELLIPSIS_TEST_NATS_URL), ids,
// waits and logs come from package testkit. Only tests import this
// package.
package storetest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Backend is where Redis state lives in a test.
type Backend struct {
	Name   string
	Mini   bool   // a miniredis of the test's own
	PubSub string // redisconn.PubSubClassic or PubSubSharded
}

// PubSub is the Pub/Sub mode of tests that do not vary it.
const PubSub = redisconn.PubSubClassic

// Backends: Redis 7 with each Pub/Sub mode, and miniredis (classic only:
// it has no SPUBLISH).
var Backends = []Backend{
	{Name: "redis", PubSub: redisconn.PubSubClassic},
	{Name: "redis-sharded", PubSub: redisconn.PubSubSharded},
	{Name: "miniredis", Mini: true, PubSub: redisconn.PubSubClassic},
}

// ForEachBackend runs f as a parallel subtest per backend: the same
// contract on Redis 7 and on miniredis.
func ForEachBackend(t *testing.T, f func(t *testing.T, be Backend)) {
	t.Helper()
	for _, be := range Backends {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			f(t, be)
		})
	}
}

// Kinds are the store kinds ELLIPSIS_STORE selects, each under the
// same contract.
var Kinds = []string{config.StoreZSet, config.StoreKeys}

// ForEachKindAndBackend runs f as a parallel subtest per store kind and
// backend (t itself runs in parallel too).
func ForEachKindAndBackend(t *testing.T, f func(t *testing.T, be Backend, kind string)) {
	t.Parallel()
	for _, kind := range Kinds {
		for _, be := range Backends {
			t.Run(kind+"/"+be.Name, func(t *testing.T) {
				t.Parallel()
				f(t, be, kind)
			})
		}
	}
}

// RedisURLFor returns the Redis URL of a backend: testkit.RedisURL, or a
// new miniredis (with ClockTTL, so key TTLs run on its clock) for the mini
// one, which it also returns.
func RedisURLFor(t testing.TB, be Backend) (string, *miniredis.Miniredis) {
	if !be.Mini {
		return testkit.RedisURL(), nil
	}
	mr := miniredis.RunT(t)
	mr.ClockTTL(true)
	return "redis://" + mr.Addr(), mr
}

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// Main is the TestMain of a package whose tests take Redis down: go-redis
// logs every failed dial through a process-wide logger, which the outage
// tests would flood; unless ELLIPSIS_TEST_LOG is set, it is silenced. Only
// a test binary calls this.
func Main(m *testing.M) {
	if os.Getenv("ELLIPSIS_TEST_LOG") == "" {
		redis.SetLogger(quietRedisLog{})
	}
	os.Exit(m.Run())
}

// Received is one room event off Redis Pub/Sub.
type Received struct {
	Ev  protocol.RoomEvent
	Raw string
	Err error // the payload is no room event, or on another room's channel
	At  time.Time
}

// Stream receives the events of some rooms' channels, as a gateway does.
type Stream struct {
	t  testing.TB
	ch chan Received
}

// SubscribeRooms subscribes rooms' channels with SUBSCRIBE, or SSUBSCRIBE
// when pubsub is redisconn.PubSubSharded, and returns once Redis has
// confirmed every subscription. It unsubscribes when the test ends.
func SubscribeRooms(t testing.TB, rdb *redis.Client, n names.Names, pubsub string, rooms ...string) *Stream {
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
	s := &Stream{t: t, ch: make(chan Received, 4096)}
	msgs := ps.Channel()
	go func() {
		defer close(s.ch)
		for m := range msgs {
			ev, err := protocol.DecodeRoomEvent([]byte(m.Payload))
			if err == nil && m.Channel != n.RoomChannel(ev.Room) {
				err = &protocol.FieldError{Field: "room", Reason: "event on channel " + m.Channel}
			}
			s.ch <- Received{Ev: ev, Raw: m.Payload, Err: err, At: time.Now()}
		}
	}()
	t.Cleanup(func() { ps.Close() })
	return s
}

// C is the stream's channel, for a test that selects on it (bad events
// included: check Err).
func (s *Stream) C() <-chan Received { return s.ch }

// Next returns the next event within d; a bad one fails the test.
func (s *Stream) Next(d time.Duration) (Received, bool) {
	select {
	case r, ok := <-s.ch:
		if ok && r.Err != nil {
			s.t.Fatalf("bad room event %q: %v", r.Raw, r.Err)
		}
		return r, ok
	case <-time.After(d):
		return Received{}, false
	}
}

// Expect asserts that the next event, within d, is typ for (room, user),
// with reason for typing_stop.
func (s *Stream) Expect(typ, room, user, reason string, d time.Duration) Received {
	s.t.Helper()
	r, ok := s.Next(d)
	if !ok {
		s.t.Fatalf("no %s %s/%s %s within %s", typ, room, user, reason, d)
	}
	ev := r.Ev
	if ev.Type != typ || ev.Room != room || ev.User != user || ev.Reason != reason {
		s.t.Fatalf("got %s, want %s room=%q user=%q reason=%q", r.Raw, typ, room, user, reason)
	}
	return r
}

// ExpectNone asserts that no event arrives within d.
func (s *Stream) ExpectNone(d time.Duration) {
	s.t.Helper()
	if r, ok := s.Next(d); ok {
		s.t.Fatalf("unexpected event %s", r.Raw)
	}
}

// Drain returns every event arriving within d.
func (s *Stream) Drain(d time.Duration) []Received {
	var out []Received
	deadline := time.After(d)
	for {
		select {
		case r, ok := <-s.ch:
			if !ok {
				return out
			}
			if r.Err != nil {
				s.t.Fatalf("bad room event %q: %v", r.Raw, r.Err)
			}
			out = append(out, r)
		case <-deadline:
			return out
		}
	}
}

// GatherSum sums the series of metric name on r whose labels include
// want: counter and gauge values, histogram sample counts.
func GatherSum(t testing.TB, r *prometheus.Registry, name string, want map[string]string) float64 {
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

// ThroughputMix is the throughput benchmarks' typing episode of one
// connection, seq from seq on: a start that makes the user visible, three
// more starts, and a stop; five commands. The three come at once, inside the
// throttle window, so they are throttled refreshes (the common case of a
// burst, and of several devices); a client refreshing every 4 s past a 2 s
// window is "refreshed" instead, which adds one SET and one PUBLISH, about
// the cost of a start.
func ThroughputMix(room, user, conn string, seq uint64) []protocol.Command {
	c := protocol.Command{V: 1, Op: "start", Room: room, User: user, Name: "Some Body", Conn: conn}
	out := make([]protocol.Command, 0, 5)
	for i := range 4 {
		c.Seq = seq + uint64(i)
		out = append(out, c)
	}
	c.Op, c.Seq, c.Name = "stop", seq+4, ""
	return append(out, c)
}

// BenchRedis is the command benchmarks' client of the test Redis, with a
// pool of 64 connections (more than their goroutines), closed when tb
// ends.
func BenchRedis(tb testing.TB) *redis.Client {
	tb.Helper()
	opts := testkit.RedisOptions(tb)
	opts.PoolSize = 64
	rdb := redis.NewClient(opts)
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// BenchNames are names under a fresh "t-bench-<hex>:" key prefix, whose
// keys in rdb are deleted when tb ends.
func BenchNames(tb testing.TB, rdb *redis.Client) names.Names {
	tb.Helper()
	n := names.New("t-bench-"+testkit.RandHex(4)+":", "")
	tb.Cleanup(func() { testkit.CleanupKeys(rdb, n.KeyPrefix()) })
	return n
}
