// Package session runs one client WebSocket connection of the gateway
// (docs/protocol.md, "WebSocket: GET /v1/ws"): it decodes client frames, enforces the
// per-connection limits, turns typing frames into NATS commands stamped with
// the authenticated user, the connection id and a sequence number, and
// writes server frames.
//
// Each connection has one long-lived goroutine, the reader (the caller of
// [Conn.Serve]), which reads and handles frames. The writer, which owns
// every data write and the pings, runs on demand: it is started when a
// frame (or a ping) is queued and none runs, and ends when the queue is
// empty, so an idle connection parks one goroutine, not two (a parked
// writer would hold a stack of about 8 KiB; docs/BENCHMARKS.md, "Idle
// connections"). Pings come from a runtime
// timer per connection (no goroutine), which starts the writer. A join or
// sync, which waits on the network, runs in its room's lane (lanes.go): a
// goroutine that lives while the room has a frame in flight and serves the
// room's later frames in order, so pings and other rooms' frames never wait
// behind it. A watch or unwatch is served on the reader itself (watch.go),
// which reads nothing more until it is answered. Other goroutines (the
// hub's fan-out and watch ticker, shutdown) only queue frames with
// [Conn.SendEvent] (conflated for a slow reader: writer.go),
// [Conn.SendSnapshot], [Conn.SendSummary] (the latest per room) or
// [Conn.Send], or ask for a close with [Conn.Close]; none ever blocks.
//
// The connection talks to its socket through a [Transport] (transport.go;
// [WebSocket] adapts gorilla's). Files: session.go the lifecycle and
// close, writer.go the outbound queue, writeloop.go the write loop and pings, reader.go the
// read loop and the inbound limit, handlers.go the client frames' handlers
// and the commands, scopes.go the threads a connection types in, watch.go watch and unwatch (and SendSummary), lanes.go
// the room lanes, inbound.go the inbound token bucket, budget.go and
// budgets.go the users' snapshot and watch budgets.
package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
)

// WebSocket close codes used by the gateway (RFC 6455 section 7.4.1,
// docs/protocol.md, "Close codes"). Clients should reconnect after 1001, 1011 and
// 1013 (with backoff), and not blindly after 1008.
const (
	CloseNormal        = websocket.CloseNormalClosure           // 1000
	CloseGoingAway     = websocket.CloseGoingAway               // 1001: gateway shutting down
	CloseUnsupported   = websocket.CloseUnsupportedData         // 1003: binary frame
	CloseAbnormal      = websocket.CloseAbnormalClosure         // 1006: no close frame (metrics only)
	CloseInvalidData   = websocket.CloseInvalidFramePayloadData // 1007: invalid UTF-8
	ClosePolicy        = websocket.ClosePolicyViolation         // 1008: token expired, sustained abuse
	CloseTooBig        = websocket.CloseMessageTooBig           // 1009: frame over the limit
	CloseInternal      = websocket.CloseInternalServerErr       // 1011
	CloseTryAgainLater = websocket.CloseTryAgainLater           // 1013: a write stalled for ELLIPSIS_WRITE_STALL
)

