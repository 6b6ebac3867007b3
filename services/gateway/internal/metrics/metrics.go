// Package metrics holds the gateway's Prometheus metrics, all named
// ellipsis_gateway_*. One [Metrics] belongs to one gateway server; it is
// registered on the registry given to [New], never on a global one.
package metrics

import (
	"sync"
	"time"

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
	// RedisLinks is the number of Redis Pub/Sub connections of the hub: 1,
	// or one per Cluster master with sharded Pub/Sub.
	RedisLinks prometheus.Gauge
	// RedisLinksDown is the number of those links that are not up now: no
	// connection answered its first PING yet, or one was lost or failed
	// and none answered since, or the link is refusing room channel
	// subscriptions (the links /readyz reports; 0 when all are up).
	RedisLinksDown prometheus.Gauge
	// RedisChannelMoves counts room channels resubscribed on another
	// Cluster master after their slot moved (resharding, failover).
	RedisChannelMoves prometheus.Counter
	// RedisLinkTimeouts counts Pub/Sub connections closed because they
	// missed a health PING (ELLIPSIS_PUBSUB_PING_TIMEOUT).
	RedisLinkTimeouts prometheus.Counter
	// RedisSubscribeRefused counts room channel (S)SUBSCRIBEs that Redis
	// answered with an error reply (a NOPERM from an ACL without the room
	// channels' pattern), one per channel and attempt, in
	// redis_subscribe_refused_total by label kind: Room ("room") a joined
	// room's channel (the joins waiting on it get unavailable), Probe
	// ("probe") a link's probe (its check channel, or a refused room no
	// join wants any more: on each connection's first round and each
	// health round while the link refuses; no join waits).
	RedisSubscribeRefused struct{ Room, Probe prometheus.Counter }
	// RateLimited counts inbound frames rejected by the per-connection token bucket.
	RateLimited prometheus.Counter
	// AbuseCloses counts connections closed with 1008 for sustained inbound
	// abuse: more than ELLIPSIS_INBOUND_MAX_REJECTED rate-limited frames
	// within the session's abuse window.
	AbuseCloses prometheus.Counter
	// WriteStallCloses counts connections closed with 1013 because a write
	// to them did not finish within ELLIPSIS_WRITE_STALL (a peer that
	// stopped reading).
	WriteStallCloses prometheus.Counter
	// SlowConsumerCloses counts connections closed with 1013 because
	// the answers they asked for filled their outbound queue (2 ×
	// ELLIPSIS_OUTBOUND_QUEUE + one room's conflated events): they ask
	// faster than they read.
	SlowConsumerCloses prometheus.Counter
	// Conflating is the number of connections conflating now: their
	// outbound queue passed its high-water mark (ELLIPSIS_OUTBOUND_QUEUE/2)
	// and their room events are kept as the latest per (room, user).
	Conflating prometheus.Gauge
	// ConflatedEvents counts room events never written to one connection
	// because a later one of the same (room, user), or a snapshot of the
	// room, superseded them while it conflated.
	ConflatedEvents prometheus.Counter
	// Resyncs counts room resyncs: a typing snapshot pushed to a room's
	// members after its channel was restored or NATS reconnected (one per
	// room and attempt).
	Resyncs prometheus.Counter
	// SummaryRooms is the number of rooms in summary mode now (more than
	// ELLIPSIS_ROOM_SUMMARY_MEMBERS local members, or leaving it).
	SummaryRooms prometheus.Gauge
	// RoomSummaries counts summaries sent: one per room and interval in
	// which it changed, each written to every joined member.
	RoomSummaries prometheus.Counter
	// WatchedRooms is the number of rooms watched by at least one local
	// connection (docs/protocol.md, "Watching rooms"); each has one Redis
	// subscription, shared with its members.
	WatchedRooms prometheus.Gauge
	// Watches is the number of (connection, watched room) pairs.
	Watches prometheus.Gauge
	// WatchSummaries counts summary frames queued to watchers: at most one
	// per watched room, connection and ELLIPSIS_WATCH_INTERVAL, and only
	// when it changed for that connection.
	WatchSummaries prometheus.Counter
	// EventsDropped counts room events not delivered to one member (queue full,
	// or the member was already closing) and undecodable room events.
	EventsDropped prometheus.Counter
	// DeliveryDelay is the time from a room event's ts_ms (Redis TIME when
	// the worker published it) to the moment the gateway finished writing it
	// to one client's socket, in seconds: one observation per frame written
	// (see [Metrics.Written]), so queueing behind a slow reader and holds
	// during a join or resync are included.
	DeliveryDelay prometheus.Histogram

	subscribeRefused *prometheus.CounterVec // label kind
	framesIn         *prometheus.CounterVec // label type
	framesOut        *prometheus.CounterVec // label type
	errors           *prometheus.CounterVec // label code
	closes           *prometheus.CounterVec // label code
	commands         *prometheus.CounterVec // label op
	snapshots        *prometheus.CounterVec // label result (snapshots.go)
	watchRefusals    *prometheus.CounterVec // label code (WatchRefused)
	framesInCache    sync.Map               // type -> prometheus.Counter
	framesOutCache   sync.Map               // type -> prometheus.Counter
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
		RedisLinks:         prometheus.NewGauge(prometheus.GaugeOpts(opts("redis_pubsub_links", "Redis Pub/Sub connections: 1, or one per Cluster master with sharded Pub/Sub."))),
		RedisLinksDown:     prometheus.NewGauge(prometheus.GaugeOpts(opts("redis_pubsub_links_down", "Redis Pub/Sub connections not up now (never answered a PING yet, lost or failed with none answered since, or refusing room channel subscriptions); /readyz is 503 while it is above 0."))),
		RedisChannelMoves:  prometheus.NewCounter(prometheus.CounterOpts(opts("redis_channel_moves_total", "Room channels resubscribed on another Redis Cluster master after their slot moved."))),
		RedisLinkTimeouts:  prometheus.NewCounter(prometheus.CounterOpts(opts("redis_pubsub_ping_timeouts_total", "Redis Pub/Sub connections closed and redialed after missing a health PING."))),
		subscribeRefused:   prometheus.NewCounterVec(prometheus.CounterOpts(opts("redis_subscribe_refused_total", "Room channel (S)SUBSCRIBEs Redis answered with an error reply (e.g. NOPERM: the ACL lacks the room channels' pattern), by kind: room (a joined room's channel; the joins waiting on it get unavailable) or probe (a link's check channel or last refused room, on each connection's first round and each health round while refusing; no join waits).")), []string{"kind"}),
		RateLimited:        prometheus.NewCounter(prometheus.CounterOpts(opts("rate_limited_total", "Inbound frames rejected by the per-connection rate limit."))),
		AbuseCloses:        prometheus.NewCounter(prometheus.CounterOpts(opts("abuse_closes_total", "Connections closed with 1008 for sustained inbound abuse (too many rate-limited frames within 10 s)."))),
		SlowConsumerCloses: prometheus.NewCounter(prometheus.CounterOpts(opts("slow_consumer_closes_total", "Connections closed with 1013 because the answers they asked for filled their outbound queue (2 x ELLIPSIS_OUTBOUND_QUEUE)."))),
		WriteStallCloses:   prometheus.NewCounter(prometheus.CounterOpts(opts("write_stall_closes_total", "Connections closed with 1013 because a write did not finish within ELLIPSIS_WRITE_STALL."))),
		Conflating:         prometheus.NewGauge(prometheus.GaugeOpts(opts("conflating_connections", "Connections whose outbound queue passed its high-water mark (ELLIPSIS_OUTBOUND_QUEUE/2): their room events are kept as the latest per (room, user)."))),
		ConflatedEvents:    prometheus.NewCounter(prometheus.CounterOpts(opts("conflated_events_total", "Room events not written to a connection because a later event of the same (room, user), or a snapshot of the room, superseded them while it conflated."))),
		Resyncs:            prometheus.NewCounter(prometheus.CounterOpts(opts("resyncs_total", "Room resyncs (a snapshot pushed to the room's members) after a Redis link or NATS reconnect."))),
		SummaryRooms:       prometheus.NewGauge(prometheus.GaugeOpts(opts("summary_rooms", "Rooms in summary mode (more than ELLIPSIS_ROOM_SUMMARY_MEMBERS local members): their members get one coalesced typing frame per ELLIPSIS_ROOM_SUMMARY_INTERVAL instead of each event."))),
		RoomSummaries:      prometheus.NewCounter(prometheus.CounterOpts(opts("room_summaries_total", "Summaries of rooms in summary mode (one typing frame written to each member), at most one per room and ELLIPSIS_ROOM_SUMMARY_INTERVAL."))),
		WatchedRooms:       prometheus.NewGauge(prometheus.GaugeOpts(opts("watched_rooms", "Rooms watched by at least one connection of this gateway (one Redis subscription each, shared with the room's members)."))),
		Watches:            prometheus.NewGauge(prometheus.GaugeOpts(opts("watches", "Watched (connection, room) pairs."))),
		WatchSummaries:     prometheus.NewCounter(prometheus.CounterOpts(opts("watch_summaries_total", "Summary frames queued to connections watching a room: at most one per room, connection and ELLIPSIS_WATCH_INTERVAL, only when it changed."))),
		watchRefusals:      prometheus.NewCounterVec(prometheus.CounterOpts(opts("watch_refusals_total", "Rooms of watch frames refused, by code: bad_request, forbidden, watch_limit, rate_limited, unavailable.")), []string{"code"}),
		EventsDropped:      prometheus.NewCounter(prometheus.CounterOpts(opts("events_dropped_total", "Room events not delivered to a member, or undecodable."))),
		DeliveryDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: Subsystem, Name: "delivery_delay_seconds",
			Help:    "Delay from a room event's ts_ms (worker publish time, Redis TIME) to the frame written to a client socket, in seconds; one observation per frame.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .2, .5, 1, 2.5},
		}),
		framesIn:  prometheus.NewCounterVec(prometheus.CounterOpts(opts("frames_in_total", "Inbound client frames by type (\"invalid\" when undecodable).")), []string{"type"}),
		framesOut: prometheus.NewCounterVec(prometheus.CounterOpts(opts("frames_out_total", "Outbound frames queued by type.")), []string{"type"}),
		errors:    prometheus.NewCounterVec(prometheus.CounterOpts(opts("errors_total", "Error frames sent by code.")), []string{"code"}),
		closes:    prometheus.NewCounterVec(prometheus.CounterOpts(opts("closes_total", "Closed connections by WebSocket close code (RFC 6455; 1006 when no close frame).")), []string{"code"}),
		commands:  prometheus.NewCounterVec(prometheus.CounterOpts(opts("commands_published_total", "Typing commands published on NATS by op.")), []string{"op"}),
		snapshots: newSnapshotsVec(),
	}
	for _, c := range []prometheus.Collector{
		m.Connections, m.JoinedRooms, m.RedisSubscriptions, m.RedisLinks, m.RedisLinksDown, m.RedisChannelMoves, m.RedisLinkTimeouts, m.subscribeRefused, m.RateLimited, m.AbuseCloses, m.WriteStallCloses, m.SlowConsumerCloses, m.Conflating, m.ConflatedEvents,
		m.Resyncs, m.SummaryRooms, m.RoomSummaries, m.WatchedRooms, m.Watches, m.WatchSummaries, m.watchRefusals, m.EventsDropped, m.DeliveryDelay, m.framesIn, m.framesOut, m.errors, m.closes, m.commands, m.snapshots,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Export every error code at zero from the start, so that the error
	// frames panel and the alert on code="unavailable" (deploy/monitoring)
	// see the first one; the set is fixed and small.
	for code := range errorCodes {
		m.errors.WithLabelValues(code)
	}
	for code := range watchRefusalCodes {
		m.watchRefusals.WithLabelValues(code)
	}
	m.RedisSubscribeRefused.Room = m.subscribeRefused.WithLabelValues("room")
	m.RedisSubscribeRefused.Probe = m.subscribeRefused.WithLabelValues("probe")
	for _, r := range []string{SnapshotRequested, SnapshotShared, SnapshotRateLimited} {
		m.snapshots.WithLabelValues(r)
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

// FrameIn counts one inbound frame of type t: a client frame type,
// [FrameInvalid] or [FrameBinary]; anything else counts as [LabelOther].
func (m *Metrics) FrameIn(t string) {
	cached(&m.framesInCache, m.framesIn, bounded(frameInTypes, t)).Inc()
}

// FrameOut counts n outbound frames of type t (a server frame type; anything
// else counts as [LabelOther]).
func (m *Metrics) FrameOut(t string, n int) {
	cached(&m.framesOutCache, m.framesOut, bounded(frameOutTypes, t)).Add(float64(n))
}

// Written records that frame was written to a client socket: when it is a
// room event forwarded as published (it ends with `"ts_ms":<digits>}`, the
// worker's Redis TIME in unix ms), the time since ts_ms is observed in
// [Metrics.DeliveryDelay]. Frames the gateway makes itself (joined, typing,
// pong, error, left) carry no ts_ms and are skipped. It reads only the
// frame's last bytes and never allocates; a negative delay (clock skew
// between hosts) is not observed. now is when the write finished (the
// writer reads the clock once per drain, not once per frame).
func (m *Metrics) Written(frame []byte, now time.Time) {
	ts, ok := trailingTsMs(frame)
	if !ok {
		return
	}
	if d := now.Sub(time.UnixMilli(ts)); d >= 0 {
		m.DeliveryDelay.Observe(d.Seconds())
	}
}

// trailingTsMs parses the unix ms of a frame ending in `"ts_ms":<digits>}`.
// Inside a JSON string a quote is escaped, so the match is always the
// field, never text.
func trailingTsMs(frame []byte) (int64, bool) {
	const key = `"ts_ms":`
	i := len(frame) - 1
	if i < 0 || frame[i] != '}' {
		return 0, false
	}
	end := i
	for i > 0 && frame[i-1] >= '0' && frame[i-1] <= '9' {
		i--
	}
	if i == end || end-i > 18 || i < len(key) || string(frame[i-len(key):i]) != key {
		return 0, false
	}
	var ts int64
	for _, c := range frame[i:end] {
		ts = ts*10 + int64(c-'0')
	}
	return ts, true
}

// Error counts one error frame of code (a protocol error code; anything
// else counts as [LabelOther]).
func (m *Metrics) Error(code string) { m.errors.WithLabelValues(bounded(errorCodes, code)).Inc() }

// WatchRefused counts one room of a watch frame refused with code (one of
// the codes of a "watching" frame's refused list; anything else counts as
// [LabelOther]).
func (m *Metrics) WatchRefused(code string) {
	m.watchRefusals.WithLabelValues(bounded(watchRefusalCodes, code)).Inc()
}

// Close counts one closed connection with its close code, which may be the
// client's own: see [CloseLabel].
func (m *Metrics) Close(code int) { m.closes.WithLabelValues(CloseLabel(code)).Inc() }

// Command counts one published command of op (a command op; anything else
// counts as [LabelOther]).
func (m *Metrics) Command(op string) { m.commands.WithLabelValues(bounded(commandOps, op)).Inc() }
