package store

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// The store tests run against the Redis of the test environment
// (testkit.RedisURL), with a unique key prefix per test, and against
// miniredis (one server per test) for the same contract: the backends and
// room-event streams of package storetest, which the worker's tests share.
// Set ELLIPSIS_TEST_LOG=1 to see the store's logs.

// waitLong bounds waits for things that should happen at once; it only
// matters when a test fails.
const waitLong = 5 * time.Second

// requireServices fails the test when the test Redis is not reachable
// (never a skip: these tests are the contract).
func requireServices(t testing.TB) {
	t.Helper()
	testkit.RequireReachable(t, testkit.RedisURL())
}

// testRateLog is the store's RateLog in tests: every line, unlimited.
type testRateLog struct{ log *zap.Logger }

func (r testRateLog) Warn(_, msg string, fields ...zap.Field)  { r.log.Warn(msg, fields...) }
func (r testRateLog) Error(_, msg string, fields ...zap.Field) { r.log.Error(msg, fields...) }

func start(room, user, name, conn string, seq uint64) protocol.Command {
	return protocol.Command{V: 1, Op: protocol.OpStart, Room: room, User: user, Name: name, Conn: conn, Seq: seq}
}

func stop(room, user, conn string, seq uint64) protocol.Command {
	return protocol.Command{V: 1, Op: protocol.OpStop, Room: room, User: user, Conn: conn, Seq: seq}
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
