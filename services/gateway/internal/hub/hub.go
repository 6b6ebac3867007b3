// Package hub keeps which local connections joined which rooms, subscribes
// the rooms' Redis Pub/Sub channels lazily, and fans room events out to the
// local members (PROTOCOL.md, "Redis" and "Self filter"; DESIGN.md).
//
// # Subscriptions
//
// Room events arrive by classic Pub/Sub (SUBSCRIBE) or sharded Pub/Sub
// (SSUBSCRIBE, Options.Sharded). All rooms share one go-redis PubSub
// connection, except with sharded Pub/Sub on Redis Cluster, where a shard
// channel can only be subscribed on the master that serves its hash slot:
// there the hub keeps one PubSub per master ("link") and subscribes each
// room's channel on its master's link. The first local member of a room
// subscribes names.RoomChannel(room); the last one leaving unsubscribes.
// Subscription changes are reconciled under one mutex against
// the current membership, so concurrent joins and leaves of a room always
// end in the right state. A join waits until Redis has confirmed the
// subscription (a PING with a token sent after SUBSCRIBE comes back) before
// the caller asks the workers for a snapshot, so no event published after the
// snapshot can be missed.
//
// # Holds: joining without losing events
//
// A member that waits for a snapshot (join, sync, resync) is "held": room
// events for it are buffered instead of sent. [Hub.Release] then queues the
// snapshot frame and, once no hold is left, the buffered events, atomically
// with respect to the fan-out. Because every buffered event happened after
// the hold began and before release, replaying them over the snapshot gives
// the right final state per user (typing state is last-writer-wins per user;
// a start for a user already shown is a refresh). If the buffer overflows
// (more than the pending limit of events while held) the events are dropped
// and Release reports it, and the caller pushes one more snapshot.
//
// # Redis Cluster slot moves
//
// When a slot moves to another master (resharding, or a failover that
// promotes a replica), Redis 7 ends the shard-channel subscriptions of
// that slot with a server-sent "sunsubscribe". The hub then asks go-redis
// to reload the slot map, subscribes the channel again on its new master
// (waiting up to moveWait for the map to show the move) and resyncs, since
// events may have been lost meanwhile. Every rebalanceInterval it also
// reloads the slot map and checks every channel against it, which catches
// a master that died and whose replica took over. A MOVED reply counts as
// a move of that slot; the CROSSSLOT reply to go-redis's one-command
// resubscribe after a reconnect is repaired one slot at a time (see
// serverError). Pub/Sub writes never carry the caller's deadline: a
// deadline already past fails the write as a timeout, and go-redis then
// drops the connection with every subscription on it.
//
// # Redis reconnects
//
// go-redis reconnects and resubscribes every channel by itself. The reader
// goroutine notices a Receive error; the first message it receives after
// that (the resubscribe confirmation) means the subscriptions are back, and
// the hub then resyncs: it holds every member of every room, requests a
// snapshot per room and pushes it as an unasked "typing" frame (events
// published while the connection was down are lost; the snapshot repairs
// the view). [Hub.Resync] does the same on demand (the gateway calls it after
// a NATS reconnect). A failed resync is retried until it succeeds, after
// 100 ms, then twice as long each time up to a second (a worker whose Redis
// pool is still reconnecting answers unavailable for a moment).
package hub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Errors of [Hub.Join].
var (
	// ErrUnavailable: the Redis subscription could not be set up or
	// confirmed in time (Redis down); clients get error unavailable.
	ErrUnavailable = errors.New("hub: redis subscription unavailable")
	// ErrClosed: the hub is closed (gateway shutting down).
	ErrClosed = errors.New("hub: closed")
)

// Member is one local connection as seen by the hub.
type Member interface {
	// User is the member's user id, for the self filter. It must not change
	// and must be cheap: it is called under the hub's lock.
	User() string
	// Send queues one text frame without blocking, and reports whether it
	// was queued. When the member's queue is full it closes itself (1013) and
	// returns false; it must never call back into the hub.
	Send(frame []byte) bool
}

// Snapshotter returns who is typing in a room (the workers' snapshot over
// NATS).
type Snapshotter func(ctx context.Context, room string) (protocol.Snapshot, error)

