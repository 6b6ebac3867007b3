// Package hub keeps which local connections joined which rooms, subscribes
// the rooms' Redis Pub/Sub channels lazily, and fans room events out to the
// local members (PROTOCOL.md, "Redis" and "Self filter"; DESIGN.md).
//
// # Subscriptions
//
// All rooms share one go-redis PubSub connection. The first local member of
// a room subscribes names.RoomChannel(room); the last one leaving
// unsubscribes. Subscription changes are reconciled under one mutex against
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
type Snapshotter func(ctx context.Context, room string) ([]protocol.Typist, error)

// Options configure a [Hub].
type Options struct {
	// Redis is the client whose connection pool hosts the hub's PubSub; the
	// caller owns and closes it.
	Redis *redis.Client
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

// Hub is the room registry and Redis fan-out of one gateway. Its methods
// are safe for concurrent use.
type Hub struct {
	opts Options
	log  *zap.Logger
	met  *metrics.Metrics
	ps   *redis.PubSub

	mu     sync.Mutex
	rooms  map[string]map[Member]*membership
	pongs  map[string]chan struct{} // PING token -> closed when its PONG arrives
	closed bool

	subMu      sync.Mutex      // serialises SUBSCRIBE/UNSUBSCRIBE; taken before mu
	subscribed map[string]bool // channel -> subscribed on ps (as go-redis sees it)

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
	return &Hub{
		opts:       opts,
		log:        log,
		met:        opts.Metrics,
		ps:         opts.Redis.Subscribe(ctx), // no channels: no I/O yet
		rooms:      map[string]map[Member]*membership{},
		pongs:      map[string]chan struct{}{},
		subscribed: map[string]bool{},
		resyncCh:   make(chan struct{}, 1),
		ctx:        ctx,
		cancel:     cancel,
		badEvent:   rate.Sometimes{First: 3, Interval: time.Minute},
		resyncWarn: rate.Sometimes{First: 1, Interval: time.Minute},
	}
}

// Start starts the Redis reader and the resync goroutine; [Hub.Close] stops
// them.
func (h *Hub) Start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started || h.closed {
		return
	}
	h.started = true
	h.wg.Add(2)
	go h.readLoop()
	go h.resyncLoop()
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
	_ = h.ps.Close()
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
	if err := h.ps.Ping(ctx, token); err != nil {
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
// Changes go out as one SUBSCRIBE and one UNSUBSCRIBE command at most.
func (h *Hub) reconcile(ctx context.Context, rooms ...string) error {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	var sub, unsub []string
	h.mu.Lock()
	for _, room := range rooms {
		want := len(h.rooms[room]) > 0
		channel := h.opts.Names.RoomChannel(room)
		switch have := h.subscribed[channel]; {
		case want && !have:
			sub = append(sub, channel)
		case !want && have:
			unsub = append(unsub, channel)
		}
	}
	h.mu.Unlock()
	var errs []error
	if len(sub) > 0 {
		// go-redis records the channels even when the write fails, and
		// subscribes them again on its next connection.
		for _, c := range sub {
			h.subscribed[c] = true
		}
		h.met.RedisSubscriptions.Add(float64(len(sub)))
		errs = append(errs, h.ps.Subscribe(ctx, sub...))
	}
	if len(unsub) > 0 {
		for _, c := range unsub {
			delete(h.subscribed, c)
		}
		h.met.RedisSubscriptions.Sub(float64(len(unsub)))
		errs = append(errs, h.ps.Unsubscribe(ctx, unsub...))
	}
	return errors.Join(errs...)
}

// readLoop owns ps.Receive until Close.
func (h *Hub) readLoop() {
	defer h.wg.Done()
	// While Redis is down every Receive is one dial: cheap, so the backoff
	// stays short and rooms are resubscribed (and resynced) within about
	// half a second of Redis coming back.
	const minBackoff, maxBackoff = 50 * time.Millisecond, 500 * time.Millisecond
	backoff := minBackoff
	lost := false
	for {
		msg, err := h.ps.Receive(h.ctx)
		if err != nil {
			if h.ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
				return
			}
			if !lost {
				h.log.Warn("redis pubsub connection lost; go-redis reconnects and resubscribes", zap.Error(err))
			}
			lost = true
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
			h.log.Info("redis pubsub connection restored; resyncing rooms")
			h.Resync()
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
			// Confirmations; readiness uses PING tokens instead.
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
				f, _ = protocol.Encode(protocol.NewTypingSnapshot(room, SelfFilter(users, u), ""))
				frames[u] = f
			}
		}
		if h.Release(hd, f, protocol.TypeTyping) {
			ok = false
		}
	}
	return ok
}

// SelfFilter returns users without user's entries (PROTOCOL.md, "Self
// filter"); it never returns nil.
func SelfFilter(users []protocol.Typist, user string) []protocol.Typist {
	out := make([]protocol.Typist, 0, len(users))
	for _, t := range users {
		if t.User != user {
			out = append(out, t)
		}
	}
	return out
}
