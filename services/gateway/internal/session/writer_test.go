package session

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// enqueue is enqueueLocked taking mu.
func (w *writer) enqueue(frame []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enqueueLocked(frame)
}

// The outbound queue keeps order, holds at most OutboundQueue frames,
// reuses written room before growing and lets a large backing array go
// once drained.
func TestOutboundQueue(t *testing.T) {
	c := &writer{cfg: &Config{OutboundQueue: 40}}
	next, want := 0, 0
	push := func(n int) {
		t.Helper()
		for range n {
			if !c.enqueue([]byte(strconv.Itoa(next))) {
				t.Fatalf("enqueue %d refused with %d queued", next, c.queued())
			}
			next++
		}
	}
	pop := func(n int) {
		t.Helper()
		for range n {
			f, ok := c.dequeue()
			if !ok || string(f) != strconv.Itoa(want) {
				t.Fatalf("dequeue = %q, %v; want %d", f, ok, want)
			}
			want++
		}
	}
	if _, ok := c.dequeue(); ok {
		t.Fatal("dequeue from an empty queue")
	}
	for round := 0; round < 15; round++ { // interleaved, wrapping
		push(7)
		pop(5)
	}
	pop(c.queued())
	push(40)
	pop(1)
	push(1) // room made by a write is usable again
	pop(40)
	if _, ok := c.dequeue(); ok || c.out != nil || c.head != 0 {
		t.Fatalf("drained queue kept %d slots (head %d)", cap(c.out), c.head)
	}
	push(1)
	pop(1)
	if cap(c.out) == 0 || cap(c.out) > keepQueueCap {
		t.Fatalf("small drained queue has capacity %d, want 1..%d kept", cap(c.out), keepQueueCap)
	}
}

// fakeHost is a writer's host for the writer's own tests: a failed write
// asks for the close sequence without a close frame, as a Conn does.
type fakeHost struct {
	w         *writer
	mu        sync.Mutex
	n         int // frames written
	failed    int
	stalled   int      // writeStalled calls
	inConf    int      // conflating(true) less conflating(false)
	dropped   int      // conflated events
	pushes    []string // pushRoom calls
	overflows int      // overflowed calls
	closeOnce sync.Once
	read      chan struct{} // closed by the test: reading ended
}

func (h *fakeHost) written([]byte, time.Time) { h.mu.Lock(); h.n++; h.mu.Unlock() }
func (h *fakeHost) writeFailed() {
	h.mu.Lock()
	h.failed++
	h.mu.Unlock()
	h.close(0, "")
}
func (h *fakeHost) readDone() <-chan struct{} { return h.read }
func (h *fakeHost) writeStalled() {
	h.mu.Lock()
	h.stalled++
	h.mu.Unlock()
	h.close(CloseTryAgainLater, "write stalled")
}
func (h *fakeHost) overflowed() {
	h.mu.Lock()
	h.overflows++
	h.mu.Unlock()
	go h.close(CloseTryAgainLater, "slow consumer") // called under the writer's lock, as Conn does
}
func (h *fakeHost) conflating(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if on {
		h.inConf++
	} else {
		h.inConf--
	}
}
func (h *fakeHost) conflated(n int) { h.mu.Lock(); h.dropped += n; h.mu.Unlock() }
func (h *fakeHost) pushRoom(room string, _ uint64) {
	h.mu.Lock()
	h.pushes = append(h.pushes, room)
	h.mu.Unlock()
}

// close asks for the close sequence once, as a Conn does.
func (h *fakeHost) close(code int, reason string) {
	h.closeOnce.Do(func() { h.w.close(code, reason) })
}
func (h *fakeHost) counts() (written, failed int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n, h.failed
}

// newTestWriter is a writer of a fake transport with an outbound queue of
// queueMax frames, pongWait and writeWait; the test starts it.
func newTestWriter(t *testing.T, queueMax int, pongWait, writeWait time.Duration) (*writer, *fakeTransport, *fakeHost) {
	t.Helper()
	tr := newFakeTransport()
	h := &fakeHost{read: make(chan struct{})}
	w := &writer{}
	h.w = w
	w.init(tr, h, &Config{OutboundQueue: queueMax, PongWait: pongWait, WriteWait: writeWait, WriteStall: writeWait})
	t.Cleanup(func() {
		h.close(0, "")
		select {
		case <-h.read:
		default:
			close(h.read)
		}
		<-w.done
	})
	return w, tr, h
}