// Options configure a [Hub].
type Options struct {
	// Redis is the client whose connection pool hosts the hub's PubSub
	// connections: *redis.Client (standalone or Sentinel) or
	// *redis.ClusterClient. The caller owns and closes it.
	Redis redis.UniversalClient
	// Sharded selects sharded Pub/Sub (SSUBSCRIBE, Redis 7+) instead of
	// SUBSCRIBE; it must match the workers' ELLIPSIS_REDIS_PUBSUB.
	Sharded bool
	// WatchMaster, when set (Redis Sentinel), runs for the hub's life and
	// calls changed whenever Sentinel names a new master; the hub then
	// reconnects its Pub/Sub connection there and resyncs
	// (redisconn.Options.WatchMaster says why go-redis alone is late).
	WatchMaster func(ctx context.Context, changed func(addr string))
	// Names builds room channels (key prefix).
	Names names.Names
	// Snapshot is used by resyncs.
	Snapshot Snapshotter
	// ReadyTimeout bounds the wait for a subscription confirmation and a
	// resync snapshot. Zero means 2 seconds.
	ReadyTimeout time.Duration
	// PendingLimit is how many events are buffered per held member before
	// they are dropped and a resync is needed. Zero means 256.
	PendingLimit int
	// Metrics must not be nil.
	Metrics *metrics.Metrics
	// Logger may be nil (no logs).
	Logger *zap.Logger
}

type buffered struct {
	frame []byte
	typ   string
}

// membership is one member in one room.
type membership struct {
	holds    int        // > 0: events are buffered in buf
	buf      []buffered // events received while held, at most PendingLimit
	overflow bool       // buf overflowed while held: a resync is needed
}

// Hold is an outstanding hold of one member in one room, to be ended with
// [Hub.Release].
type Hold struct {
	room string
	m    Member
	ms   *membership
}

// link is one Pub/Sub connection and the channels subscribed on it.
type link struct {
	ps *redis.PubSub
	// addr is the master a per-master link (sharded Pub/Sub on Cluster)
	// subscribes on; "" for the hub's one shared link.
	addr string
	// channels subscribed on ps, as go-redis sees them; under Hub.subMu.
	channels map[string]bool
	// down is set while the connection is lost (readLoop); an empty link
	// that is down is closed by the rebalance loop. Under Hub.subMu.
	down bool
	// unsubPending counts our own SUNSUBSCRIBEs per channel whose
	// confirmation has not come back yet, to tell them from a master's
	// (a slot move); under Hub.subMu, reset when the connection is lost.
	unsubPending map[string]int
}

// Hub is the room registry and Redis fan-out of one gateway. Its methods
// are safe for concurrent use.
type Hub struct {
	opts Options
	log  *zap.Logger
	met  *metrics.Metrics
	// cluster is set for sharded Pub/Sub on Redis Cluster: one link per
	// master, found by the channel's hash slot.
	cluster *redis.ClusterClient

	mu     sync.Mutex
	rooms  map[string]map[Member]*membership
	pongs  map[string]chan struct{} // PING token -> closed when its PONG arrives
	closed bool

	subMu       sync.Mutex        // serialises (un)subscribes and link changes; taken before mu
	links       map[string]*link  // by link.addr; under subMu
	subscribed  map[string]*link  // channel -> the link it is subscribed on; under subMu
	orphans     map[string]string // channel -> the master that dropped it (slot moved); under subMu
	rebalanceCh chan struct{}     // asks rebalanceLoop for a round now (coalesced)

	pingSeq atomic.Uint64
	// resyncCh has room for one request: a resync asked while one is
	// already queued is coalesced into it (full: the request is dropped,
	// since the queued round will cover it).
	resyncCh chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	started  bool

	badEvent   rate.Sometimes // rate-limits "invalid room event" warnings
	resyncWarn rate.Sometimes // rate-limits "resync incomplete" warnings
}

// New returns a hub; it does no I/O until [Hub.Start].
func New(opts Options) *Hub {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 2 * time.Second
	}
	if opts.PendingLimit <= 0 {
		opts.PendingLimit = 256
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{
		opts:        opts,
		log:         log,
		met:         opts.Metrics,
		rooms:       map[string]map[Member]*membership{},
		pongs:       map[string]chan struct{}{},
		links:       map[string]*link{},
		subscribed:  map[string]*link{},
		orphans:     map[string]string{},
		rebalanceCh: make(chan struct{}, 1),
		resyncCh:    make(chan struct{}, 1),
		ctx:         ctx,
		cancel:      cancel,
		badEvent:    rate.Sometimes{First: 3, Interval: time.Minute},
		resyncWarn:  rate.Sometimes{First: 1, Interval: time.Minute},
	}
	if cc, ok := opts.Redis.(*redis.ClusterClient); ok && opts.Sharded {
		h.cluster = cc
		return h
	}
	h.links[""] = newLink(h.sharedPubSub(), "")
	h.met.RedisLinks.Set(1)
	return h
}

// sharedPubSub returns a new PubSub of the shared link on opts.Redis, for
// SSUBSCRIBE or SUBSCRIBE; no channels, so no I/O yet.
func (h *Hub) sharedPubSub() *redis.PubSub {
	if h.opts.Sharded {
		return h.opts.Redis.SSubscribe(h.ctx)
	}
	return h.opts.Redis.Subscribe(h.ctx)
}

// newLink returns an empty link on ps for the master at addr ("" for the
// shared link).
func newLink(ps *redis.PubSub, addr string) *link {
	return &link{ps: ps, addr: addr, channels: map[string]bool{}, unsubPending: map[string]int{}}
}

