// Package hub keeps which local connections joined or watch which rooms,
// fans room events out to the members and summarizes them for the
// watchers (docs/protocol.md, "Redis", "Gateway → client" and "Watching
// rooms"; docs/ARCHITECTURE.md). Subscriptions are the [pubsub.Broker]'s
// business: the hub counts one subscriber per membership and per watch, so
// a room has one subscription per gateway, and never touches Redis itself.
//
// # Files
//
//   - hub.go: options, lifecycle, lock order.
//   - rooms.go: room state (sharded), join, hold, release, leave, fan-out.
//   - snapshot.go: [Hub.Sync] (join and sync) and syncHolds, the one
//     snapshot → self filter → release sequence after the holds, for join,
//     sync, the push after an overflow and resync alike.
//   - resync.go: per-room resync with its own jittered backoff.
//   - summary.go: summary mode for big rooms (coalesced typing frames).
//   - watch.go: watchers of rooms (watch, unwatch) and their summaries,
//     one watch tick per WatchInterval over the rooms that changed.
//   - flights.go: shared snapshot requests, at most one in flight and one
//     queued per room; every asker's snapshot was read after its hold began.
//
// # Holds: joining without losing events
//
// A member that waits for a snapshot (join, sync, resync) is "held": room
// events for it are buffered instead of sent. [Hub.Release] then queues the
// snapshot frame and, once no hold is left, the buffered events,
// atomically with respect to the fan-out of that room. Every buffered event
// happened after the hold began, so replaying them over the snapshot gives
// the right final state per user (typing state is last-writer-wins per
// user). If the buffer overflows (more than PendingLimit events while
// held) the events are dropped and one more snapshot is pushed.
//
// # Lock order
//
// Rooms are spread over shardCount shards by a hash of their name. Each
// shard's mutex guards only its map of rooms; each room has its own mutex
// for its members, holds and buffers, and the fan-out of an event into a
// room holds that room's mutex only. A shard mutex may be held while a
// room mutex is taken (join, leave: shard → room), never the other way
// round, and no hub mutex is held across a network call (subscriptions and
// snapshots are awaited with none held) or while calling the broker. The
// resyncer's mutex is taken alone; the summarizer's and the watch ticker's
// are leaves (summary.go, watch.go). Member.SendEvent, SendSnapshot, SendRoomSummary and
// Watcher.SendSummary are called under a room's mutex and must not call
// back into the hub.
package hub

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/pubsub"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
)

// Errors of [Hub.Join] and [Hub.Sync].
var (
	// ErrUnavailable: the room's subscription could not be confirmed in
	// time (Redis down or slow) or was refused; clients get error
	// unavailable.
	ErrUnavailable = errors.New("hub: room subscription unavailable")
	// ErrRefused is [pubsub.ErrRefused]: Redis refused the room channel's
	// subscription (an ACL without the room channels' pattern). Errors
	// wrapping it wrap ErrUnavailable too.
	ErrRefused = pubsub.ErrRefused
	// ErrSnapshot wraps the snapshot request's error (backend.Reason
	// tells why).
	ErrSnapshot = errors.New("hub: snapshot unavailable")
	// ErrNotMember: Sync of a room the member has not joined.
	ErrNotMember = errors.New("hub: not a member of the room")
	// ErrAborted: the caller's commit refused the join (shutting down).
	ErrAborted = errors.New("hub: join aborted")
	// ErrClosed: the hub is closed (gateway shutting down).
	ErrClosed = errors.New("hub: closed")
)

// Member is one local connection as seen by the hub.
type Member interface {
	// User is the member's user id, for the self filter. It must not change
	// and must be cheap: it is called under a room's lock.
	User() string
	// SendEvent queues one room event (typing_start or typing_stop, as
	// published) of room without blocking, and reports whether it was
	// taken; key is its scope key, [EventKey] of its user and thread. A
	// member whose socket is slow may conflate it: keep only the latest
	// event per (room, key), that is per (room, thread, user), until its
	// socket drains (docs/protocol.md, "Order and loss"). It must never
	// call back into the hub.
	SendEvent(room, key string, frame []byte) bool
	// SendSnapshot queues a snapshot frame of room (joined, or typing)
	// without blocking: never dropped, and it supersedes the room's events
	// the member conflated before it (all of them older than the hold the
	// snapshot was read after). It must never call back into the hub.
	SendSnapshot(room string, frame []byte) bool
	// SendRoomSummary queues the typing snapshot of a room in summary
	// mode (summary.go) without blocking: as SendSnapshot, but a member
	// that has not written the room's previous summary may replace it in
	// its place (docs/protocol.md, "Order and loss"). It must never call
	// back into the hub.
	SendRoomSummary(room string, frame []byte) bool
}

// Backend is the part of the gateway's backend (backend.NATS) the hub
// uses: who is typing in a room, the workers' snapshot over NATS.
type Backend interface {
	// Snapshot must honour ctx's deadline.
	Snapshot(ctx context.Context, room string) (protocol.Snapshot, error)
}

// Defaults of [Options] zero values: the defaults of
// ELLIPSIS_SNAPSHOT_TIMEOUT and ELLIPSIS_OUTBOUND_QUEUE (shared/config's
// table; TestPackageDefaultsAreTheTable in services/gateway holds them
// equal).
const (
	DefaultReadyTimeout = 2 * time.Second
	DefaultPendingLimit = 256
)

