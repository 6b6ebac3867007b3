package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// writeWait bounds each frame write of a client.
const writeWait = 5 * time.Second

// client is one load connection: one user, one room.
type client struct {
	idx     int
	user    string
	room    string
	roomIdx int
	url     string
	typing  bool // drives typing (else only listens)
	r       *runner
	ws      *websocket.Conn
	log     typistLog // what this client sent
	others  int64     // the room's other joined members: receivers of each send

	// startFrame, stopFrame: the Ellipsis driver's typing frames, built
	// at join.
	startFrame, stopFrame []byte

	wmu   sync.Mutex // one writer at a time (gorilla/websocket)
	on    bool       // a burst is on (last send a start or refresh); under wmu
	cmdID uint32     // Centrifugo: the last command id used; under wmu
	wbuf  []byte     // Centrifugo: frame buffer, reused; under wmu

	// Case roles (state.go, stall.go, watch.go), fixed before the reader
	// starts: matchEvents matches room events against the senders' logs
	// (event latency); countOnly only counts frames (big-room members not
	// sampled); stall stops reading in the stall window; watching is a
	// watcher. view, when set, is the connection's view of its tracked
	// rooms (room indexes), sample measures the delay to the state into
	// stateOut.
	matchEvents, countOnly, stall, watching, sample bool
	view                                            *view
	tracked                                         []int
	stateOut                                        *stateStats
	trackFrom                                       atomic.Int64 // mono ns: changes sent before are not measured

	// views is the reader's per-typist state; owned by the reader goroutine.
	views      map[int32]*recvState
	readerDone chan struct{}
}

// dial opens the WebSocket and joins the room through the run's driver;
// on error the connection is closed and the error says what failed (its
// kind for the summary).
func (c *client) dial(ctx context.Context) error {
	o := &c.r.opts
	target, h, err := c.r.drv.dialTarget(c)
	if err != nil {
		return err
	}
	src := c.r.sourceAddr(c)
	var control func(network, address string, rc syscall.RawConn) error
	if c.stall {
		control = stallControl(o.StallRcvBuf)
	}
	d := websocket.Dialer{
		HandshakeTimeout: o.DialTimeout,
		ReadBufferSize:   1024, // frames are small; 10,000 connections in one process
		WriteBufferSize:  512,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nd := net.Dialer{Timeout: o.DialTimeout, Control: control}
			if src != nil {
				nd.LocalAddr = src
			}
			return nd.DialContext(ctx, network, addr)
		},
	}
	dctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	ws, resp, err := d.DialContext(dctx, target, h)
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			return &kindError{"dial:http_" + strconv.Itoa(resp.StatusCode), fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))}
		}
		return &kindError{dialErrorKind(err), err}
	}
	c.ws = ws
	ws.SetReadLimit(64 << 10)
	if c.watching {
		return nil // a watcher joins nothing; it watches at Options.WatchAt
	}
	if err := c.r.drv.join(c); err != nil {
		ws.Close()
		return err
	}
	_ = ws.SetReadDeadline(time.Time{})
	return nil
}

// kindError is an error with its summary kind ("dial:timeout", ...).
type kindError struct {
	kind string
	err  error
}

func (e *kindError) Error() string { return e.kind + ": " + e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }

func dialErrorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "dial:refused"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "dial:addr_not_available" // ephemeral ports of this source address used up
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return "dial:too_many_open_files"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "dial:timeout"
	case errors.As(err, &ne) && ne.Timeout():
		return "dial:timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return "dial:reset"
	}
	return "dial:other"
}

// send writes one typing frame of kind k and logs it first, so that no
// receiver can read the event before the entry exists.
func (c *client) send(k kind) error {
	mono, wall := c.r.clock.now()
	c.log.add(entry{mono: mono, wallMs: wall, kind: k})
	c.wmu.Lock()
	frame := c.r.drv.frame(c, k)
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
	err := c.ws.WriteMessage(websocket.TextMessage, frame)
	c.on = k != kindStop
	c.wmu.Unlock()
	if err != nil {
		if !c.r.closing.Load() {
			c.r.st.fail("write")
		}
		return err
	}
	cn := &c.r.st.c
	switch k {
	case kindStart:
		cn.sentStart.Add(1)
		cn.expectState.Add(c.others)
	case kindStop:
		cn.sentStop.Add(1)
		cn.expectState.Add(c.others)
	case kindRefresh:
		cn.sentRefresh.Add(1)
		cn.expectRefresh.Add(c.others)
	}
	return nil
}

