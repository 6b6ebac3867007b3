package gateway_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The inbound limit against control frames: unsolicited WebSocket pongs
// (RFC 6455 section 5.5.3 allows them) cost the gateway a read-deadline
// update each and must count against the inbound limit like data frames
// and pings, or a client could flood them forever. At 200 pongs/s the
// connection is closed with 1008 within 10 s (generous bound: 15 s).
func TestPongFloodClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.dial("alice", "")
	codeCh := make(chan int, 1)
	go func() {
		for {
			_ = c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, _, err := c.ws.ReadMessage(); err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					codeCh <- ce.Code
				} else {
					codeCh <- -1
				}
				return
			}
		}
	}()
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < 15*time.Second {
		select {
		case code := <-codeCh:
			if code != websocket.ClosePolicyViolation {
				t.Fatalf("closed with %d after %v, want 1008", code, time.Since(start))
			}
			t.Logf("pong flood closed with 1008 after %v", time.Since(start))
			return
		case <-tick.C:
			if err := c.ws.WriteControl(websocket.PongMessage, []byte("x"), time.Now().Add(time.Second)); err != nil {
				code := <-codeCh
				if code != websocket.ClosePolicyViolation {
					t.Fatalf("write failed (%v) and closed with %d after %v, want 1008", err, code, time.Since(start))
				}
				return
			}
		}
	}
	t.Fatalf("a flood of unsolicited pongs (200/s) was not closed within 15 s")
}