// waitDone fails the test unless the writer's close sequence ends within
// 10 s.
func waitDone(t *testing.T, w *writer) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("close sequence not done within 10 s")
	}
}

// Frames queued before start wait for it; then they are written in order
// within writeWait, and the write loop's goroutine ends once the queue is
// empty.
func TestWriterWritesInOrderAndEnds(t *testing.T) {
	w, tr, h := newTestWriter(t, 10, time.Hour, 10*time.Second)
	w.send([]byte("a"))
	select {
	case f := <-tr.wrote:
		t.Fatalf("%v written before start", f)
	case <-time.After(50 * time.Millisecond):
	}
	w.start()
	w.send([]byte("b"))
	w.send([]byte("c"))
	for _, want := range []string{"a", "b", "c"} {
		f := tr.next(t)
		if f.kind != fText || f.data != want {
			t.Fatalf("wrote %v, want text %s", f, want)
		}
		if d := time.Until(f.deadline); d <= 9*time.Second || d > 10*time.Second*17/16 {
			t.Fatalf("deadline in %v, want the stall (10 s) rounded up by at most 1/16 (stallDeadline)", d)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the write loop to end", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.writing
	})
	if n, failed := h.counts(); n != 3 || failed != 0 {
		t.Fatalf("host saw %d written, %d failed; want 3, 0", n, failed)
	}
}

// The writer pings every 9/10 of pongWait on its own, with writeWait as
// the deadline.
func TestWriterPings(t *testing.T) {
	const pongWait = 200 * time.Millisecond
	w, tr, _ := newTestWriter(t, 10, pongWait, time.Second)
	began := time.Now()
	w.start()
	for i := 1; i <= 3; i++ {
		f := tr.next(t)
		if f.kind != fPing {
			t.Fatalf("wrote %v, want a ping", f)
		}
		if el, want := time.Since(began), time.Duration(i)*pongWait*9/10; el < want {
			t.Fatalf("ping %d after %v, want no sooner than %v", i, el, want)
		}
	}
}

// A close flushes the queue, writes the close frame, waits for the peer's
// reply (reading ends) and closes the transport.
func TestWriterCloseFlushesThenCloseFrame(t *testing.T) {
	w, tr, h := newTestWriter(t, 10, time.Hour, 10*time.Second)
	w.send([]byte("a"))
	w.send([]byte("b"))
	h.close(CloseGoingAway, "bye")
	if !w.closing() {
		t.Fatal("not closing after close")
	}
	w.start()
	var got []string
	for range 3 {
		got = append(got, tr.next(t).String())
	}
	if want := []string{"text a", "text b", `close 1001 "bye"`}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	select {
	case <-tr.closed:
		t.Fatal("transport closed before the peer's reply")
	case <-time.After(100 * time.Millisecond):
	}
	close(h.read)
	tr.waitClosed(t)
	waitDone(t, w)
}

// After 1013 (slow consumer) the queue is not flushed: the close frame
// goes out first and alone.
func TestWriterTryAgainLaterSkipsTheQueue(t *testing.T) {
	w, tr, h := newTestWriter(t, 10, time.Hour, 10*time.Second)
	w.send([]byte("a"))
	h.close(CloseTryAgainLater, "slow consumer")
	w.start()
	if f := tr.next(t); f.kind != fClose || f.code != CloseTryAgainLater {
		t.Fatalf("wrote %v first, want close 1013", f)
	}
	waitDone(t, w)
	tr.wantNoMore(t, "after the close frame")
}

// A close without a code (the peer closed, or the connection broke)
// writes nothing and closes the transport at once.
func TestWriterCloseWithoutFrame(t *testing.T) {
	w, tr, h := newTestWriter(t, 10, time.Hour, 10*time.Second)
	w.start()
	w.send([]byte("a"))
	tr.next(t)
	h.close(0, "")
	waitDone(t, w)
	tr.waitClosed(t)
	tr.wantNoMore(t, "in the close sequence")
}

