package worker

import (
	"errors"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// metrics are the worker's Prometheus collectors, all prefixed
// ellipsis_worker_. See README.md for what each one tells an operator.
type metrics struct {
	// store.Metrics are the store's: script_duration_seconds,
	// redis_errors_total, events_published_total, expired_stops_total,
	// sweep_lag_seconds.
	store.Metrics
	commands        *prometheus.CounterVec // {op, outcome}
	natsErrors      *prometheus.CounterVec // {kind}
	invalidPayloads *prometheus.CounterVec // {field}
	snapshots       *prometheus.CounterVec // {outcome}: ok, bad_request, unavailable, internal
	queued          prometheus.Gauge       // commands waiting in the shards' queues, all shards
	snapshotsCut    *prometheus.CounterVec // {reason}: max, payload
	natsEvents      *prometheus.CounterVec // {result}: published, dropped, failed (natsevents.go)

	// natsConnected is read by the nats_connected gauge at each scrape;
	// nil until the connection exists (see watchNATS).
	natsConnected atomic.Pointer[func() bool]
}

// newMetrics builds the collectors and registers them on reg. A collector
// that reg already holds (a second worker on a shared registry) is reused,
// so two workers in one process add up instead of failing.
func newMetrics(reg *prometheus.Registry, private bool) (*metrics, error) {
	const ns, sub = "ellipsis", "worker"
	m := &metrics{
		Metrics: store.Metrics{
			ScriptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Namespace: ns, Subsystem: sub, Name: "script_duration_seconds",
				Help:    "Round trip of one Lua script call (or one pipeline of them) to Redis, retries included, by script.",
				Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
			}, []string{"script"}),
			ExpiredStops: prometheus.NewCounter(prometheus.CounterOpts{
				Namespace: ns, Subsystem: sub, Name: "expired_stops_total",
				Help: "typing_stop events published by this worker's sweeper: expiries, and stops whose publication the event rate limit deferred.",
			}),
			SweepLag: prometheus.NewHistogram(prometheus.HistogramOpts{
				Namespace: ns, Subsystem: sub, Name: "sweep_lag_seconds",
				Help:    "How late a due room was swept: Redis TIME at the sweep minus the room's due time in the sweep index.",
				Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
			}),
			RedisErrors: prometheus.NewCounter(prometheus.CounterOpts{
				Namespace: ns, Subsystem: sub, Name: "redis_errors_total",
				Help: "Failed Redis calls, each failed attempt counted (retried or not).",
			}),
			EventsPublished: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: ns, Subsystem: sub, Name: "events_published_total",
				Help: "Room events published on Redis Pub/Sub, by type (typing_start, typing_stop).",
			}, []string{"type"}),
		},
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "commands_total",
			Help: "Typing commands handled, by op (start, stop, leave, disconnect, unknown; other) and outcome (" + outcomeLabels() + "; shed and overflow: dropped because the command's shard queue was past its start room or full).",
		}, []string{"op", "outcome"}),
		natsErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "nats_errors_total",
			Help: "NATS problems by kind: slow_consumer, disconnect, async, reply.",
		}, []string{"kind"}),
		invalidPayloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "invalid_payloads_total",
			Help: "NATS payloads dropped by validation, by the first bad field (json, v, op, room, rooms, user, name, conn, seq, ts_ms; other).",
		}, []string{"field"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "snapshots_total",
			Help: "Snapshot requests answered, by outcome (ok, bad_request, unavailable, internal; other).",
		}, []string{"outcome"}),
		snapshotsCut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "snapshots_cut_total",
			Help: "Snapshot replies listing fewer typists than total, by reason: max (ELLIPSIS_SNAPSHOT_MAX), payload (cut further to fit the NATS max_payload).",
		}, []string{"reason"}),
		natsEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "nats_events_total",
			Help: "Room events for the NATS room event subjects (ELLIPSIS_NATS_EVENTS), by result: published (handed to the NATS client), dropped (the event queue was full), failed (the NATS client refused it: connection closed, reconnect buffer full).",
		}, []string{"result"}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "queued_commands",
			Help: "Commands waiting in the worker's shard queues (all shards; each queue holds at most 1024).",
		}),
	}
	var err error
	reg1 := func(c prometheus.Collector) prometheus.Collector {
		if err != nil {
			return c
		}
		if e := reg.Register(c); e != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(e, &are) {
				return are.ExistingCollector
			}
			err = e
		}
		return c
	}
	m.commands = reg1(m.commands).(*prometheus.CounterVec)
	m.ScriptDuration = reg1(m.ScriptDuration).(*prometheus.HistogramVec)
	m.ExpiredStops = reg1(m.ExpiredStops).(prometheus.Counter)
	m.SweepLag = reg1(m.SweepLag).(prometheus.Histogram)
	m.RedisErrors = reg1(m.RedisErrors).(prometheus.Counter)
	m.natsErrors = reg1(m.natsErrors).(*prometheus.CounterVec)
	m.invalidPayloads = reg1(m.invalidPayloads).(*prometheus.CounterVec)
	m.EventsPublished = reg1(m.EventsPublished).(*prometheus.CounterVec)
	m.snapshots = reg1(m.snapshots).(*prometheus.CounterVec)
	m.queued = reg1(m.queued).(prometheus.Gauge)
	m.snapshotsCut = reg1(m.snapshotsCut).(*prometheus.CounterVec)
	m.natsEvents = reg1(m.natsEvents).(*prometheus.CounterVec)
	// On a registry shared by two workers the first one's gauge stays: it
	// reports that worker's connection.
	reg1(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: ns, Subsystem: sub, Name: "nats_connected",
		Help: "1 while the worker's NATS connection is up, 0 while it is down or reconnecting (and before it is made).",
	}, func() float64 {
		if f := m.natsConnected.Load(); f != nil && (*f)() {
			return 1
		}
		return 0
	}))
	// Export the NATS error kinds and the snapshot cut reasons as zero from
	// the start, as the gateway does: an alert on rate() or increase()
	// then sees the first one (a series born at 1 has no increase to show)
	// and the dashboard (deploy/monitoring) finds the series.
	for _, kind := range []string{"slow_consumer", "disconnect", "async", "reply"} {
		m.natsErrors.WithLabelValues(kind)
	}
	for _, reason := range []string{"max", "payload"} {
		m.snapshotsCut.WithLabelValues(reason)
	}
	for _, result := range []string{natsEventPublished, natsEventDropped, natsEventFailed} {
		m.natsEvents.WithLabelValues(result)
	}
	if private {
		// A private registry is this worker's alone: add the process and Go
		// runtime collectors. A shared registry's owner adds them once.
		reg1(collectors.NewGoCollector())
		reg1(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// watchNATS makes nats_connected report connected() from now on; it is
// read at every scrape and must not block (nats.go's IsConnected takes the
// connection's lock only).
func (m *metrics) watchNATS(connected func() bool) { m.natsConnected.Store(&connected) }

// Label values that come from a NATS payload (any service on the subjects
// can publish one) are mapped to fixed sets, so no publisher can create new
// time series: a value outside its set counts as labelOther (Prometheus
// keeps every series for the life of the process). cmd.Op is checked by
// protocol.DecodeCommand already; the mapping also guards callers that
// pass an undecoded command.
const labelOther = "other"

var (
	opLabels = map[string]bool{protocol.OpStart: true, protocol.OpStop: true, protocol.OpLeave: true,
		protocol.OpDisconnect: true, "unknown": true}
	fieldLabels = map[string]bool{"json": true, "v": true, "op": true, "room": true, "rooms": true,
		"user": true, "name": true, "conn": true, "seq": true, "ts_ms": true}
	snapshotLabels = map[string]bool{"ok": true, protocol.CodeBadRequest: true,
		protocol.CodeUnavailable: true, protocol.CodeInternal: true}
)

// boundedLabel returns v when set holds it, labelOther otherwise.
func boundedLabel(set map[string]bool, v string) string {
	if set[v] {
		return v
	}
	return labelOther
}

// command counts one command in commands_total: op (opLabel) and the
// outcome, whose label is [store.Outcome.String] (a closed set).
func (m *metrics) command(op string, o store.Outcome) {
	m.commands.WithLabelValues(opLabel(op), o.String()).Inc()
}

// outcomeLabels are the outcome label values of commands_total, for its
// help text.
func outcomeLabels() string {
	var b strings.Builder
	for i, o := range store.Outcomes() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(o.String())
	}
	return b.String()
}

// opLabel is the op label of commands_total.
func opLabel(op string) string { return boundedLabel(opLabels, op) }

// fieldLabel is the field label of invalid_payloads_total: the first bad
// field of a command, an index cut off (rooms[17] -> rooms).
func fieldLabel(field string) string {
	if i := strings.IndexByte(field, '['); i >= 0 {
		field = field[:i]
	}
	return boundedLabel(fieldLabels, field)
}

// snapshotLabel is the outcome label of snapshots_total.
func snapshotLabel(outcome string) string { return boundedLabel(snapshotLabels, outcome) }
