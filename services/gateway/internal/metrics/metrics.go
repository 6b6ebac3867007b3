// Package metrics holds the gateway's Prometheus metrics, all named
// ellipsis_gateway_*. One [Metrics] belongs to one gateway server; it is
// registered on the registry given to [New], never on a global one.
package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace and subsystem of every metric: ellipsis_gateway_*.
const (
	Namespace = "ellipsis"
	Subsystem = "gateway"
)

// Metrics are the gateway's counters, gauges and histograms. The zero value
// is not usable: use [New].
type Metrics struct {
	// Connections is the number of open WebSocket connections.
	Connections prometheus.Gauge
	// JoinedRooms is the number of (connection, room) memberships in the hub.
	JoinedRooms prometheus.Gauge
	// RedisSubscriptions is the number of room channels subscribed on Redis.
	RedisSubscriptions prometheus.Gauge
	// RateLimited counts inbound frames rejected by the per-connection token bucket.
	RateLimited prometheus.Counter
	// SlowConsumerCloses counts connections closed with 1013 because their
	// outbound queue was full.
	SlowConsumerCloses prometheus.Counter
	// Resyncs counts resync rounds: snapshots pushed to every joined room
	// after a Redis or NATS reconnect (one per round, not per room).
	Resyncs prometheus.Counter
	// EventsDropped counts room events not delivered to one member (queue full,
	// or the member was already closing) and undecodable room events.
	EventsDropped prometheus.Counter
	// DeliveryDelay is the time from a room event's ts_ms (Redis TIME at the
	// worker) to the moment the gateway queued it for its local members, in
	// seconds; one observation per event.
	DeliveryDelay prometheus.Histogram

	framesIn       *prometheus.CounterVec // label type
	framesOut      *prometheus.CounterVec // label type
	errors         *prometheus.CounterVec // label code
	closes         *prometheus.CounterVec // label code
	commands       *prometheus.CounterVec // label op
	framesInCache  sync.Map               // type -> prometheus.Counter
	framesOutCache sync.Map               // type -> prometheus.Counter
}

// New creates the metrics and registers them on reg. It fails when one of
// them is already registered there (two gateways sharing a registry).
func New(reg prometheus.Registerer) (*Metrics, error) {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: Namespace, Subsystem: Subsystem, Name: name, Help: help}
	}
	m := &Metrics{
		Connections:        prometheus.NewGauge(prometheus.GaugeOpts(opts("connections", "Open WebSocket connections."))),
		JoinedRooms:        prometheus.NewGauge(prometheus.GaugeOpts(opts("joined_rooms", "Joined (connection, room) pairs."))),
		RedisSubscriptions: prometheus.NewGauge(prometheus.GaugeOpts(opts("redis_subscriptions", "Room channels subscribed on Redis Pub/Sub."))),
		RateLimited:        prometheus.NewCounter(prometheus.CounterOpts(opts("rate_limited_total", "Inbound frames rejected by the per-connection rate limit."))),
		SlowConsumerCloses: prometheus.NewCounter(prometheus.CounterOpts(opts("slow_consumer_closes_total", "Connections closed with 1013 because their outbound queue was full."))),
		Resyncs:            prometheus.NewCounter(prometheus.CounterOpts(opts("resyncs_total", "Resync rounds after a Redis or NATS reconnect."))),
		EventsDropped:      prometheus.NewCounter(prometheus.CounterOpts(opts("events_dropped_total", "Room events not delivered to a member, or undecodable."))),
		DeliveryDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: Subsystem, Name: "delivery_delay_seconds",
			Help:    "Delay from a room event's ts_ms (worker, Redis TIME) to its fan-out to local members, in seconds.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .2, .5, 1, 2.5},
		}),
		framesIn:  prometheus.NewCounterVec(prometheus.CounterOpts(opts("frames_in_total", "Inbound client frames by type (\"invalid\" when undecodable).")), []string{"type"}),
		framesOut: prometheus.NewCounterVec(prometheus.CounterOpts(opts("frames_out_total", "Outbound frames queued by type.")), []string{"type"}),
		errors:    prometheus.NewCounterVec(prometheus.CounterOpts(opts("errors_total", "Error frames sent by code.")), []string{"code"}),
		closes:    prometheus.NewCounterVec(prometheus.CounterOpts(opts("closes_total", "Closed connections by WebSocket close code (RFC 6455; 1006 when no close frame).")), []string{"code"}),
		commands:  prometheus.NewCounterVec(prometheus.CounterOpts(opts("commands_published_total", "Typing commands published on NATS by op.")), []string{"op"}),
	}
	for _, c := range []prometheus.Collector{
		m.Connections, m.JoinedRooms, m.RedisSubscriptions, m.RateLimited, m.SlowConsumerCloses,
		m.Resyncs, m.EventsDropped, m.DeliveryDelay, m.framesIn, m.framesOut, m.errors, m.closes, m.commands,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func cached(cache *sync.Map, vec *prometheus.CounterVec, label string) prometheus.Counter {
	if c, ok := cache.Load(label); ok {
		return c.(prometheus.Counter)
	}
	c := vec.WithLabelValues(label)
	cache.Store(label, c)
	return c
}

// FrameIn counts one inbound frame of type t. Callers pass only known frame
// types (or "invalid"), so the label set stays bounded.
func (m *Metrics) FrameIn(t string) { cached(&m.framesInCache, m.framesIn, t).Inc() }

// FrameOut counts n outbound frames of type t (a server frame type).
func (m *Metrics) FrameOut(t string, n int) {
	cached(&m.framesOutCache, m.framesOut, t).Add(float64(n))
}

// Error counts one error frame of code.
func (m *Metrics) Error(code string) { m.errors.WithLabelValues(code).Inc() }

// Close counts one closed connection with its close code.
func (m *Metrics) Close(code int) { m.closes.WithLabelValues(strconv.Itoa(code)).Inc() }

// Command counts one published command of op.
func (m *Metrics) Command(op string) { m.commands.WithLabelValues(op).Inc() }