// startLinkLocked starts l's reader if the hub runs (links made before
// Start are started by Start); h.subMu is held.
func (h *Hub) startLinkLocked(l *link) {
	h.mu.Lock()
	start := h.started && !h.closed
	h.mu.Unlock()
	if start {
		h.wg.Add(1)
		go h.readLoop(l)
	}
}

// Start starts the Redis reader and the resync goroutine; [Hub.Close] stops
// them.
func (h *Hub) Start() {
	h.subMu.Lock() // h.links
	defer h.subMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started || h.closed {
		return
	}
	h.started = true
	h.wg.Add(2)
	for _, l := range h.links {
		h.wg.Add(1)
		go h.readLoop(l)
	}
	go h.resyncLoop()
	go h.rebalanceLoop()
	if h.opts.WatchMaster != nil {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.opts.WatchMaster(h.ctx, h.masterChanged)
		}()
	}
}

// masterChanged replaces the shared link with a new PubSub (go-redis's
// failover client dials the current master) subscribed to the same
// channels, closes the old one, and resyncs: events published on the new
// master before the switch was noticed are lost, and the snapshots repair
// the view.
func (h *Hub) masterChanged(addr string) {
	h.subMu.Lock()
	old := h.links[""]
	if old == nil {
		h.subMu.Unlock()
		return
	}
	l := newLink(h.sharedPubSub(), "")
	channels := make([]string, 0, len(old.channels))
	for c := range old.channels {
		channels = append(channels, c)
		delete(h.subscribed, c)
	}
	h.met.RedisSubscriptions.Sub(float64(len(channels)))
	h.links[""] = l
	ctx, cancel := context.WithTimeout(h.ctx, h.opts.ReadyTimeout)
	err := h.subscribeLocked(ctx, channels)
	cancel()
	h.startLinkLocked(l)
	h.subMu.Unlock()
	_ = old.ps.Close()
	h.log.Info("redis master changed (Sentinel); pubsub reconnected there, resyncing rooms", zap.String("master", addr), zap.Int("channels", len(channels)), zap.Error(err))
	h.Resync()
}

// Close closes the PubSub connection and waits for the hub's goroutines.
// Members are not told; the gateway closes its connections itself. Safe to
// call twice.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.subMu.Lock()
	for _, l := range h.links {
		_ = l.ps.Close()
	}
	h.subMu.Unlock()
	h.wg.Wait()
}

// Join adds m to room (if it is not a member yet) and holds it: room events
// for m are buffered until [Hub.Release]. For a new room it subscribes the
// room's channel and waits (bounded by ctx and ReadyTimeout) until Redis
// confirmed it. On error m is not added (an existing membership is kept and
// its hold released) and the error wraps [ErrUnavailable] or is [ErrClosed].
func (h *Hub) Join(ctx context.Context, room string, m Member) (*Hold, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	members := h.rooms[room]
	if members == nil {
		members = map[Member]*membership{}
		h.rooms[room] = members
	}
	ms := members[m]
	existed := ms != nil
	if !existed {
		ms = &membership{}
		members[m] = ms
		h.met.JoinedRooms.Inc()
	}
	ms.holds++
	hd := &Hold{room: room, m: m, ms: ms}
	h.mu.Unlock()
	if existed {
		return hd, nil
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.ReadyTimeout)
	defer cancel()
	if err := h.ensureSubscribed(ctx, room); err != nil {
		h.Leave(room, m)
		return nil, err
	}
	return hd, nil
}

// Hold holds an existing member of room (for sync); nil when m is not a
// member.
func (h *Hub) Hold(room string, m Member) *Hold {
	h.mu.Lock()
	defer h.mu.Unlock()
	ms := h.rooms[room][m]
	if ms == nil {
		return nil
	}
	ms.holds++
	return &Hold{room: room, m: m, ms: ms}
}

// Release ends a hold. It queues frame (of server frame type typ; nil for
// none) to the member and, if this was its last hold, the events buffered
// meanwhile, all under the lock that the fan-out takes, so nothing
// interleaves. It reports whether events were dropped while held (the
// caller should push a fresh snapshot). A hold whose member left the room
// meanwhile is ignored. Release must be called once per hold.
func (h *Hub) Release(hd *Hold, frame []byte, typ string) (overflowed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rooms[hd.room][hd.m] != hd.ms {
		return false
	}
	ms := hd.ms
	if frame != nil {
		h.deliver(hd.m, frame, typ)
	}
	ms.holds--
	if ms.holds > 0 {
		return false
	}
	for _, b := range ms.buf {
		h.deliver(hd.m, b.frame, b.typ)
	}
	ms.buf = nil
	overflowed, ms.overflow = ms.overflow, false
	return overflowed
}