// Config holds the per-connection limits; the gateway fills every field
// from its validated settings (the ELLIPSIS_* variable of each is named).
// New panics when OutboundQueue, PongWait, WriteWait, WriteStall or
// MaxRejectedWindow is not positive. The snapshot budget is the user's, in Deps.Budgets.
type Config struct {
	MaxFrameBytes int     // read limit, bytes; over it: close 1009 (ELLIPSIS_MAX_FRAME_BYTES)
	MaxRooms      int     // joined rooms; over it: room_limit (ELLIPSIS_MAX_ROOMS_PER_CONN)
	MaxWatched    int     // watched rooms; over it: watch_limit, 0: watching off (ELLIPSIS_MAX_WATCHED_ROOMS)
	InboundRate   float64 // frames/s of the inbound token bucket (ELLIPSIS_INBOUND_RATE)
	InboundBurst  int     // burst of the inbound token bucket, frames (ELLIPSIS_INBOUND_BURST)
	// OutboundQueue is the outbound queue's size in frames: from half of
	// it room events are conflated (writer.go; ELLIPSIS_OUTBOUND_QUEUE).
	OutboundQueue int
	// ConflateRoomCap is the most (thread, user) scopes whose latest
	// event is kept per room while conflating; over it the room gets a
	// snapshot instead (ELLIPSIS_SNAPSHOT_MAX).
	ConflateRoomCap int
	SnapshotTimeout time.Duration // authorisation and snapshot requests, and a watch frame's answer (ELLIPSIS_SNAPSHOT_TIMEOUT)
	// PongWait is how long the reader waits for any frame or pong; the
	// peer is pinged every 9/10 of it (ELLIPSIS_PONG_WAIT).
	PongWait time.Duration
	// WriteWait bounds a pong, with WriteStall (ELLIPSIS_WRITE_WAIT).
	WriteWait time.Duration
	// WriteStall bounds every data write and ping: a write that does not
	// finish within it closes the connection with 1013 (ELLIPSIS_WRITE_STALL).
	WriteStall time.Duration
	// MaxRejectedWindow is how many rate-limited frames are tolerated
	// within the abuse window (inbound.go); one more closes the connection
	// with 1008 (ELLIPSIS_INBOUND_MAX_REJECTED).
	MaxRejectedWindow int
	// Activities are the activities a typing_start may name
	// (config.AcceptedActivities: the standard ones and
	// ELLIPSIS_ACTIVITIES); another is bad_request. Empty: the standard
	// ones.
	Activities []string
	// MaxThreads is the most threads of one room the connection types in
	// at once; a start in one more is too_many_threads
	// (ELLIPSIS_MAX_THREADS_PER_USER; scopes.go). Zero: [DefaultMaxThreads].
	MaxThreads int
	// TypingTTL is how long after its last start a thread counts as typed
	// in when no stop came (ELLIPSIS_TYPING_TTL: the worker's entry expires
	// then). Zero: [DefaultTypingTTL].
	TypingTTL time.Duration
}

// check reports the first field New needs positive that is not.
func (cfg Config) check() error {
	switch {
	case cfg.OutboundQueue <= 0:
		return fmt.Errorf("session: OutboundQueue %d, want > 0", cfg.OutboundQueue)
	case cfg.PongWait <= 0:
		return fmt.Errorf("session: PongWait %v, want > 0", cfg.PongWait)
	case cfg.WriteWait <= 0:
		return fmt.Errorf("session: WriteWait %v, want > 0", cfg.WriteWait)
	case cfg.WriteStall <= 0:
		return fmt.Errorf("session: WriteStall %v, want > 0", cfg.WriteStall)
	case cfg.MaxRejectedWindow <= 0:
		return fmt.Errorf("session: MaxRejectedWindow %d, want > 0", cfg.MaxRejectedWindow)
	}
	return nil
}

// Backend is the presence workers' side, over NATS.
type Backend interface {
	// Connected reports whether commands can be published now.
	Connected() bool
	// Publish sends one command, or fails at once (never buffers it).
	Publish(cmd *protocol.Command) error
}

// Rooms is the hub as a connection sees it (*hub.Hub implements it).
type Rooms interface {
	// Sync does hold → snapshot → self filter → release for m in room,
	// joining it first for hub.SyncJoin with view v (the users hidden,
	// typing off; ignored by hub.SyncAsked); see hub.Hub.Sync.
	Sync(ctx context.Context, kind hub.SyncKind, room string, m hub.Member, v *filter.View, id string, commit func() bool) error
	// Leave removes m from room without waiting on the network.
	Leave(room string, m hub.Member) bool
	// LeaveAll removes m from rooms without waiting on the network.
	LeaveAll(m hub.Member, rooms ...string) int
	// Watch adds w as a watcher of room once its subscription is
	// confirmed (bounded by ctx); Arm lets its summaries be sent; Unwatch
	// ends watches without waiting on the network. See hub.Hub.Watch.
	Watch(ctx context.Context, room string, w hub.Watcher, v *filter.View) error
	Arm(w hub.Watcher, rooms ...string)
	Unwatch(w hub.Watcher, rooms ...string) int
}

// Deps are the gateway-wide collaborators of every connection.
type Deps struct {
	Hub        Rooms
	Backend    Backend
	Authorizer authz.Authorizer
	Metrics    *metrics.Metrics
	Logger     *zap.Logger
	// Warn rate-limits warnings that every connection could log at once
	// (slow consumers); shared by all connections.
	Warn *ratelog.Logger
	// Budgets holds the users' snapshot budgets (budgets.go), shared by
	// all connections; required.
	Budgets *Budgets
}

