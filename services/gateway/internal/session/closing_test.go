package session

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
)

// servedConn serves one WebSocket connection with a Conn whose WriteWait
// is writeWait and whose socket sends through a small buffer; the client
// side, also with a small buffer, never reads. It returns the Conn and a
// channel closed when Serve returned.
func servedConn(t *testing.T, writeWait time.Duration) (*Conn, <-chan struct{}) {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	type served struct {
		c    *Conn
		done chan struct{}
	}
	ch := make(chan served, 1)
	budgets := testBudgets(t, BudgetConfig{FreeJoins: 1, SnapshotRate: 1, SnapshotBurst: 1, Users: 1})
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		if tc, ok := ws.UnderlyingConn().(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(4096)
		}
		c := New(WebSocket(ws), "gw:1", auth.Identity{User: "alice"},
			Config{MaxFrameBytes: 4096, MaxRooms: 2, InboundRate: 100, InboundBurst: 100, OutboundQueue: 1000,
				SnapshotTimeout: time.Second, PongWait: time.Minute, WriteWait: writeWait, WriteStall: writeWait, MaxRejectedWindow: 10},
			Deps{Hub: &fakeRooms{}, Backend: fakeBackend{}, Authorizer: authz.AllowAll{}, Metrics: met, Logger: zap.NewNop(),
				Budgets: budgets})
		done := make(chan struct{})
		ch <- served{c, done}
		c.Serve()
		close(done)
	}))
	t.Cleanup(srv.Close)
	d := websocket.Dialer{NetDial: func(network, addr string) (net.Conn, error) {
		conn, err := net.Dial(network, addr)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		return conn, err
	}}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	select {
	case s := <-ch:
		return s.c, s.done
	case <-time.After(10 * time.Second):
		t.Fatal("no connection served")
		return nil, nil
	}
}

// fillUntilBlocked queues frames until the writer is stuck on the peer
// that does not read: some frames stay queued across polls.
func fillUntilBlocked(t *testing.T, c *Conn) {
	t.Helper()
	frame := bytes.Repeat([]byte("x"), 32<<10)
	for range 200 {
		if !c.Send(frame) {
			t.Fatal("Send refused before the writer blocked")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	last := -1
	for {
		n := c.w.queued()
		if n > 0 && n == last {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer never blocked (%d queued)", n)
		}
		last = n
		time.Sleep(200 * time.Millisecond)
	}
}

// A slow consumer that is closed is let go within a bound well under
// WriteWait, also when the write in flight re-armed the socket's write
// deadline (as gorilla does before each write) after the close request:
// the close deadline and the hard stop (2*closeGrace) end it.
func TestClosingSlowConsumerEndsWellBeforeWriteWait(t *testing.T) {
	const writeWait = time.Minute
	const bound = 15 * time.Second // generous; well under writeWait
	for _, tc := range []struct {
		name  string
		rearm bool
	}{{"blocked write", false}, {"deadline re-armed after close", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c, done := servedConn(t, writeWait)
			fillUntilBlocked(t, c)
			c.Close(CloseGoingAway, "bye")
			if tc.rearm {
				// The race the hard stop is for: a write re-arming the
				// socket's deadline from WriteWait after closeWith set it.
				_ = c.w.tr.(wsTransport).conn().SetWriteDeadline(time.Now().Add(writeWait))
			}
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatalf("connection still served %v after the close (WriteWait %v)", bound, writeWait)
			}
		})
	}
}

// After a close request no write waits past the close deadline.
func TestWriteDeadlineAfterClose(t *testing.T) {
	c := newTestConn(t, &fakeRooms{})
	far := time.Now().Add(time.Hour)
	if got := c.w.writeDeadline(far); !got.Equal(far) {
		t.Fatalf("before close: %v, want %v", got, far)
	}
	c.Close(CloseGoingAway, "bye")
	if got := c.w.writeDeadline(far); !got.Before(time.Now().Add(2 * closeGrace)) {
		t.Fatalf("after close: %v, want at most closeGrace from now", got)
	}
}
