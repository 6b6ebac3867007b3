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
// writer's stack was about 8 KiB of every idle connection; docs/BENCHMARKS.md,
// "Idle connections"). Pings come from a runtime
// timer per connection (no goroutine), which starts the writer. A join or
// sync, which waits on the network, runs in its room's lane (lanes.go): a
// goroutine that lives while the room has a frame in flight and serves the
// room's later frames in order, so pings and other rooms' frames never wait
// behind it. Other goroutines (the hub's fan-out, shutdown) only queue
// frames with [Conn.Send] or ask for a close with [Conn.Close]; neither
// ever blocks.
package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/backend"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/config"
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
	CloseTryAgainLater = websocket.CloseTryAgainLater           // 1013: overloaded or too slow a reader
)

// closeGrace is how long the writer waits for the peer's close reply
// after sending a close frame before dropping the TCP connection, and
// bounds every write once a close was requested (the queued frames and
// the close frame), so a peer that stopped reading is let go within
// about a second instead of WriteWait per write. 2*closeGrace after the
// close request the TCP connection is closed whatever the writer does
// (the hard stop: gorilla re-arms the socket's write deadline before each
// write from the one the writer gave it, so a write begun just before the
// close request could otherwise wait WriteWait).
const closeGrace = time.Second

// Config holds the per-connection limits; zero values take config.Default()'s
// (ELLIPSIS_PONG_WAIT, ELLIPSIS_WRITE_WAIT, ELLIPSIS_INBOUND_MAX_REJECTED,
// ELLIPSIS_OUTBOUND_QUEUE; config.Config's are validated upstream). The
// snapshot budget is the user's, in Deps.Budgets.
// MaxRejectedWindow is how many rate-limited frames are tolerated within
// the abuse window (inbound.go); one more closes the connection with 1008.
type Config struct {
	MaxFrameBytes     int           // read limit; over it: close 1009
	MaxRooms          int           // joined rooms; over it: room_limit
	InboundRate       float64       // frames/s of the inbound token bucket
	InboundBurst      int           // burst of the inbound token bucket
	OutboundQueue     int           // frames; full: close 1013
	SnapshotTimeout   time.Duration // authorisation and snapshot requests
	PongWait          time.Duration
	WriteWait         time.Duration
	MaxRejectedWindow int
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
	// joining it first for hub.SyncJoin; see hub.Hub.Sync.
	Sync(ctx context.Context, kind hub.SyncKind, room string, m hub.Member, id string, commit func() bool) error
	// Leave removes m from room without waiting on the network.
	Leave(room string, m hub.Member) bool
	// LeaveAll removes m from rooms without waiting on the network.
	LeaveAll(m hub.Member, rooms ...string) int
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
	ws    *websocket.Conn
	id    string
	ident auth.Identity
	cfg   Config
	deps  Deps
	met   *metrics.Metrics

	// The outbound queue, at most cfg.OutboundQueue frames: out[head:],
	// guarded by qmu. When it is full the connection is closed with 1013
	// (slow consumer): a sender never blocks. It grows on demand and is
	// released when it drains with a large backing array, so an idle
	// connection holds (almost) nothing. Queuing a frame starts the writer
	// goroutine unless one runs (writing); the writer ends once the queue
	// is empty, or runs the close sequence once quit is closed.
	qmu     sync.Mutex
	out     [][]byte
	head    int
	live    bool        // Serve has begun: writers may be started; qmu
	writing bool        // a writer runs, or the last one closed the connection; qmu
	pingDue bool        // the ping timer fired: the writer pings first; qmu
	pinger  *time.Timer // pings every 9/10 of PongWait; set in Serve under qmu

	closeOnce sync.Once
	quit      chan struct{} // closed by the first close request
	// closeBy is the write deadline of a closing connection (UnixNano,
	// set before quit is closed; 0 before): no write waits past it
	// (writeDeadline).
	closeBy     atomic.Int64
	hardStop    *time.Timer // closes the TCP connection 2*closeGrace after the close request; set before quit is closed
	closeCode   int         // close frame to send; 0: none (peer closed or conn broken)
	closeReason string
	finalCode   int // close code for metrics
	readerDone  chan struct{}
	writerDone  chan struct{}
	// ctx is done once a close was requested (quit): it aborts requests
	// in flight. See connCtx.
	ctx context.Context

	inbound inboundGuard // inbound token bucket and abuse count; reader only
	lanes   lanes        // per-room FIFOs of joins and syncs in flight (lanes.go)

	mu           sync.Mutex
	rooms        map[string]struct{} // joined rooms (joined frame queued)
	joining      int                 // joins in flight of rooms not in rooms (count against MaxRooms)
	budget       *userBudget         // the user's snapshot budget (budget.go), held until Serve ends; its own lock
	seq          uint64              // last seq published
	disconnected bool                // disconnect published: publish nothing more
}