// Conn is one client connection.
type Conn struct {
	id    string
	ident auth.Identity
	cfg   Config
	deps  Deps
	met   *metrics.Metrics

	// w is the outbound queue, pings and close sequence (writer.go, writeloop.go); its
	// transport (w.tr) is the reader's too: nil in tests of the handlers,
	// where frames stay queued.
	w writer

	closeOnce  sync.Once
	finalCode  int           // close code for metrics
	readerDone chan struct{} // closed when the reader ended
	// ctx is done once a close was requested (the writer's quit): it
	// aborts requests in flight. See connCtx.
	ctx context.Context

	inbound inboundGuard // inbound token bucket and abuse count; reader only
	// watched is the set of watched rooms (watch.go): the reader's only
	// (watch and unwatch are served on it), and Serve's once it ended.
	watched map[string]struct{}
	lanes   lanes // per-room FIFOs of joins and syncs in flight (lanes.go)

	mu    sync.Mutex
	rooms map[string]struct{} // joined rooms (joined frame queued)
	// roomHidden is the authoriser's hide list of each joined room that
	// has one (nil map: none), kept for the room's re-joins.
	roomHidden   map[string]filter.Set
	joining      int         // joins in flight of rooms not in rooms (count against MaxRooms)
	budget       *userBudget // the user's snapshot budget (budget.go), held until Serve ends; its own lock
	seq          uint64      // last seq published
	disconnected bool        // disconnect published: publish nothing more
	// threads is the threads typed in per joined room (scopes.go).
	threads threadsTyped
}

var (
	_ hub.Member  = (*Conn)(nil)
	_ hub.Watcher = (*Conn)(nil)
)

// New makes the connection of tr, an upgraded WebSocket ([WebSocket]).
// id is the connection id ("<gateway>:<n>"); ident comes from
// authentication. Serve runs it. New takes a reference to the user's
// snapshot budget in deps.Budgets (which must not be nil) and Serve gives
// it back when the connection ends, so every Conn made must be served:
// the budget of a user with a Conn is never forgotten. It panics on a cfg
// that fails its check (a field not positive).
func New(tr Transport, id string, ident auth.Identity, cfg Config, deps Deps) *Conn {
	if err := cfg.check(); err != nil {
		panic(err)
	}
	c := &Conn{
		id:         id,
		ident:      ident,
		cfg:        cfg,
		deps:       deps,
		met:        deps.Metrics,
		readerDone: make(chan struct{}),
		inbound:    newInboundGuard(time.Now(), cfg.InboundRate, cfg.InboundBurst, cfg.MaxRejectedWindow),
		rooms:      map[string]struct{}{},
		budget:     deps.Budgets.acquire(ident.User),
	}
	c.w.init(tr, c, &c.cfg)
	c.ctx = connCtx{c}
	return c
}

// connCtx is a connection's context: done when the writer's quit is
// closed (the first close request), with no deadline and no values. It replaces a
// context.WithCancel, whose cancelCtx, lazily made Done channel and
// children map (kept once a join had derived a timeout from it) were about
// 500 bytes of every idle connection. A context derived from it watches
// quit with a goroutine for as long as it lives (a join or sync in
// flight: context.WithTimeout's rule for a parent of a foreign type).
type connCtx struct{ c *Conn }