// deliver sends one frame to m; h.mu is held.
func (h *Hub) deliver(m Member, frame []byte, typ string) bool {
	if m.Send(frame) {
		h.met.FrameOut(typ, 1)
		return true
	}
	h.met.EventsDropped.Inc()
	return false
}

// Leave removes m from room and unsubscribes the room's channel if m was
// its last local member. It reports whether m was a member.
func (h *Hub) Leave(room string, m Member) bool {
	return h.LeaveAll(m, room) == 1
}

// LeaveAll removes m from rooms and unsubscribes, in one command, the
// channels of the rooms it was the last local member of. It returns how
// many of rooms m was a member of.
func (h *Hub) LeaveAll(m Member, rooms ...string) int {
	n := 0
	var emptied []string
	h.mu.Lock()
	for _, room := range rooms {
		members := h.rooms[room]
		if _, ok := members[m]; !ok {
			continue
		}
		n++
		delete(members, m)
		h.met.JoinedRooms.Dec()
		if len(members) == 0 {
			delete(h.rooms, room)
			emptied = append(emptied, room)
		}
	}
	h.mu.Unlock()
	if len(emptied) > 0 {
		ctx, cancel := context.WithTimeout(h.ctx, h.opts.ReadyTimeout)
		defer cancel()
		if err := h.reconcile(ctx, emptied...); err != nil {
			h.log.Debug("unsubscribe failed (go-redis forgets the channels anyway)", zap.Strings("rooms", emptied), zap.Error(err))
		}
	}
	return n
}

// Members returns how many local members room has (for tests and metrics).
func (h *Hub) Members(room string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.rooms[room])
}

// ensureSubscribed subscribes room's channel if the room has local members
// and waits until Redis has processed the SUBSCRIBE: a PING with a unique
// token, written after it on the same connection, comes back.
func (h *Hub) ensureSubscribed(ctx context.Context, room string) error {
	if err := h.reconcile(ctx, room); err != nil {
		return fmt.Errorf("%w: subscribe: %v", ErrUnavailable, err)
	}
	token := "ellipsis-ready:" + strconv.FormatUint(h.pingSeq.Add(1), 10)
	ch := make(chan struct{})
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	h.pongs[token] = ch
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.pongs, token)
		h.mu.Unlock()
	}()
	channel := h.opts.Names.RoomChannel(room)
	h.subMu.Lock()
	l := h.subscribed[channel]
	_, moving := h.orphans[channel]
	h.subMu.Unlock()
	if moving {
		// Its slot is moving to another master: the rebalance loop
		// subscribes it there and then resyncs the room, which gives the
		// member every event it could have missed as a snapshot.
		return nil
	}
	if l == nil {
		return fmt.Errorf("%w: room left while subscribing", ErrUnavailable)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	// The write itself gets no deadline from ctx: a deadline already past
	// would fail it as a timeout, and go-redis would drop the connection
	// (and every subscription on it) as broken. ctx bounds the wait below.
	if err := l.ps.Ping(context.WithoutCancel(ctx), token); err != nil {
		return fmt.Errorf("%w: ping: %v", ErrUnavailable, err)
	}
	select {
	case <-ch:
		return nil
	case <-h.ctx.Done():
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("%w: subscription not confirmed in time", ErrUnavailable)
	}
}

// reconcile makes the subscriptions of rooms' channels match whether the
// rooms have local members now. Calls are serialised, and each one reads
// the membership afresh, so the last call always leaves the right state.
// Changes go out as one SUBSCRIBE and one UNSUBSCRIBE per link (per hash
// slot with sharded Pub/Sub: SSUBSCRIBE takes channels of one slot only).
func (h *Hub) reconcile(ctx context.Context, rooms ...string) error {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	var sub, unsub []string
	h.mu.Lock()
	for _, room := range rooms {
		want := len(h.rooms[room]) > 0
		channel := h.opts.Names.RoomChannel(room)
		_, orphan := h.orphans[channel]
		switch have := h.subscribed[channel] != nil || orphan; {
		case want && !have:
			sub = append(sub, channel)
		case !want && have:
			unsub = append(unsub, channel)
		}
	}
	h.mu.Unlock()
	var errs []error
	for _, c := range unsub {
		delete(h.orphans, c)
	}
	errs = append(errs, h.unsubscribeLocked(ctx, unsub, true))
	errs = append(errs, h.subscribeLocked(ctx, sub))
	return errors.Join(errs...)
}