var _ hub.Member = (*Conn)(nil)

// New wraps an upgraded WebSocket. id is the connection id
// ("<gateway>:<n>"); ident comes from authentication. Serve runs it. New
// takes a reference to the user's snapshot budget in deps.Budgets (which
// must not be nil) and Serve gives it back when the connection ends, so
// every Conn made must be served: the budget of a user with a Conn is
// never forgotten.
func New(ws *websocket.Conn, id string, ident auth.Identity, cfg Config, deps Deps) *Conn {
	if cfg.PongWait <= 0 || cfg.WriteWait <= 0 || cfg.MaxRejectedWindow <= 0 || cfg.OutboundQueue <= 0 {
		def := config.Default()
		cfg.PongWait = cmp.Or(max(cfg.PongWait, 0), def.PongWait)
		cfg.WriteWait = cmp.Or(max(cfg.WriteWait, 0), def.WriteWait)
		cfg.MaxRejectedWindow = cmp.Or(max(cfg.MaxRejectedWindow, 0), def.InboundMaxRejected)
		cfg.OutboundQueue = cmp.Or(max(cfg.OutboundQueue, 0), def.OutboundQueue)
	}
	c := &Conn{
		ws:         ws,
		id:         id,
		ident:      ident,
		cfg:        cfg,
		deps:       deps,
		met:        deps.Metrics,
		quit:       make(chan struct{}),
		readerDone: make(chan struct{}),
		writerDone: make(chan struct{}),
		inbound:    newInboundGuard(time.Now(), cfg.InboundRate, cfg.InboundBurst, cfg.MaxRejectedWindow),
		rooms:      map[string]struct{}{},
		budget:     deps.Budgets.acquire(ident.User),
	}
	c.ctx = connCtx{c}
	return c
}

// connCtx is a connection's context: done when quit is closed (the first
// close request), with no deadline and no values. It replaces a
// context.WithCancel, whose cancelCtx, lazily made Done channel and
// children map (kept once a join had derived a timeout from it) were about
// 500 bytes of every idle connection. A context derived from it watches
// quit with a goroutine for as long as it lives (a join or sync in
// flight: context.WithTimeout's rule for a parent of a foreign type).
type connCtx struct{ c *Conn }

func (connCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (x connCtx) Done() <-chan struct{}     { return x.c.quit }
func (connCtx) Value(any) any               { return nil }

// Err is context.Canceled once quit is closed, else nil.
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
// reads; a writer goroutine runs while frames are queued, a ping is due or
// the connection closes (startWriterLocked). When reading ends (the connection's
// context is cancelled then) it waits for the room lanes to end, publishes
// the disconnect command (once, if rooms were joined), leaves every room
// and waits for the writer.
func (c *Conn) Serve() {
	c.met.Connections.Inc()
	defer c.met.Connections.Dec()
	c.qmu.Lock()
	// Created with a deadline it never reaches and armed after the
	// assignment, so the callback, which re-arms it, always finds it.
	c.pinger = time.AfterFunc(time.Duration(math.MaxInt64), c.pingTick)
	c.pinger.Reset(c.pingPeriod())
	c.live = true
	if len(c.out) > c.head || c.closing() {
		c.startWriterLocked()
	}
	c.qmu.Unlock()
	if !c.ident.Expires.IsZero() {
		t := time.AfterFunc(time.Until(c.ident.Expires), func() { c.Close(ClosePolicy, "token expired") })
		defer t.Stop()
	}
	c.logAt(zapcore.DebugLevel, "connection open")
	c.readLoop()
	rooms := c.leaveAll()
	c.deps.Budgets.release(c.budget) // no join is in flight any more
	<-c.writerDone
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
	c.rooms = map[string]struct{}{}
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

func (c *Conn) closeWith(send, final int, reason string) bool {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.closeCode, c.finalCode, c.closeReason = send, final, reason
		// A write in flight may be blocked on a peer that stopped reading
		// (a slow consumer): give it closeGrace at most, not WriteWait.
		// Later writes take closeBy too (writeDeadline); a write that
		// re-armed the socket's deadline just now is cut by the hard stop.
		by := time.Now().Add(closeGrace)
		c.closeBy.Store(by.UnixNano())
		if c.ws != nil {
			conn := c.ws.UnderlyingConn()
			_ = conn.SetWriteDeadline(by)
			c.hardStop = time.AfterFunc(2*closeGrace, func() { _ = conn.Close() })
		}
		close(c.quit) // also cancels c.ctx
		// The writer runs the close sequence (flush, close frame, TCP
		// close); start one unless one runs (it sees quit).
		c.qmu.Lock()
		if c.live {
			c.startWriterLocked()
		}
		c.qmu.Unlock()
	})
	return first
}