func (connCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (x connCtx) Done() <-chan struct{}     { return x.c.w.quit }
func (connCtx) Value(any) any               { return nil }

// Err is context.Canceled once a close was requested, else nil.
func (x connCtx) Err() error {
	if x.c.closing() {
		return context.Canceled
	}
	return nil
}

// logAt logs msg at lvl with the connection's conn_id and user_id first,
// as a child logger's fields would be. No child logger is kept per
// connection: its cloned encoder cost about 1 KiB of every idle one.
func (c *Conn) logAt(lvl zapcore.Level, msg string, fields ...zap.Field) {
	ce := c.deps.Logger.WithOptions(zap.AddCallerSkip(1)).Check(lvl, msg)
	if ce == nil {
		return
	}
	ce.Write(append([]zap.Field{zap.String("conn_id", c.id), zap.String("user_id", c.ident.User)}, fields...)...)
}

// ID returns the connection id.
func (c *Conn) ID() string { return c.id }

// User returns the authenticated user id ([hub.Member]).
func (c *Conn) User() string { return c.ident.User }

// Serve runs the connection until it is closed: the calling goroutine
// reads (reader.go); the writer's goroutine runs while frames are queued,
// a ping is due or the connection closes (writeloop.go). When reading ends
// (the connection's context is cancelled then) it waits for the room
// lanes to end, publishes the disconnect command (once, if rooms were
// joined), leaves every room and waits for the writer's close sequence.
func (c *Conn) Serve() {
	c.met.Connections.Inc()
	defer c.met.Connections.Dec()
	c.w.start()
	if !c.ident.Expires.IsZero() {
		t := time.AfterFunc(time.Until(c.ident.Expires), func() { c.Close(ClosePolicy, "token expired") })
		defer t.Stop()
	}
	c.logAt(zapcore.DebugLevel, "connection open")
	c.readLoop()
	c.unwatchAll()
	rooms := c.leaveAll()
	c.deps.Budgets.release(c.budget) // no join is in flight any more
	<-c.w.done
	c.met.Close(c.finalCode)
	c.logAt(zapcore.DebugLevel, "connection closed", zap.Int("code", c.finalCode), zap.Int("rooms", len(rooms)))
}

// leaveAll ends a closing connection's rooms: it waits for the room lanes
// (their requests are cancelled, and no join commits once closing), then
// publishes the disconnect command and leaves every joined room. It
// returns the rooms left.
func (c *Conn) leaveAll() []string {
	c.waitLanes()
	c.Disconnect()
	c.mu.Lock()
	rooms := c.joinedRooms()
	c.rooms, c.roomHidden = map[string]struct{}{}, nil
	c.mu.Unlock()
	c.deps.Hub.LeaveAll(c, rooms...)
	return rooms
}

// Close asks for the connection to be closed with code (RFC 6455) and
// reason: queued frames are flushed (except after 1013), the close frame is
// sent, and the TCP connection is dropped after the peer's reply or one
// second. It never blocks; only the first close request counts.
func (c *Conn) Close(code int, reason string) { c.closeWith(code, code, reason) }

// terminate records why the connection ends without sending a close frame.
func (c *Conn) terminate(code int) { c.closeWith(0, code, "") }

// closeWith asks the writer for its close sequence with the close frame
// send (0: none) and records final for the metrics; it reports whether
// this was the first close request (the only one that counts).
func (c *Conn) closeWith(send, final int, reason string) bool {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.finalCode = final
		c.w.close(send, reason) // also cancels c.ctx
	})
	return first
}

// closing reports whether a close was requested.
func (c *Conn) closing() bool { return c.w.closing() }

// Send queues one text frame about no room without blocking; it returns
// false after a close request, or when OutboundQueue answers already
// wait (the connection is then closed with 1013: it asks faster than it
// reads). A slow reader's room events are conflated instead (writer.go);
// otherwise it is closed only once a write stalls for WriteStall.
func (c *Conn) Send(frame []byte) bool {
	if c.closing() {
		return false
	}
	return c.w.send(frame)
}

// sendReply queues an answer about room ("" for none) that is not a
// snapshot, after every event of room already taken.
func (c *Conn) sendReply(room string, frame []byte) bool {
	if c.closing() {
		return false
	}
	return c.w.sendReply(room, frame)
}

// SendEvent queues (or, conflating, keeps as the latest of its room and
// scope key: hub.EventKey of its user and thread) one room event
// ([hub.Member]); false after a close request.
func (c *Conn) SendEvent(room, key string, frame []byte) bool {
	if c.closing() {
		return false
	}
	return c.w.sendEvent(room, key, frame)
}

// SendSnapshot queues a snapshot frame of room, superseding the room's
// conflated events ([hub.Member]); false after a close request.
func (c *Conn) SendSnapshot(room string, frame []byte) bool {
	if c.closing() {
		return false
	}
	return c.w.sendSnapshot(room, frame)
}

// SendRoomSummary queues a summary-mode typing snapshot of room
// ([hub.Member]): it supersedes the room's conflated events, and the
// latest unwritten one of a room replaces the one before it; false after a
// close request.
func (c *Conn) SendRoomSummary(room string, frame []byte) bool {
	if c.closing() {
		return false
	}
	return c.w.sendRoomSummary(room, frame)
}