// readLoop reads frames until the connection closes.
func (c *client) readLoop() {
	defer close(c.readerDone)
	r := c.r
	st := r.st
	for {
		if c.stall {
			r.stall.wait(r.clock)
		}
		var data []byte
		var err error
		if c.countOnly {
			err = c.discardMessage()
		} else {
			_, data, err = c.ws.ReadMessage()
		}
		if err != nil {
			st.c.open.Add(-1)
			if !r.closing.Load() && r.opts.StallShare > 0 {
				if c.stall {
					r.stall.closedStalled.Add(1)
				} else {
					r.stall.closedHealthy.Add(1)
				}
				if c.rejoin() {
					continue // as the SDK does: reconnect, join, take the snapshot
				}
			}
			if !r.closing.Load() {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					st.fail("closed:" + strconv.Itoa(ce.Code))
				} else {
					st.fail("read")
				}
			}
			return
		}
		if c.countOnly {
			st.c.framesIn.Add(1)
			continue
		}
		now := r.clock.mono()
		if r.closing.Load() {
			continue
		}
		if c.watching {
			st.c.framesIn.Add(1)
			c.handleWatch(data, now)
			continue
		}
		r.drv.handle(c, data, now)
	}
}

// rejoin reconnects a tracked connection the gateway closed during a
// stalled-readers run and joins its room again; the `joined` snapshot
// replaces its view (driver join). False when that fails or the run is
// closing.
func (c *client) rejoin() bool {
	r := c.r
	if r.closing.Load() || c.view == nil {
		return false
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.Close()
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.DialTimeout)
	defer cancel()
	if err := c.dial(ctx); err != nil {
		r.st.fail("rejoin")
		return false
	}
	r.stall.rejoined.Add(1)
	r.st.c.open.Add(1)
	return true
}

// discardMessage reads one message and drops it, without keeping it.
func (c *client) discardMessage() error {
	_, rd, err := c.ws.NextReader()
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, rd)
	return err
}

// onEvent matches one room event against its sender's log.
func (c *client) onEvent(ev protocol.ServerFrame, now int64) {
	st := c.r.st
	t := c.r.typist(ev.User)
	if t == c {
		st.c.echoes.Add(1) // the sender's own event (Centrifugo echoes publications to subscribers, sender included)
		return
	}
	if t == nil || t.room != c.room {
		st.c.unmatched.Add(1)
		return
	}
	v := c.views[int32(t.idx)]
	if v == nil {
		v = &recvState{cursor: -1}
		c.views[int32(t.idx)] = v
	}
	start := ev.Type == "typing_start"
	if !start && ev.Reason != "stopped" {
		v.shown = false
		if ev.Reason == "expired" {
			st.c.expiredStops.Add(1)
		} else {
			st.c.otherStops.Add(1)
		}
		return
	}
	m := t.log.match(v, start, ev.TsMs)
	if !m.ok {
		st.c.unmatched.Add(1)
		return
	}
	if m.refresh {
		st.c.matchedRefr.Add(1)
	} else {
		st.c.matchedState.Add(1)
	}
	st.record(c.idx, now-m.sentAt, m.refresh)
	if !m.refresh && c.r.opts.StallShare > 0 {
		c.r.stall.record(m.sentAt, now-m.sentAt)
	}
}

// endBurst stops a burst still on after the run: unmeasured, uncounted
// (the run is over), so the typists do not all stop in one burst that the
// measurement would include. Closing would clear them too (the gateway's
// disconnect command); an explicit stop is what a client does.
func (c *client) endBurst() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.on {
		return
	}
	c.on = false
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
	_ = c.ws.WriteMessage(websocket.TextMessage, c.r.drv.frame(c, kindStop))
}

// close sends a normal close and drops the connection.
func (c *client) close() {
	if c.ws == nil {
		return
	}
	c.wmu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "load generator done"), time.Now().Add(time.Second))
	c.wmu.Unlock()
	_ = c.ws.Close()
}