// startWriterLocked starts the writer goroutine unless one runs; qmu is
// held.
func (c *Conn) startWriterLocked() {
	if !c.writing {
		c.writing = true
		go c.writeLoop()
	}
}

// pingPeriod is how often the peer is pinged: 9/10 of PongWait.
func (c *Conn) pingPeriod() time.Duration { return c.cfg.PongWait * 9 / 10 }

// pingTick runs on the ping timer: it asks the writer for a ping and
// re-arms the timer. It never blocks.
func (c *Conn) pingTick() {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.closing() {
		return
	}
	c.pingDue = true
	if c.live {
		c.startWriterLocked()
	}
	c.pinger.Reset(c.pingPeriod())
}

func (c *Conn) closing() bool {
	select {
	case <-c.quit:
		return true
	default:
		return false
	}
}

// Send queues one text frame without blocking ([hub.Member]). When the
// queue is full the connection is closed with 1013 and Send returns false;
// after a close request it returns false.
func (c *Conn) Send(frame []byte) bool {
	if c.closing() {
		return false
	}
	c.qmu.Lock()
	ok := c.enqueueLocked(frame)
	if ok && c.live {
		c.startWriterLocked()
	}
	c.qmu.Unlock()
	if ok {
		return true
	}
	if c.closeWith(CloseTryAgainLater, CloseTryAgainLater, "slow consumer: outbound queue full") {
		c.met.SlowConsumerCloses.Inc()
		if c.deps.Warn != nil {
			if ok, n := c.deps.Warn.Allow("slow-consumer"); ok {
				c.logAt(zapcore.WarnLevel, "closing slow consumer (1013); logged at most once a minute", zap.Int("queue", c.cfg.OutboundQueue), zap.Int("suppressed", n))
			}
		}
	}
	return false
}

// keepQueueCap is the backing array an empty outbound queue keeps for the
// next frames (a burst of typing events); a larger one is released.
const keepQueueCap = 16

// enqueueLocked appends frame to the outbound queue unless it holds
// cfg.OutboundQueue frames already; qmu is held.
func (c *Conn) enqueueLocked(frame []byte) bool {
	if len(c.out)-c.head >= c.cfg.OutboundQueue {
		return false
	}
	if c.head > 0 && len(c.out) == cap(c.out) {
		// Reuse the room of frames already written before growing.
		n := copy(c.out, c.out[c.head:])
		clear(c.out[n:])
		c.out, c.head = c.out[:n], 0
	}
	c.out = append(c.out, frame)
	return true
}

// dequeue takes the oldest queued frame; ok is false when none is queued.
func (c *Conn) dequeue() (f []byte, ok bool) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return c.dequeueLocked()
}

// dequeueLocked is dequeue with qmu held.
func (c *Conn) dequeueLocked() (f []byte, ok bool) {
	if c.head == len(c.out) {
		return nil, false
	}
	f = c.out[c.head]
	c.out[c.head] = nil
	c.head++
	if c.head == len(c.out) {
		if cap(c.out) > keepQueueCap {
			c.out = nil
		} else {
			c.out = c.out[:0]
		}
		c.head = 0
	}
	return f, true
}