// subscribeLocked subscribes channels, each on its link; h.subMu is held.
// go-redis records the channels even when the write fails, and subscribes
// them again on its next connection, so they count as subscribed. The
// writes get no deadline from ctx (see ensureSubscribed); ctx only bounds
// the slot map lookup.
func (h *Hub) subscribeLocked(ctx context.Context, channels []string) error {
	var errs []error
	wctx := context.WithoutCancel(ctx)
	for _, g := range h.groups(channels) {
		l, err := h.linkFor(ctx, g[0])
		if err != nil {
			// No slot map (Cluster unreachable): the channels stay
			// orphans and the rebalance loop subscribes them later.
			for _, c := range g {
				h.orphans[c] = ""
			}
			h.askRebalance()
			errs = append(errs, err)
			continue
		}
		for _, c := range g {
			h.subscribed[c] = l
			l.channels[c] = true
			delete(h.orphans, c)
		}
		h.met.RedisSubscriptions.Add(float64(len(g)))
		if h.opts.Sharded {
			errs = append(errs, l.ps.SSubscribe(wctx, g...))
		} else {
			errs = append(errs, l.ps.Subscribe(wctx, g...))
		}
	}
	return errors.Join(errs...)
}

// unsubscribeLocked unsubscribes channels from their links; h.subMu is held.
// With send false it only forgets them (a channel moving away from a master
// that no longer serves its slot: the master already ended it, or answers
// MOVED). The writes get no deadline from ctx (see ensureSubscribed).
func (h *Hub) unsubscribeLocked(ctx context.Context, channels []string, send bool) error {
	var errs []error
	wctx := context.WithoutCancel(ctx)
	for _, g := range h.groups(channels) {
		byLink := map[*link][]string{}
		for _, c := range g {
			if l := h.subscribed[c]; l != nil {
				byLink[l] = append(byLink[l], c)
				delete(h.subscribed, c)
				delete(l.channels, c)
			}
		}
		for l, cs := range byLink {
			h.met.RedisSubscriptions.Sub(float64(len(cs)))
			switch {
			case !send:
			case h.opts.Sharded:
				for _, c := range cs {
					l.unsubPending[c]++
				}
				errs = append(errs, l.ps.SUnsubscribe(wctx, cs...))
			default:
				errs = append(errs, l.ps.Unsubscribe(wctx, cs...))
			}
		}
	}
	return errors.Join(errs...)
}

// groups splits channels into the groups one (UN)SUBSCRIBE may carry: all
// of them for classic Pub/Sub, one group per hash slot for sharded (Redis
// answers CROSSSLOT to SSUBSCRIBE across slots).
func (h *Hub) groups(channels []string) [][]string {
	if len(channels) == 0 {
		return nil
	}
	if !h.opts.Sharded {
		return [][]string{channels}
	}
	bySlot := map[int][]string{}
	var order []int
	for _, c := range channels {
		slot := names.Slot(c)
		if bySlot[slot] == nil {
			order = append(order, slot)
		}
		bySlot[slot] = append(bySlot[slot], c)
	}
	out := make([][]string, 0, len(order))
	for _, slot := range order {
		out = append(out, bySlot[slot])
	}
	return out
}

// linkFor returns the link to subscribe channel on: the shared one, or
// with sharded Pub/Sub on Cluster the link of the master serving the
// channel's slot in go-redis's slot map, started if new. h.subMu is held.
func (h *Hub) linkFor(ctx context.Context, channel string) (*link, error) {
	if h.cluster == nil {
		return h.links[""], nil
	}
	node, err := h.cluster.MasterForKey(ctx, channel)
	if err != nil {
		return nil, fmt.Errorf("%w: slot map: %v", ErrUnavailable, err)
	}
	addr := node.Options().Addr
	if l := h.links[addr]; l != nil {
		return l, nil
	}
	l := newLink(node.SSubscribe(h.ctx), addr)
	h.links[addr] = l
	h.met.RedisLinks.Set(float64(len(h.links)))
	h.startLinkLocked(l)
	h.log.Info("redis cluster pubsub link opened", zap.String("master", addr))
	return l, nil
}

// Rebalancing (sharded Pub/Sub on Cluster).
const (
	// rebalanceInterval is how often every channel is checked against the
	// slot map.
	rebalanceInterval = 2 * time.Second
	// moveWait bounds how long a channel dropped by its master waits for
	// go-redis's slot map to name the new master before it is subscribed
	// wherever the map says (rebalance retries every moveRetry meanwhile).
	moveWait  = 3 * time.Second
	moveRetry = 100 * time.Millisecond
	// reloadSettle is how long a rebalance round waits after asking
	// go-redis to reload the slot map (CLUSTER SLOTS, one round trip).
	reloadSettle = 250 * time.Millisecond
)

// askRebalance asks for a rebalance round now; it never blocks.
func (h *Hub) askRebalance() {
	select {
	case h.rebalanceCh <- struct{}{}:
	default:
	}
}

