package session

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Frames queued while no write loop runs are taken by one drain and
// written with one WriteTexts call, in order, and the host hears of each.
func TestWriterDrainWritesQueuedFramesTogether(t *testing.T) {
	w, tr, h := newTestWriter(t, 2*maxDrainFrames+10, time.Hour, 10*time.Second)
	const n = maxDrainFrames + 3 // more than one drain holds
	for i := range n {
		w.send([]byte(strconv.Itoa(i)))
	}
	w.start()
	for i := range n {
		if f := tr.next(t); f.kind != fText || f.data != strconv.Itoa(i) {
			t.Fatalf("frame %d: wrote %v", i, f)
		}
	}
	if d := tr.drains.Load(); d != 2 {
		t.Fatalf("%d frames queued before start written in %d WriteTexts calls, want 2 (at most %d a drain)", n, d, maxDrainFrames)
	}
	if written, _ := h.counts(); written != n {
		t.Fatalf("host heard of %d frames written, want %d", written, n)
	}
}

// A drain stops taking frames once they reach maxCorked bytes.
func TestWriterDrainBoundedInBytes(t *testing.T) {
	w := &writer{cfg: &Config{OutboundQueue: 100}}
	big := make([]byte, maxCorked/3+1)
	for range 5 {
		w.enqueue(big)
	}
	w.mu.Lock()
	got := w.drainLocked(nil)
	w.mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("drain of frames of %d bytes took %d, want 3 (stops at %d bytes)", len(big), len(got), maxCorked)
	}
}

// countConn counts the writes that reach the socket.
type countConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countConn) Write(p []byte) (int, error) { c.writes.Add(1); return c.Conn.Write(p) }

// countingListener hands out connections whose writes are counted.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countConn{Conn: c, writes: l.writes}, nil
}

// Through a real gorilla connection, the frames of one WriteTexts reach
// the peer whole and in order in one socket write, a single frame is
// written through, and a pong the reader writes between drains still
// goes out.
func TestUpgradeWritesADrainInOneSocketWrite(t *testing.T) {
	var writes atomic.Int64
	ready := make(chan Transport, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr, err := Upgrade(&websocket.Upgrader{}, w, r)
		if err != nil {
			t.Errorf("Upgrade: %v", err)
			return
		}
		ready <- tr
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = countingListener{Listener: l, writes: &writes}
	srv.Start()
	defer srv.Close()

	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var tr Transport
	select {
	case tr = <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("no upgrade within 10 s")
	}
	defer tr.Close()
	before := writes.Load() // the handshake's

	frames := [][]byte{[]byte(`{"n":1}`), []byte(`{"n":2}`), []byte(strings.Repeat("x", 300))}
	if err := tr.WriteTexts(frames, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := writes.Load() - before; n != 1 {
		t.Fatalf("3 frames took %d socket writes, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i, want := range frames {
		mt, got, err := c.ReadMessage()
		if err != nil || mt != websocket.TextMessage || string(got) != string(want) {
			t.Fatalf("frame %d: %d %q %v, want text %q", i, mt, got, err, want)
		}
	}
	if err := tr.WriteTexts([][]byte{[]byte("alone")}, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := tr.WritePong([]byte("p"), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := writes.Load() - before; n != 3 {
		t.Fatalf("the drain, a single frame and a pong took %d socket writes, want 3", n)
	}
	pong := make(chan string, 1)
	c.SetPongHandler(func(s string) error { pong <- s; return nil })
	if mt, got, err := c.ReadMessage(); err != nil || mt != websocket.TextMessage || string(got) != "alone" {
		t.Fatalf("read %d %q %v, want text alone", mt, got, err)
	}
	go func() { _, _, _ = c.ReadMessage() }()
	select {
	case p := <-pong:
		if p != "p" {
			t.Fatalf("pong %q, want p", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no pong within 5 s")
	}
}

// deadlineConn counts the write deadlines that reach the socket.
type deadlineConn struct {
	net.Conn
	sets *atomic.Int64
}

func (c deadlineConn) SetWriteDeadline(t time.Time) error {
	c.sets.Add(1)
	return c.Conn.SetWriteDeadline(t)
}

// A write deadline equal to the last one set is not set again, and the
// socket keeps behaving by the last one set: expired, a write fails;
// moved later, it succeeds. A different deadline is always set.
func TestCorkConnSetsOnlyAChangedWriteDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _, _ = io.Copy(io.Discard, b) }()
	var sets atomic.Int64
	c := &corkConn{Conn: deadlineConn{Conn: a, sets: &sets}}
	past := time.Now().Add(-time.Second)
	for range 3 {
		if err := c.SetWriteDeadline(past); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("x")); err == nil {
			t.Fatal("write with an expired deadline succeeded")
		}
	}
	if n := sets.Load(); n != 1 {
		t.Fatalf("the same deadline three times reached the socket %d times, want 1", n)
	}
	future := time.Now().Add(time.Minute)
	if err := c.SetWriteDeadline(future); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("write after the deadline moved later: %v", err)
	}
	if err := c.SetDeadline(past); err != nil {
		t.Fatal(err)
	}
	if n := sets.Load(); n != 3 {
		t.Fatalf("three different deadlines reached the socket %d times, want 3", n)
	}
	// Two drains of one stallDeadline step: the same wall-clock instant,
	// from two clock reads (monotonic readings a few ns apart).
	var d1, d2 time.Time
	for range 3 { // two reads on both sides of a step boundary: read again
		n1 := time.Now()
		n2 := time.Now()
		if d1, d2 = stallDeadline(n1, 30*time.Second), stallDeadline(n2, 30*time.Second); d1.UnixNano() == d2.UnixNano() {
			break
		}
	}
	_ = c.SetWriteDeadline(d1)
	_ = c.SetWriteDeadline(d2)
	if n := sets.Load(); n != 4 {
		t.Fatalf("two deadlines of one step reached the socket %d times in all, want 4 (the second not set)", n)
	}
}