// queued is the number of frames in the outbound queue.
func (c *Conn) queued() int {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return len(c.out) - c.head
}

// Disconnect publishes the connection's one disconnect command now (if it
// joined rooms and shares typing) and stops publishing anything after it.
// Later calls do nothing. The gateway calls it for every connection at
// shutdown, before closing them; Serve calls it when the connection ends.
func (c *Conn) Disconnect() {
	c.mu.Lock()
	if c.disconnected {
		c.mu.Unlock()
		return
	}
	c.disconnected = true
	if len(c.rooms) == 0 || !c.ident.ShareTyping {
		c.mu.Unlock()
		return
	}
	c.seq++
	cmd := &protocol.Command{
		V: protocol.Version, Op: protocol.OpDisconnect, User: c.ident.User,
		Conn: c.id, Seq: c.seq, Rooms: c.joinedRooms(), TsMs: time.Now().UnixMilli(),
	}
	c.mu.Unlock()
	if err := c.publish(cmd); err != nil {
		c.logAt(zapcore.WarnLevel, "disconnect command not published; workers expire the entries after ttl", zap.Error(err))
	}
}

// joinedRooms lists c.rooms sorted; c.mu is held.
func (c *Conn) joinedRooms() []string {
	rooms := make([]string, 0, len(c.rooms))
	for r := range c.rooms {
		rooms = append(rooms, r)
	}
	slices.Sort(rooms)
	return rooms
}

// writeLoop is the writer: started by startWriterLocked, it writes the
// queued frames (a due ping first) and ends once the queue is empty; once
// a close was requested it runs the close sequence instead, and that
// writer is the last one (writing stays set).
func (c *Conn) writeLoop() {
	write := func(f []byte, deadline time.Time) error {
		_ = c.ws.SetWriteDeadline(c.writeDeadline(deadline))
		return c.ws.WriteMessage(websocket.TextMessage, f)
	}
	for {
		c.qmu.Lock()
		if c.closing() {
			c.qmu.Unlock()
			break
		}
		ping := c.pingDue
		c.pingDue = false
		var f []byte
		if !ping {
			var ok bool
			if f, ok = c.dequeueLocked(); !ok {
				c.writing = false // the next Send or ping starts a writer
				c.qmu.Unlock()
				return
			}
		}
		c.qmu.Unlock()
		var err error
		if ping {
			err = c.ws.WriteControl(websocket.PingMessage, nil, c.writeDeadline(time.Now().Add(c.cfg.WriteWait)))
		} else if err = write(f, time.Now().Add(c.cfg.WriteWait)); err == nil {
			c.met.Written(f) // delivery delay of room events
		}
		if err != nil {
			c.terminate(CloseAbnormal)
			break
		}
	}
	// Closing: quit is closed (by whoever ended the loop).
	defer close(c.writerDone)
	c.qmu.Lock()
	c.pinger.Stop()
	c.qmu.Unlock()
	if c.closeCode != 0 {
		if c.closeCode != CloseTryAgainLater {
			// Flush what was queued before the close (an error frame
			// explaining it, for one), within closeGrace in all; a slow
			// consumer gets nothing more.
			deadline := time.Now().Add(closeGrace)
			for n := c.queued(); n > 0; n-- {
				f, ok := c.dequeue()
				if !ok || write(f, deadline) != nil {
					break
				}
			}
		}
		msg := websocket.FormatCloseMessage(c.closeCode, c.closeReason)
		if c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(closeGrace)) == nil {
			select {
			case <-c.readerDone:
			case <-time.After(closeGrace):
			}
		}
	}
	_ = c.ws.Close()
	if c.hardStop != nil { // set by closeWith before quit was closed
		c.hardStop.Stop()
	}
}

// writeDeadline is d, or the close deadline (closeBy) when a close was
// requested and it is earlier.
func (c *Conn) writeDeadline(d time.Time) time.Time {
	if by := c.closeBy.Load(); by != 0 && by < d.UnixNano() {
		return time.Unix(0, by)
	}
	return d
}