// rebalanceLoop moves channels to the link of their slot's master: at
// once when a master dropped some (slot moved), and every
// rebalanceInterval. A round that moved channels resyncs the rooms.
func (h *Hub) rebalanceLoop() {
	defer h.wg.Done()
	if h.cluster == nil {
		return
	}
	t := time.NewTicker(rebalanceInterval)
	defer t.Stop()
	var waitingSince time.Time
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.rebalanceCh:
		case <-t.C:
			// go-redis reloads the slot map only every minute on its own,
			// or on MOVED replies, which a Pub/Sub-only client rarely gets.
			// The reload runs in the background: give it a moment.
			h.cluster.ReloadState(h.ctx)
			select {
			case <-h.ctx.Done():
				return
			case <-time.After(reloadSettle):
			}
		}
		moved, pending := h.rebalance(!waitingSince.IsZero() && time.Since(waitingSince) > moveWait)
		if moved > 0 {
			h.log.Info("room channels moved to their slots' new masters; resyncing", zap.Int("channels", moved))
			h.Resync()
		}
		if pending == 0 {
			waitingSince = time.Time{}
			continue
		}
		if waitingSince.IsZero() {
			waitingSince = time.Now()
		}
		h.cluster.ReloadState(h.ctx)
		select {
		case <-h.ctx.Done():
			return
		case <-time.After(moveRetry):
			h.askRebalance()
		}
	}
}

// rebalance moves every channel whose slot map master differs from its
// link's, and subscribes the orphans (channels a master dropped) on their
// master once the slot map names another one than the master that dropped
// them, or on whatever it names when force is set. It returns how many
// channels it moved and how many orphans still wait.
func (h *Hub) rebalance(force bool) (moved, pending int) {
	ctx, cancel := context.WithTimeout(h.ctx, h.opts.ReadyTimeout)
	defer cancel()
	h.subMu.Lock()
	defer h.subMu.Unlock()
	var move []string
	for c, l := range h.subscribed {
		node, err := h.cluster.MasterForKey(ctx, c)
		if err == nil && node.Options().Addr != l.addr {
			move = append(move, c)
		}
	}
	for c, from := range h.orphans {
		node, err := h.cluster.MasterForKey(ctx, c)
		if err != nil || (node.Options().Addr == from && !force) {
			pending++
			continue
		}
		move = append(move, c)
	}
	if len(move) == 0 {
		h.closeIdleLinksLocked()
		return 0, pending
	}
	_ = h.unsubscribeLocked(ctx, move, false)
	if err := h.subscribeLocked(ctx, move); err != nil {
		h.log.Warn("subscribing moved channels on their new master failed; retrying", zap.Error(err))
		h.askRebalance()
	}
	h.met.RedisChannelMoves.Add(float64(len(move)))
	h.closeIdleLinksLocked()
	return len(move), pending
}

// closeIdleLinksLocked closes the Cluster links that are down and hold no
// channel (their master died or left the cluster, and its channels moved);
// h.subMu is held.
func (h *Hub) closeIdleLinksLocked() {
	for addr, l := range h.links {
		if addr != "" && l.down && len(l.channels) == 0 {
			delete(h.links, addr)
			_ = l.ps.Close() // its readLoop sees ErrClosed; linkClosed finds nothing left
			h.log.Info("redis cluster pubsub link closed (master down, no channels left)", zap.String("master", addr))
		}
	}
	h.met.RedisLinks.Set(float64(len(h.links)))
}

// dropped handles a server-sent sunsubscribe of channel on l (its slot
// moved away from l's master): the channel becomes an orphan until the
// rebalance loop subscribes it on the new master.
func (h *Hub) dropped(l *link, channel string) {
	h.subMu.Lock()
	if n := l.unsubPending[channel]; n > 0 {
		// The confirmation of our own SUNSUBSCRIBE.
		if n == 1 {
			delete(l.unsubPending, channel)
		} else {
			l.unsubPending[channel] = n - 1
		}
		h.subMu.Unlock()
		return
	}
	if h.subscribed[channel] != l || h.cluster == nil {
		h.subMu.Unlock()
		return // already moved, or no slots to move (not Cluster)
	}
	delete(h.subscribed, channel)
	delete(l.channels, channel)
	h.orphans[channel] = l.addr
	h.met.RedisSubscriptions.Dec()
	h.subMu.Unlock()
	// go-redis keeps it in l's list (it has no way to forget a channel
	// without a SUNSUBSCRIBE, which this master would answer with MOVED):
	// a reconnect of l subscribes it there again and gets MOVED or
	// CROSSSLOT, which serverError handles.
	h.log.Info("redis master dropped a room channel (slot moved); resubscribing on the new master", zap.String("channel", channel), zap.String("master", l.addr))
	h.cluster.ReloadState(h.ctx)
	h.askRebalance()
}