// Options configure a [Hub].
type Options struct {
	// Broker subscribes room channels; the hub starts it in Start and
	// closes it in Close.
	Broker pubsub.Broker
	// Names builds room channels (key prefix).
	Names names.Names
	// Backend answers the snapshots of Sync, resyncs and [Hub.Snapshot],
	// through the shared flights (flights.go).
	Backend Backend
	// ReadyTimeout bounds one Sync (subscription confirmation and snapshot
	// together) and one resync snapshot (ELLIPSIS_SNAPSHOT_TIMEOUT). Zero
	// means [DefaultReadyTimeout].
	ReadyTimeout time.Duration
	// PendingLimit is how many events are buffered per held member before
	// they are dropped and a resync is needed (ELLIPSIS_OUTBOUND_QUEUE).
	// Zero means [DefaultPendingLimit].
	PendingLimit int
	// SummaryMembers: a room with more local members than this is in
	// summary mode (summary.go; ELLIPSIS_ROOM_SUMMARY_MEMBERS). Zero means
	// [DefaultSummaryMembers].
	SummaryMembers int
	// SummaryInterval is the least time between two summaries of a room
	// (ELLIPSIS_ROOM_SUMMARY_INTERVAL). Zero means
	// [DefaultSummaryInterval].
	SummaryInterval time.Duration
	// WatchInterval is the least time between two summaries of a watched
	// room to one watcher (watch.go; ELLIPSIS_WATCH_INTERVAL). Zero means
	// [DefaultWatchInterval].
	WatchInterval time.Duration
	// Metrics must not be nil.
	Metrics *metrics.Metrics
	// Logger may be nil (no logs).
	Logger *zap.Logger
}

// Hub is the room registry and fan-out of one gateway. Its methods are
// safe for concurrent use.
type Hub struct {
	opts    Options
	log     *zap.Logger
	met     *metrics.Metrics
	broker  pubsub.Broker
	shards  [shardCount]shard
	resync  *resyncer
	flights *flights // shared snapshot requests (flights.go)
	summary *summarizer
	watch   *watchTicker // watchers' summaries (watch.go)

	closed  atomic.Bool
	started atomic.Bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	badEvent *ratelog.Logger // rate-limits "invalid room event" warnings
}

var _ pubsub.Handler = (*Hub)(nil)

// New returns a hub; it does no I/O until [Hub.Start].
func New(opts Options) *Hub {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	if opts.PendingLimit <= 0 {
		opts.PendingLimit = DefaultPendingLimit
	}
	if opts.SummaryMembers <= 0 {
		opts.SummaryMembers = DefaultSummaryMembers
	}
	if opts.SummaryInterval <= 0 {
		opts.SummaryInterval = DefaultSummaryInterval
	}
	if opts.WatchInterval <= 0 {
		opts.WatchInterval = DefaultWatchInterval
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{
		opts:     opts,
		log:      log,
		met:      opts.Metrics,
		broker:   opts.Broker,
		ctx:      ctx,
		cancel:   cancel,
		badEvent: ratelog.New(log, time.Minute),
	}
	for i := range h.shards {
		h.shards[i].rooms = map[string]*room{}
	}
	h.resync = newResyncer(h)
	h.summary = newSummarizer(h)
	h.watch = newWatchTicker(h)
	h.flights = newFlights(opts.Backend, opts.ReadyTimeout, opts.Metrics)
	return h
}

// Start starts the broker's links, the resync dispatcher, the summary
// and watch tickers; [Hub.Close] stops them.
func (h *Hub) Start() {
	if h.closed.Load() || h.started.Swap(true) {
		return
	}
	h.wg.Add(3)
	go h.resync.run()
	go h.summary.run()
	go h.watch.run()
	h.broker.Start(h)
}

// Close closes the broker and waits for the hub's goroutines. Members are
// not told; the gateway closes its connections itself. Safe to call twice.
func (h *Hub) Close() {
	if h.closed.Swap(true) {
		return
	}
	h.cancel()
	h.resync.stop()
	h.flights.close()
	h.broker.Close()
	h.wg.Wait()
}

// Health is the broker's cached link state, for /readyz (no I/O).
func (h *Hub) Health() pubsub.Health { return h.broker.Health() }

// HandleMessage is one room event from the broker ([pubsub.Handler]).
func (h *Hub) HandleMessage(channel, payload string) { h.fanOut(channel, payload) }

// HandleRestored resyncs the rooms of channels whose events may have been
// lost ([pubsub.Handler]): only those rooms get a snapshot.
func (h *Hub) HandleRestored(channels []string) {
	for _, c := range channels {
		if room, ok := h.opts.Names.RoomFromChannel(c); ok {
			h.resync.enqueue(room)
		}
	}
}

// Resync pushes a fresh snapshot to every member of every room (the
// gateway calls it after a NATS reconnect). Each room is retried with its
// own backoff until it succeeds. It never blocks.
func (h *Hub) Resync() {
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		rooms := make([]string, 0, len(sh.rooms))
		for r := range sh.rooms {
			rooms = append(rooms, r)
		}
		sh.mu.Unlock()
		for _, r := range rooms {
			h.resync.enqueue(r)
		}
	}
}