func (c *Conn) readLoop() {
	defer close(c.readerDone)
	c.ws.SetReadLimit(int64(c.cfg.MaxFrameBytes))
	_ = c.ws.SetReadDeadline(time.Now().Add(c.cfg.PongWait))
	// A pong (the answer to our ping, or an unsolicited one: RFC 6455
	// section 5.5.3) takes a token of the inbound bucket like any client
	// frame, so a flood of them is closed (1008) like a flood of frames;
	// it extends the read deadline either way, so a client at its limit
	// is not dropped as silent. Runs on the reader.
	c.ws.SetPongHandler(func(string) error {
		c.allowInbound()
		return c.ws.SetReadDeadline(time.Now().Add(c.cfg.PongWait))
	})
	// A client's WebSocket pings take a token of the inbound bucket like
	// data frames: over it the pong is skipped, and a sustained flood
	// closes the connection (1008) as for frames. Runs on the reader.
	c.ws.SetPingHandler(func(data string) error {
		if !c.allowInbound() {
			return nil
		}
		err := c.ws.WriteControl(websocket.PongMessage, []byte(data), c.writeDeadline(time.Now().Add(c.cfg.WriteWait)))
		if err != nil && !errors.Is(err, websocket.ErrCloseSent) {
			c.terminate(CloseAbnormal)
		}
		return nil
	})
	for {
		mt, data, err := c.ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			switch {
			case errors.As(err, &ce):
				c.terminate(ce.Code) // gorilla has answered the peer's close
			case errors.Is(err, websocket.ErrReadLimit):
				c.terminate(CloseTooBig) // gorilla has sent 1009
			default:
				c.terminate(CloseAbnormal)
			}
			return
		}
		if c.closing() {
			continue // waiting for the peer's close reply
		}
		c.handle(mt, data)
	}
}

// handle serves one client message. The inbound limit comes first: a
// rejected frame costs no UTF-8 check and no decoding.
func (c *Conn) handle(mt int, data []byte) {
	if !c.allowInbound() {
		return
	}
	if mt != websocket.TextMessage {
		c.met.FrameIn(metrics.FrameBinary)
		c.Close(CloseUnsupported, "binary frames are not supported; send JSON text frames")
		return
	}
	if !utf8.Valid(data) {
		c.met.FrameIn(metrics.FrameInvalid)
		c.Close(CloseInvalidData, "invalid UTF-8 in text frame")
		return
	}
	f, err := protocol.DecodeClientFrame(data)
	if err != nil {
		c.met.FrameIn(metrics.FrameInvalid)
		var fe *protocol.FrameError
		if errors.As(err, &fe) {
			c.sendError(fe.Code, fe.Message, fe.Room, fe.ID)
		} else {
			c.sendError(protocol.CodeBadRequest, err.Error(), "", "")
		}
		return
	}
	c.met.FrameIn(f.Type)
	if f.Type == protocol.TypePing {
		c.reply(protocol.TypePong, protocol.NewPong(f.ID))
		return
	}
	c.dispatch(f) // at once, or in the room's lane behind its frame in flight
}

// allowInbound takes a token of the inbound bucket for one client frame
// or WebSocket ping (inbound.go). Without one the frame is dropped and
// counted (rate_limited_total); the client gets one rate_limited error
// frame (no room, no id: the frame is not decoded) at most once per
// NoticeInterval, and more than MaxRejectedWindow rejections within the
// abuse window close the connection with 1008. Reader only.
func (c *Conn) allowInbound() bool {
	v := c.inbound.admit(time.Now())
	if v == admitted {
		return true
	}
	c.met.RateLimited.Inc()
	switch v {
	case rejectedAbuse:
		if c.closeWith(ClosePolicy, ClosePolicy, fmt.Sprintf("inbound rate limit: more than %d frames rejected within %s", c.cfg.MaxRejectedWindow, AbuseWindow)) {
			c.met.AbuseCloses.Inc()
		}
	case rejectedNotice:
		c.sendError(protocol.CodeRateLimited, fmt.Sprintf(
			"too many frames: at most %g per second, burst %d; frames over it are dropped, reported at most once per second, and more than %d within %s close the connection (1008)",
			c.cfg.InboundRate, c.cfg.InboundBurst, c.cfg.MaxRejectedWindow, AbuseWindow), "", "")
	}
	return false
}