// linkClosed handles a link whose PubSub was closed under it while the hub
// runs: go-redis closes a Cluster node's client when the node leaves the
// slot map (a failover moved its slots to a new address). Its channels
// become orphans, which the rebalance loop subscribes on their masters'
// links (new ones where needed).
func (h *Hub) linkClosed(l *link) {
	if h.cluster == nil {
		return // the shared link is closed only by Close
	}
	h.subMu.Lock()
	n := len(l.channels)
	if h.links[l.addr] != l && n == 0 {
		h.subMu.Unlock()
		return // closed by closeIdleLinksLocked
	}
	if h.links[l.addr] == l {
		delete(h.links, l.addr)
		h.met.RedisLinks.Set(float64(len(h.links)))
	}
	for c := range l.channels {
		if h.subscribed[c] == l {
			delete(h.subscribed, c)
			h.orphans[c] = ""
			h.met.RedisSubscriptions.Dec()
		}
	}
	h.subMu.Unlock()
	h.log.Warn("redis cluster pubsub link closed (its master left the slot map); moving its channels", zap.String("master", l.addr), zap.Int("channels", n))
	h.askRebalance()
}

// serverError handles an error reply on a Cluster link (the connection is
// fine):
//
//   - MOVED / ASK: a (S)SUBSCRIBE went to a master that no longer serves
//     the slot (a stale slot map, or go-redis resubscribing after a
//     reconnect): the link's channels of that slot become orphans, and the
//     rebalance loop subscribes them on the new master and resyncs.
//   - CROSSSLOT: go-redis resubscribed every channel of the link in one
//     SSUBSCRIBE after a reconnect, which Redis refuses across slots: the
//     hub subscribes them again one slot at a time and resyncs.
func (h *Hub) serverError(l *link, reply string) {
	switch f := strings.Fields(reply); {
	case len(f) >= 2 && (f[0] == "MOVED" || f[0] == "ASK"):
		slot, err := strconv.Atoi(f[1])
		if err != nil {
			break
		}
		h.subMu.Lock()
		n := 0
		for c := range l.channels {
			if names.Slot(c) == slot && h.subscribed[c] == l {
				delete(h.subscribed, c)
				delete(l.channels, c)
				h.orphans[c] = l.addr
				h.met.RedisSubscriptions.Dec()
				n++
			}
		}
		h.subMu.Unlock()
		if n > 0 {
			h.log.Info("redis master does not serve a subscribed slot; resubscribing on its new master", zap.String("master", l.addr), zap.Int("slot", slot), zap.Int("channels", n))
		}
		h.cluster.ReloadState(h.ctx)
		h.askRebalance()
		return
	case len(f) >= 1 && f[0] == "CROSSSLOT":
		h.subMu.Lock()
		channels := make([]string, 0, len(l.channels))
		for c := range l.channels {
			channels = append(channels, c)
		}
		var errs []error
		for _, g := range h.groups(channels) {
			errs = append(errs, l.ps.SSubscribe(h.ctx, g...))
		}
		h.subMu.Unlock()
		h.log.Info("resubscribed a redis cluster link one slot at a time after its reconnect", zap.String("master", l.addr), zap.Int("channels", len(channels)), zap.Error(errors.Join(errs...)))
		h.Resync()
		return
	}
	h.log.Warn("redis pubsub error reply", zap.String("master", l.addr), zap.String("reply", reply))
}

