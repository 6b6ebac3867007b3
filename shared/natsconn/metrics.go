package natsconn

import (
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ellipsis-chat/ellipsis/shared/promreg"
)

// MetricsOpts names a service's NATS metric pair (docs/metrics.md):
// <Namespace>_<Subsystem>_nats_errors_total{kind} and
// <Namespace>_<Subsystem>_nats_connected.
type MetricsOpts struct {
	Namespace, Subsystem string // "ellipsis", "gateway"
	// Service names the connection's owner in the help texts ("gateway").
	Service string
	// ZeroBefore ends nats_connected's help: what the gauge reads 0 before
	// ("Start" for the gateway, "it is made" for the worker).
	ZeroBefore string
	// Kinds are the kind label values, exported at zero from the start so
	// that an alert on rate() or increase() sees the first problem (a
	// series born at 1 has no increase to show): the Kind* constants the
	// service's OnError gets, and any of its own.
	Kinds []string
	// Reuse, when true, keeps a collector reg already holds instead of
	// failing (a second worker on a shared registry): the error counts of
	// both add up, and the first one's gauge stays and reports its
	// connection.
	Reuse bool
}

// Metrics is a service's NATS metric pair: the problems on its NATS
// connection by kind, and whether the connection is up. The log lines
// about the problems are rate-limited; the counter is not.
type Metrics struct {
	errors    *prometheus.CounterVec // label kind
	connected atomic.Pointer[func() bool]
}

// NewMetrics creates the pair of o and registers it on reg (see
// [MetricsOpts.Reuse] for a collector reg already holds). It returns reg's
// error otherwise.
func NewMetrics(reg prometheus.Registerer, o MetricsOpts) (*Metrics, error) {
	m := &Metrics{}
	errs, err := promreg.Register(reg, o.Reuse, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: o.Namespace, Subsystem: o.Subsystem, Name: "nats_errors_total",
		Help: "NATS problems by kind: " + strings.Join(o.Kinds, ", ") + ".",
	}, []string{"kind"}))
	if err != nil {
		return nil, err
	}
	m.errors = errs
	if _, err := promreg.Register(reg, o.Reuse, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: o.Namespace, Subsystem: o.Subsystem, Name: "nats_connected",
		Help: "1 while the " + o.Service + "'s NATS connection is up, 0 while it is down or reconnecting (and before " + o.ZeroBefore + ").",
	}, m.up)); err != nil {
		return nil, err
	}
	for _, k := range o.Kinds {
		m.errors.WithLabelValues(k)
	}
	return m, nil
}

// up is the nats_connected gauge's value: 1 while the watched connection
// is up, 0 before [Metrics.WatchConnection].
func (m *Metrics) up() float64 {
	if f := m.connected.Load(); f != nil && (*f)() {
		return 1
	}
	return 0
}

// Error counts one NATS problem of kind (one of [MetricsOpts.Kinds]).
func (m *Metrics) Error(kind string) { m.errors.WithLabelValues(kind).Inc() }

// WatchConnection makes nats_connected report connected() from now on; it
// is read at every scrape, so it must not block ([Conn.Connected] does
// not).
func (m *Metrics) WatchConnection(connected func() bool) { m.connected.Store(&connected) }