// reply queues a server frame of type typ made by the session.
func (c *Conn) reply(typ string, v any) {
	b, err := protocol.Encode(v)
	if err != nil {
		c.logAt(zapcore.ErrorLevel, "encode frame", zap.String("type", typ), zap.Error(err))
		return
	}
	if c.Send(b) {
		c.met.FrameOut(typ, 1)
	}
}

func (c *Conn) sendError(code, msg, room, id string) {
	c.met.Error(code)
	c.reply(protocol.TypeError, protocol.NewError(code, msg, room, id))
}

func (c *Conn) unavailable(f protocol.ClientFrame, why string) {
	c.sendError(protocol.CodeUnavailable, why, f.Room, f.ID)
}

func (c *Conn) isJoined(room string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.rooms[room]
	return ok
}

// join serves a join in the room's lane. A join of a room not yet joined
// reserves a place among MaxRooms (c.joining) and holds one of the user's
// free joins if one is left, until it commits or fails: joins in flight
// count against the limit, and a join that fails gives both back, but
// for a join the authoriser denied: that one asked it, and spends its free
// join as a joined room does. A re-join, and a join that found no free
// join, takes a token of the user's snapshot budget (budget.go).
func (c *Conn) join(f protocol.ClientFrame) {
	c.mu.Lock()
	_, already := c.rooms[f.Room]
	n, gone := len(c.rooms)+c.joining, c.disconnected
	reserved := !gone && !already && n < c.cfg.MaxRooms
	if reserved {
		c.joining++
	}
	c.mu.Unlock()
	switch {
	case gone:
		c.unavailable(f, "gateway shutting down; reconnect")
		return
	case !already && !reserved:
		c.sendError(protocol.CodeRoomLimit, fmt.Sprintf("at most %d rooms per connection; leave one first", c.cfg.MaxRooms), f.Room, f.ID)
		return
	}
	free := reserved && c.holdFreeJoin()
	if reserved {
		// Runs on this goroutine after the hub's Sync returned (commit is
		// called within it), so reserved and free are this join's alone.
		defer func() {
			c.mu.Lock()
			if reserved {
				c.joining--
			}
			c.mu.Unlock()
			if free {
				c.budget.returnFree()
			}
		}()
	}
	if !c.deps.Backend.Connected() {
		c.unavailable(f, "presence backend unavailable (NATS); retry")
		return
	}
	if !free && !c.takeSnapshot(f) {
		return
	}
	if !already {
		if ok, denied := c.authorize(f); !ok {
			if denied && free {
				free = false
				c.budget.spendFree(time.Now())
			}
			return
		}
	}
	// The room is added to c.rooms only once the snapshot is in, and not
	// after the disconnect command went out (shutdown) or a close began
	// (Serve has taken or is about to take the list of rooms to leave).
	commit := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.disconnected || c.closing() {
			return false
		}
		if reserved {
			reserved = false
			c.joining--
		}
		if free {
			free = false
			c.budget.spendFree(time.Now())
		}
		c.rooms[f.Room] = struct{}{}
		return true
	}
	c.answerSync(f, c.deps.Hub.Sync(c.ctx, hub.SyncJoin, f.Room, c, f.ID, commit))
}

// authorize asks the authoriser whether the user may join f's room, within
// SnapshotTimeout. When not, it answers f forbidden (denied) or
// unavailable (the authoriser could not tell) and returns ok false.
func (c *Conn) authorize(f protocol.ClientFrame) (ok, denied bool) {
	actx, cancel := context.WithTimeout(c.ctx, c.cfg.SnapshotTimeout)
	err := c.deps.Authorizer.Authorize(actx, c.ident, f.Room)
	cancel()
	switch {
	case errors.Is(err, authz.ErrForbidden):
		c.sendError(protocol.CodeForbidden, "not allowed to join room "+strconv.Quote(f.Room), f.Room, f.ID)
		return false, true
	case err != nil:
		c.unavailable(f, "authorisation unavailable; retry")
		return false, false
	}
	return true, false
}