// readLoop owns l.ps.Receive until Close.
func (h *Hub) readLoop(l *link) {
	defer h.wg.Done()
	// While Redis is down every Receive is one dial: cheap, so the backoff
	// stays short and rooms are resubscribed (and resynced) within about
	// half a second of Redis coming back.
	const minBackoff, maxBackoff = 50 * time.Millisecond, 500 * time.Millisecond
	backoff := minBackoff
	lost := false
	for {
		msg, err := l.ps.Receive(h.ctx)
		if err != nil {
			if h.ctx.Err() != nil {
				return
			}
			if errors.Is(err, redis.ErrClosed) {
				h.linkClosed(l)
				return
			}
			var reply redis.Error
			if h.cluster != nil && errors.As(err, &reply) {
				// An error reply: the connection is fine.
				h.serverError(l, reply.Error())
				continue
			}
			if !lost {
				h.log.Warn("redis pubsub connection lost; go-redis reconnects and resubscribes", zap.String("master", l.addr), zap.Error(err))
			}
			if h.cluster != nil {
				// The master may be gone (failover): refresh the slot map
				// on every failed reconnect, so the rebalance loop moves
				// its channels as soon as the map names the new master.
				h.cluster.ReloadState(h.ctx)
				h.askRebalance()
			}
			lost = true
			h.subMu.Lock()
			l.down = true
			h.subMu.Unlock()
			select {
			case <-h.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		if lost {
			// The first reply on the new connection: go-redis wrote the
			// resubscription before anything else, so it is in effect.
			lost = false
			h.subMu.Lock()
			clear(l.unsubPending) // their confirmations went with the old connection
			l.down = false
			h.subMu.Unlock()
			h.log.Info("redis pubsub connection restored; resyncing rooms", zap.String("master", l.addr))
			h.Resync()
			if h.cluster != nil {
				h.askRebalance() // the master may have lost slots meanwhile
			}
		}
		switch m := msg.(type) {
		case *redis.Message:
			h.fanOut(m.Channel, m.Payload)
		case *redis.Pong:
			h.mu.Lock()
			if ch, ok := h.pongs[m.Payload]; ok {
				close(ch)
				delete(h.pongs, m.Payload)
			}
			h.mu.Unlock()
		case *redis.Subscription:
			// Confirmations; readiness uses PING tokens instead. A
			// sunsubscribe we did not ask for is a slot move.
			if m.Kind == "sunsubscribe" {
				h.dropped(l, m.Channel)
			}
		}
	}
}

// fanOut sends one room event, as received, to every local member of its
// room except those of the event's own user (self filter).
func (h *Hub) fanOut(channel, payload string) {
	room, ok := h.opts.Names.RoomFromChannel(channel)
	if !ok {
		return
	}
	ev, err := protocol.DecodeRoomEvent([]byte(payload))
	if err == nil && ev.Room != room {
		err = fmt.Errorf("room %q does not match channel %q", ev.Room, channel)
	}
	if err != nil {
		h.met.EventsDropped.Inc()
		h.badEvent.Do(func() {
			h.log.Warn("dropping invalid room event", zap.String("channel", channel), zap.Error(err))
		})
		return
	}
	frame := []byte(payload) // shared, read-only, by every member's queue
	h.mu.Lock()
	defer h.mu.Unlock()
	for m, ms := range h.rooms[room] {
		if m.User() == ev.User {
			continue
		}
		if ms.holds > 0 {
			if len(ms.buf) < h.opts.PendingLimit {
				ms.buf = append(ms.buf, buffered{frame, ev.Type})
			} else {
				ms.overflow = true
			}
			continue
		}
		h.deliver(m, frame, ev.Type)
	}
}

// Resync asks for a resync round: every member of every room gets a fresh
// "typing" snapshot. Requests made while one is queued are coalesced. It
// never blocks.
func (h *Hub) Resync() {
	select {
	case h.resyncCh <- struct{}{}:
	default:
	}
}

// Resync retry backoff: a failed round is retried after resyncRetryMin,
// doubling up to resyncRetryMax; a complete round resets it.
const (
	resyncRetryMin = 100 * time.Millisecond
	resyncRetryMax = time.Second
)

func (h *Hub) resyncLoop() {
	defer h.wg.Done()
	retry := resyncRetryMin
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.resyncCh:
		}
		h.mu.Lock()
		rooms := make([]string, 0, len(h.rooms))
		for r := range h.rooms {
			rooms = append(rooms, r)
		}
		h.mu.Unlock()
		if len(rooms) == 0 {
			continue
		}
		h.met.Resyncs.Inc()
		failed := h.resyncRooms(rooms)
		if h.ctx.Err() != nil {
			return
		}
		if failed == 0 {
			retry = resyncRetryMin
			continue
		}
		h.resyncWarn.Do(func() {
			h.log.Warn("resync incomplete; retrying with backoff up to every second (logged at most once a minute)", zap.Int("rooms_failed", failed), zap.Int("rooms", len(rooms)))
		})
		t := time.NewTimer(retry)
		select {
		case <-h.ctx.Done():
			t.Stop()
			return
		case <-t.C:
			h.Resync()
		}
		retry = min(2*retry, resyncRetryMax)
	}
}

// resyncConcurrency bounds the snapshot requests of one resync round.
const resyncConcurrency = 16

// resyncRooms resyncs rooms, resyncConcurrency at a time, and returns how
// many failed. The goroutines it starts end before it returns.
func (h *Hub) resyncRooms(rooms []string) int {
	// sem holds one token per request in flight; full: the loop waits.
	sem := make(chan struct{}, resyncConcurrency)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for _, r := range rooms {
		if h.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if !h.resyncRoom(r) {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(failed.Load())
}

// resyncRoom pushes a snapshot of room to all its members; false when the
// snapshot failed or a member's buffer overflowed.
func (h *Hub) resyncRoom(room string) bool {
	h.mu.Lock()
	holds := make([]*Hold, 0, len(h.rooms[room]))
	for m, ms := range h.rooms[room] {
		ms.holds++
		holds = append(holds, &Hold{room: room, m: m, ms: ms})
	}
	h.mu.Unlock()
	if len(holds) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.opts.ReadyTimeout)
	users, err := h.opts.Snapshot(ctx, room)
	cancel()
	if err != nil {
		h.log.Debug("resync snapshot failed", zap.String("room", room), zap.Error(err))
	}
	ok := err == nil
	frames := map[string][]byte{} // user -> that user's self-filtered frame
	for _, hd := range holds {
		var f []byte
		if err == nil {
			u := hd.m.User()
			if f = frames[u]; f == nil {
				f, _ = protocol.Encode(protocol.NewTypingSnapshot(room, users.WithoutUser(u), ""))
				frames[u] = f
			}
		}
		if h.Release(hd, f, protocol.TypeTyping) {
			ok = false
		}
	}
	return ok
}
