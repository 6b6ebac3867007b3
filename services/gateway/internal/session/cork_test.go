package session

import (
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