// Outbound is a connection's outbound state at one moment, in frames
// (writer.go; docs/protocol.md, "Order and loss"). Its bounds: Queued −
// Answers ≤ HighWater + the events an answer about a room moved ahead of
// it (at most RoomCap each) + one summary per watched room (sendSummary)
// + the summaries of rooms in summary mode (sendRoomSummary: one per room,
// plus one per other frame of that room queued after one); Answers ≤
// ELLIPSIS_OUTBOUND_QUEUE;
// ConflatedRooms ≤ the joined rooms; Conflated ≤ ConflatedRooms × RoomCap.
type Outbound struct {
	Queued    int // frames in the queue, answers and snapshots included
	Answers   int // answers and snapshots among them
	HighWater int // queued frames from which room events conflate: ELLIPSIS_OUTBOUND_QUEUE/2, at least 1
	// Conflating is whether room events are kept as the latest per (room,
	// user); Conflated is how many are kept (entries), in ConflatedRooms
	// rooms, at most RoomCap per room (ELLIPSIS_SNAPSHOT_MAX); PushesAwaited
	// the rooms over it whose snapshot push is awaited.
	Conflating     bool
	Conflated      int
	ConflatedRooms int
	RoomCap        int
	PushesAwaited  int
}

// Outbound reports the connection's outbound queue and conflation state
// now (for tests and debugging: it takes the writer's lock).
func (c *Conn) Outbound() Outbound { return c.w.outbound() }

// written, writeFailed, writeStalled, conflating, conflated, pushRoom and
// readDone are the writer's host (writer.go).
func (c *Conn) written(frame []byte, now time.Time) { c.met.Written(frame, now) }
func (c *Conn) writeFailed()                        { c.terminate(CloseAbnormal) }
func (c *Conn) readDone() <-chan struct{}           { return c.readerDone }

func (c *Conn) overflowed() {
	// Called with the writer's lock held: closeWith only takes the
	// writer's close path, which must not take that lock again.
	go c.closeOverflowed()
}

func (c *Conn) closeOverflowed() {
	if c.closeWith(CloseTryAgainLater, CloseTryAgainLater, "slow consumer: answers fill the outbound queue") {
		c.met.SlowConsumerCloses.Inc()
		if c.deps.Warn != nil {
			if ok, n := c.deps.Warn.Allow("slow-consumer"); ok {
				c.logAt(zapcore.WarnLevel, "closing a slow consumer whose answers fill the outbound queue (1013); logged at most once a minute", zap.Int("queue", c.cfg.OutboundQueue), zap.Int("suppressed", n))
			}
		}
	}
}

func (c *Conn) writeStalled() {
	if c.closeWith(CloseTryAgainLater, CloseTryAgainLater, "write stalled: nothing written for "+c.cfg.WriteStall.String()) {
		c.met.WriteStallCloses.Inc()
		if c.deps.Warn != nil {
			if ok, n := c.deps.Warn.Allow("write-stall"); ok {
				c.logAt(zapcore.WarnLevel, "closing a connection whose write stalled (1013); logged at most once a minute", zap.Duration("write_stall", c.cfg.WriteStall), zap.Int("suppressed", n))
			}
		}
	}
}

func (c *Conn) conflating(on bool) {
	if on {
		c.met.Conflating.Inc()
	} else {
		c.met.Conflating.Dec()
	}
}

func (c *Conn) conflated(n int) { c.met.ConflatedEvents.Add(float64(n)) }

// pushRoom asks the hub for an unasked typing snapshot of room (the
// writer's push number push), off the writer's lock: retried every second
// while it fails (the snapshot is unavailable), and given up once the
// writer no longer awaits it (a snapshot of the room came, or the room
// was left, maybe joined again since), the room is left or the
// connection closes. The writer drops the room's events until the
// snapshot comes. The push's commit checks it is still awaited after the
// snapshot was read, so a push overtaken by a leave and a new join of the
// room queues nothing (hub.ErrAborted) instead of a snapshot that may be
// older than the new join's.
func (c *Conn) pushRoom(room string, push uint64) {
	awaited := func() bool { return c.w.pushAwaited(room, push) }
	go func() {
		for awaited() {
			err := c.deps.Hub.Sync(c.ctx, hub.SyncAsked, room, c, nil, "", awaited)
			if err == nil || errors.Is(err, hub.ErrAborted) || c.closing() {
				return
			}
			if errors.Is(err, hub.ErrNotMember) || errors.Is(err, hub.ErrClosed) {
				c.w.pushEnded(room, push)
				return
			}
			select {
			case <-time.After(time.Second):
			case <-c.w.quit:
				return
			}
		}
	}()
}
