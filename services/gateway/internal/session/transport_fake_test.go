package session

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Kinds of frames through a fakeTransport.
const (
	fText   = "text"
	fBinary = "binary"
	fPing   = "ping"
	fPong   = "pong"
	fClose  = "close"
)

// frame is one frame through a fakeTransport: in from the peer or out to
// it.
type frame struct {
	kind     string
	data     string
	code     int       // close frames
	deadline time.Time // out: the write's deadline
}

func (f frame) String() string {
	if f.kind == fClose {
		return fmt.Sprintf("close %d %q", f.code, f.data)
	}
	return f.kind + " " + f.data
}

var errFakeTimeout = errors.New("fake transport: deadline exceeded")
var errFakeClosed = errors.New("fake transport: closed")

// fakeTransport is an in-memory [Transport]: the test sends the peer's
// frames with in and reads what the connection wrote with out. Like
// gorilla, it answers a peer's close frame and reports it as a
// [*PeerClose], sends 1009 and reports [ErrFrameTooBig] over the read
// limit, and runs the control handlers within ReadFrame; it honours the
// read deadline. With stall set, text writes block until their deadline
// (cut by CutWrites), Abort or Close, or until resume: a peer that stopped
// reading, and may read again.
type fakeTransport struct {
	peer   chan frame // from the peer
	wrote  chan frame // every frame written, in order
	closed chan struct{}
	stall  atomic.Bool
	drains atomic.Int64 // WriteTexts calls

	mu           sync.Mutex
	limit        int64
	readDeadline time.Time
	ping         func([]byte) error
	pong         func() error
	cut          chan struct{} // closed by CutWrites
	resumed      chan struct{} // closed by resume
	cutBy        time.Time
	aborted      bool
	closeOnce    sync.Once
}

func newFakeTransport() *fakeTransport {
	return &fakeTransport{
		peer: make(chan frame, 64), wrote: make(chan frame, 4096),
		closed: make(chan struct{}), cut: make(chan struct{}), resumed: make(chan struct{}),
	}
}

func (t *fakeTransport) SetReadLimit(n int64) { t.mu.Lock(); t.limit = n; t.mu.Unlock() }

func (t *fakeTransport) SetReadDeadline(d time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.readDeadline = d
	return nil
}

func (t *fakeTransport) HandleControl(ping func([]byte) error, pong func() error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ping, t.pong = ping, pong
}

func (t *fakeTransport) ReadFrame() (bool, []byte, error) {
	for {
		t.mu.Lock()
		d, limit, ping, pong := t.readDeadline, t.limit, t.ping, t.pong
		t.mu.Unlock()
		expired := make(<-chan time.Time)
		var timer *time.Timer
		if !d.IsZero() {
			timer = time.NewTimer(time.Until(d))
			expired = timer.C
		}
		f, err := t.receive(expired)
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return false, nil, err
		}
		switch f.kind {
		case fPing:
			if err := ping([]byte(f.data)); err != nil {
				return false, nil, err
			}
		case fPong:
			if err := pong(); err != nil {
				return false, nil, err
			}
		case fClose:
			t.wrote <- frame{kind: fClose, code: f.code}
			return false, nil, &PeerClose{Code: f.code}
		default:
			if limit > 0 && int64(len(f.data)) > limit {
				t.wrote <- frame{kind: fClose, code: CloseTooBig}
				return false, nil, ErrFrameTooBig
			}
			return f.kind == fText, []byte(f.data), nil
		}
	}
}

// receive is the peer's next frame, or an error once the transport is
// closed or expired fires.
func (t *fakeTransport) receive(expired <-chan time.Time) (frame, error) {
	select {
	case <-t.closed:
		return frame{}, errFakeClosed
	case <-expired:
		return frame{}, errFakeTimeout
	case f := <-t.peer:
		return f, nil
	}
}

// write records f, or with stall blocks until its deadline (or the
// CutWrites deadline) passes or the transport is dropped.
func (t *fakeTransport) write(f frame, stalls bool) error {
	select {
	case <-t.closed:
		return errFakeClosed
	default:
	}
	if stalls && t.stall.Load() {
		t.mu.Lock()
		cut := t.cut
		t.mu.Unlock()
		wait := time.NewTimer(time.Until(f.deadline))
		defer wait.Stop()
		select {
		case <-t.resumed: // the peer reads again: the write goes through
			t.wrote <- f
			return nil
		case <-wait.C:
		case <-cut:
			t.mu.Lock()
			by := t.cutBy
			t.mu.Unlock()
			time.Sleep(time.Until(by))
		case <-t.closed:
		}
		return errFakeTimeout
	}
	t.wrote <- f
	return nil
}

// resume ends the stall: the blocked write and every later one go
// through. Once only.
func (t *fakeTransport) resume() {
	t.stall.Store(false)
	close(t.resumed)
}

func (t *fakeTransport) WriteTexts(frames [][]byte, d time.Time) error {
	t.drains.Add(1)
	for _, b := range frames {
		if err := t.write(frame{kind: fText, data: string(b), deadline: d}, true); err != nil {
			return err
		}
	}
	return nil
}
func (t *fakeTransport) WritePing(d time.Time) error {
	return t.write(frame{kind: fPing, deadline: d}, false)
}
func (t *fakeTransport) WritePong(b []byte, d time.Time) error {
	return t.write(frame{kind: fPong, data: string(b), deadline: d}, false)
}
func (t *fakeTransport) WriteClose(code int, reason string, d time.Time) error {
	return t.write(frame{kind: fClose, code: code, data: reason, deadline: d}, false)
}

func (t *fakeTransport) CutWrites(by time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cutBy = by
	close(t.cut)
}

func (t *fakeTransport) Abort() {
	t.mu.Lock()
	t.aborted = true
	t.mu.Unlock()
	_ = t.Close()
}

func (t *fakeTransport) Close() error {
	t.closeOnce.Do(func() { close(t.closed) })
	return nil
}

// next is the next frame written, or the test fails within 10 s.
func (t *fakeTransport) next(tb testing.TB) frame {
	tb.Helper()
	select {
	case f := <-t.wrote:
		return f
	case <-time.After(10 * time.Second):
		tb.Fatal("no frame written within 10 s")
		return frame{}
	}
}

// nextNot is the next frame written that is not of kind skip.
func (t *fakeTransport) nextNot(tb testing.TB, skip string) frame {
	tb.Helper()
	for {
		if f := t.next(tb); f.kind != skip {
			return f
		}
	}
}

// send hands the peer's frame to the reader.
func (t *fakeTransport) send(kind, data string) { t.peer <- frame{kind: kind, data: data} }

// waitClosed fails the test unless the transport is closed within 10 s.
func (t *fakeTransport) waitClosed(tb testing.TB) {
	tb.Helper()
	select {
	case <-t.closed:
	case <-time.After(10 * time.Second):
		tb.Fatal("transport not closed within 10 s")
	}
}

// wantNoMore fails the test if a frame was written that the test has not
// taken; what says after what.
func (t *fakeTransport) wantNoMore(tb testing.TB, what string) {
	tb.Helper()
	select {
	case f := <-t.wrote:
		tb.Fatalf("wrote %v %s", f, what)
	default:
	}
}