// answerSync answers a join or sync that the hub could not serve.
func (c *Conn) answerSync(f protocol.ClientFrame, err error) {
	switch {
	case err == nil:
	case errors.Is(err, hub.ErrNotMember):
		c.sendError(protocol.CodeNotJoined, "join room "+strconv.Quote(f.Room)+" first", f.Room, f.ID)
	case errors.Is(err, hub.ErrSnapshot):
		c.unavailable(f, "typing snapshot unavailable ("+backend.Reason(err)+"); retry")
	case errors.Is(err, hub.ErrAborted), errors.Is(err, hub.ErrClosed):
		c.unavailable(f, "gateway shutting down; reconnect")
	case errors.Is(err, hub.ErrRefused):
		c.unavailable(f, "room subscription refused by Redis; retry")
	default:
		c.unavailable(f, "room subscription unavailable (Redis); retry")
	}
}

func (c *Conn) leave(f protocol.ClientFrame) {
	c.mu.Lock()
	_, joined := c.rooms[f.Room]
	var cmd *protocol.Command
	if joined {
		delete(c.rooms, f.Room)
		if c.ident.ShareTyping && !c.disconnected {
			cmd = c.commandLocked(protocol.OpLeave, f.Room)
		}
	}
	c.mu.Unlock()
	if pubErr := c.publish(cmd); pubErr != nil {
		c.logAt(zapcore.DebugLevel, "leave command not published; workers expire the entry after ttl", zap.String("room", f.Room), zap.Error(pubErr))
	}
	if joined {
		c.deps.Hub.Leave(f.Room, c)
	}
	c.reply(protocol.TypeLeft, protocol.NewLeft(f.Room, f.ID))
}

func (c *Conn) typing(f protocol.ClientFrame) {
	op := protocol.OpStart
	if f.Type == protocol.TypeTypingStop {
		op = protocol.OpStop
	}
	c.mu.Lock()
	_, joined := c.rooms[f.Room]
	var why string
	var cmd *protocol.Command
	switch {
	case !joined:
	case !c.ident.ShareTyping:
		// The user opted out: drop start and stop alike, silently.
	case c.disconnected:
		why = "gateway shutting down; reconnect"
	case !c.deps.Backend.Connected():
		why = "presence backend unavailable (NATS); retry"
	default:
		cmd = c.commandLocked(op, f.Room)
	}
	c.mu.Unlock()
	if err := c.publish(cmd); err != nil {
		why = "presence backend unavailable (NATS); retry"
	}
	switch {
	case !joined:
		c.sendError(protocol.CodeNotJoined, "join room "+strconv.Quote(f.Room)+" first", f.Room, f.ID)
	case why != "":
		c.unavailable(f, why)
	}
}

// commandLocked builds a start, stop or leave command with the next seq;
// c.mu is held. The caller publishes it (publish) after releasing c.mu, so
// no lock is held across the NATS write: a command published late by a
// race with Disconnect (the only other publisher) carries a lower seq than
// the disconnect, and the worker drops it as stale.
func (c *Conn) commandLocked(op, room string) *protocol.Command {
	c.seq++
	return &protocol.Command{
		V: protocol.Version, Op: op, Room: room, User: c.ident.User, Name: c.ident.Name,
		Conn: c.id, Seq: c.seq, TsMs: time.Now().UnixMilli(),
	}
}

// publish sends cmd (nil: nothing) to the workers and counts it.
func (c *Conn) publish(cmd *protocol.Command) error {
	if cmd == nil {
		return nil
	}
	if err := c.deps.Backend.Publish(cmd); err != nil {
		return err
	}
	c.met.Command(cmd.Op)
	return nil
}

func (c *Conn) sync(f protocol.ClientFrame) {
	if !c.isJoined(f.Room) {
		c.sendError(protocol.CodeNotJoined, "join room "+strconv.Quote(f.Room)+" first", f.Room, f.ID)
		return
	}
	if !c.takeSnapshot(f) {
		return
	}
	if !c.deps.Backend.Connected() {
		c.unavailable(f, "presence backend unavailable (NATS); retry")
		return
	}
	c.answerSync(f, c.deps.Hub.Sync(c.ctx, hub.SyncAsked, f.Room, c, f.ID, nil))
}
