package worker

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/shared/promreg"
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
	invalidPayloads *prometheus.CounterVec // {field}
	snapshots       *prometheus.CounterVec // {outcome}: ok, bad_request, unavailable, internal
	queued          prometheus.Gauge       // commands waiting in the shards' queues, all shards
	snapshotsCut    *prometheus.CounterVec // {reason}: max, payload
	natsEvents      *prometheus.CounterVec // {result}: published, dropped, failed (natsevents.go)
	// nats is nats_errors_total {kind} and nats_connected (see watchNATS).
	nats *natsconn.Metrics
}

// Metric name parts: every collector is ellipsis_worker_<name>.
const metricNamespace, metricSubsystem = "ellipsis", "worker"

// natsReplyError is the worker's own kind of nats_errors_total: a snapshot
// reply that could not be published.
const natsReplyError = "reply"

// newMetrics builds the collectors and registers them on reg. A collector
// that reg already holds (a second worker on a shared registry) is reused,
// so two workers in one process add up instead of failing. A private
// registry is this worker's alone, and also gets the process and Go
// runtime collectors; a shared registry's owner adds them once.
func newMetrics(reg *prometheus.Registry, private bool) (*metrics, error) {
	set := promreg.NewSet(reg, true)
	m := &metrics{Metrics: newStoreMetrics(set)}
	m.addWorkerMetrics(set)
	if private {
		promreg.Add(set, collectors.NewGoCollector())
		promreg.Add(set, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if err := set.Err(); err != nil {
		return nil, err
	}
	nats, err := natsconn.NewMetrics(reg, natsconn.MetricsOpts{
		Namespace: metricNamespace, Subsystem: metricSubsystem, Service: "worker", ZeroBefore: "it is made", Reuse: true,
		Kinds: []string{natsconn.KindSlowConsumer, natsconn.KindDisconnect, natsconn.KindAsync, natsReplyError},
	})
	if err != nil {
		return nil, err
	}
	m.nats = nats
	m.exportZeros()
	return m, nil
}

// newStoreMetrics builds the store's collectors and adds them to set.
func newStoreMetrics(set *promreg.Set) store.Metrics {
	const ns, sub = metricNamespace, metricSubsystem
	counter := func(name, help string) prometheus.Counter {
		return promreg.Add(set, prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}))
	}
	return store.Metrics{
		ScriptDuration: promreg.Add(set, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "script_duration_seconds",
			Help:    "Round trip of one Lua script call (or one pipeline of them) to Redis, retries included, by script.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"script"})),
		ExpiredStops: counter("expired_stops_total",
			"typing_stop events published by this worker's sweeper: expiries, and stops whose publication the event rate limit deferred."),
		SweepLag: promreg.Add(set, prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "sweep_lag_seconds",
			Help:    "How late a due room was swept: Redis TIME at the sweep minus the room's due time in the sweep index.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		})),
		RedisErrors: counter("redis_errors_total", "Failed Redis calls, each failed attempt counted (retried or not)."),
		EventsPublished: promreg.Add(set, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "events_published_total",
			Help: "Room events published on Redis Pub/Sub, by type (typing_start, typing_stop).",
		}, []string{"type"})),
	}
}

// addWorkerMetrics builds the worker's own collectors (besides the store's
// and the NATS pair) and adds them to set.
func (m *metrics) addWorkerMetrics(set *promreg.Set) {
	counters := func(name, help string, label ...string) *prometheus.CounterVec {
		return promreg.Add(set, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricNamespace, Subsystem: metricSubsystem, Name: name, Help: help,
		}, label))
	}
	m.commands = counters("commands_total",
		"Typing commands handled, by op (start, stop, leave, disconnect, unknown; other) and outcome ("+outcomeLabels()+"; shed and overflow: dropped because the command's shard queue was past its start room or full).",
		"op", "outcome")
	m.invalidPayloads = counters("invalid_payloads_total",
		"NATS payloads dropped by validation, by the first bad field (json, v, op, room, rooms, thread, user, name, activity, conn, seq, ts_ms, ttl_ms, cmds; other).", "field")
	m.snapshots = counters("snapshots_total", "Snapshot requests answered, by outcome (ok, bad_request, unavailable, internal; other).", "outcome")
	m.snapshotsCut = counters("snapshots_cut_total",
		"Snapshot replies listing fewer typists than total, by reason: max (ELLIPSIS_SNAPSHOT_MAX), payload (cut further to fit the NATS max_payload).", "reason")
	m.natsEvents = counters("nats_events_total",
		"Room events for the NATS room event subjects (ELLIPSIS_NATS_EVENTS), by result: published (handed to the NATS client), dropped (the event queue was full), failed (the NATS client refused it: connection closed, reconnect buffer full).",
		"result")
	m.queued = promreg.Add(set, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metricNamespace, Subsystem: metricSubsystem, Name: "queued_commands",
		Help: "Commands waiting in the worker's shard queues (all shards; each queue holds at most 1024).",
	}))
}

// exportZeros exports the snapshot cut reasons and the NATS event results
// as zero from the start (the NATS error kinds are natsconn's), as the
// gateway does: an alert on rate() or increase() then sees the first one
// (a series born at 1 has no increase to show) and the dashboard
// (deploy/monitoring) finds the series.
func (m *metrics) exportZeros() {
	for _, reason := range []string{"max", "payload"} {
		m.snapshotsCut.WithLabelValues(reason)
	}
	for _, result := range []string{natsEventPublished, natsEventDropped, natsEventFailed} {
		m.natsEvents.WithLabelValues(result)
	}
}

// watchNATS makes nats_connected report connected() from now on; it is
// read at every scrape and must not block (nats.go's IsConnected takes the
// connection's lock only).
func (m *metrics) watchNATS(connected func() bool) { m.nats.WatchConnection(connected) }

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
		"user": true, "name": true, "conn": true, "seq": true, "ts_ms": true,
		"thread": true, "activity": true, "ttl_ms": true, "cmds": true}
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