// A write that does not finish within WriteStall (a peer that stopped
// reading) tells the host it stalled, which closes with 1013: the close
// frame is tried, the frames behind the stalled one are dropped, and the
// transport is closed by the close sequence.
func TestWriterWriteStall(t *testing.T) {
	w, tr, h := newTestWriter(t, 10, time.Hour, 50*time.Millisecond)
	tr.stall.Store(true)
	w.start()
	w.send([]byte("a"))
	w.send([]byte("b"))
	waitDone(t, w)
	tr.waitClosed(t)
	if f := tr.next(t); f.kind != fClose || f.code != CloseTryAgainLater {
		t.Fatalf("wrote %v, want close 1013", f)
	}
	h.mu.Lock()
	stalled := h.stalled
	h.mu.Unlock()
	if n, failed := h.counts(); n != 0 || failed != 0 || stalled != 1 {
		t.Fatalf("host saw %d written, %d failed, %d stalled; want 0, 0, 1", n, failed, stalled)
	}
	if tr.aborted {
		t.Fatal("transport aborted; want closed by the close sequence")
	}
}

// A write blocked on a peer that stopped reading, with a writeWait far
// away, ends within about closeGrace once a close is requested, and the
// connection ends well before writeWait.
func TestWriterCloseCutsABlockedWrite(t *testing.T) {
	w, tr, h := newTestWriter(t, 10, time.Hour, time.Hour)
	tr.stall.Store(true)
	w.start()
	w.send([]byte("a"))
	time.Sleep(50 * time.Millisecond) // the write is in flight
	close(h.read)                     // the peer replies at once: only the blocked write waits
	began := time.Now()
	h.close(CloseGoingAway, "bye")
	waitDone(t, w)
	if el := time.Since(began); el < closeGrace/2 || el > 2*closeGrace {
		t.Fatalf("closed after %v, want about closeGrace (%v)", el, closeGrace)
	}
	if d := w.writeDeadline(time.Now().Add(time.Hour)); time.Until(d) > closeGrace {
		t.Fatalf("write deadline after close in %v, want at most closeGrace", time.Until(d))
	}
}

// stallDeadline is at least now + stall and at most 17/16 of stall away,
// and the same instant of the wall clock for every now of one step.
func TestStallDeadline(t *testing.T) {
	const stall = 30 * time.Second
	now := time.Unix(1_700_000_000, 0)
	first := stallDeadline(now, stall)
	for _, d := range []time.Duration{0, time.Millisecond, 100 * time.Millisecond, stall/16 - 1} {
		at := now.Add(d)
		got := stallDeadline(at, stall)
		if got.Before(at.Add(stall)) || got.After(at.Add(stall+stall/16)) {
			t.Fatalf("stallDeadline(now+%v) = now+%v, want within [stall, 17/16 stall]", d, got.Sub(at))
		}
		if d < first.Sub(now)-stall && got.UnixNano() != first.UnixNano() {
			t.Fatalf("stallDeadline(now+%v) = %v, want the step's %v", d, got, first)
		}
	}
	if got := stallDeadline(now, 10); !got.Equal(now.Add(10)) {
		t.Fatalf("a stall under 16 ns is not rounded: got now+%v", got.Sub(now))
	}
}

// A pong's deadline is never before the stall deadline a drain got just
// before it (the pong replaces the socket's deadline under a write that
// may be stalled, which must still time out as a stall), nor before
// WriteWait.
func TestPongDeadlineNotBeforeStall(t *testing.T) {
	for _, c := range []struct{ wait, stall time.Duration }{{10 * time.Second, 30 * time.Second}, {40 * time.Second, 30 * time.Second}} {
		w, tr, _ := newTestWriter(t, 10, time.Hour, c.wait)
		w.cfg.WriteStall = c.stall
		w.start()
		before := time.Now()
		drain := stallDeadline(before, c.stall)
		if err := w.pong([]byte("p")); err != nil {
			t.Fatal(err)
		}
		f := tr.next(t)
		if f.kind != fPong {
			t.Fatalf("wrote %v, want a pong", f)
		}
		// Wall clock: the rounding is of the wall clock, and the monotonic
		// readings of two time.Now calls differ from it by nanoseconds.
		if f.deadline.UnixNano() < drain.UnixNano() || f.deadline.Before(before.Add(c.wait)) {
			t.Fatalf("wait %v, stall %v: pong deadline now+%v, before the drain's now+%v or WriteWait",
				c.wait, c.stall, f.deadline.Sub(before), drain.Sub(before))
		}
	}
}
