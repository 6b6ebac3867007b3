package gateway_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// floodResult is what a paced client saw.
type floodResult struct {
	code     int           // close code; 0: still open at the end
	closedAt time.Duration // after the first frame
	sent     int
	pongs    int
	notices  []time.Duration // rate_limited error frames, after the first frame
	withID   int             // rate_limited error frames carrying an id or room
}

// flood sends `{"type":"ping","id":"<n>"}` frames at perSecond, paced on
// the clock (after a stall of the test process it catches up by at most 20
// frames, far under the burst of 40, so a slow machine never turns a
// legal rate into a burst), reading everything the gateway answers, until
// the connection closes or d has passed.
func flood(t *testing.T, c *client, perSecond float64, d time.Duration) floodResult {
	t.Helper()
	var (
		mu     sync.Mutex
		r      floodResult
		start  = time.Now()
		closed = make(chan struct{})
	)
	go func() {
		defer close(closed)
		for {
			_ = c.ws.SetReadDeadline(time.Now().Add(d + 10*time.Second))
			_, b, err := c.ws.ReadMessage()
			mu.Lock()
			if err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					r.code = ce.Code
				} else {
					r.code = -1
				}
				r.closedAt = time.Since(start)
				mu.Unlock()
				return
			}
			var f frame
			_ = json.Unmarshal(b, &f)
			switch {
			case f.str("type") == protocol.TypePong:
				r.pongs++
			case f.str("type") == protocol.TypeError && f.str("code") == protocol.CodeRateLimited:
				r.notices = append(r.notices, time.Since(start))
				if f.str("id") != "" || f.str("room") != "" {
					r.withID++
				}
			}
			mu.Unlock()
		}
	}()
	interval := time.Duration(float64(time.Second) / perSecond)
	sent := 0
send:
	for time.Since(start) < d {
		due := int(time.Since(start)/interval) + 1
		if due-sent > 20 {
			sent = due - 20
		}
		for ; sent < due; sent++ {
			if c.ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping","id":"`+strconv.Itoa(sent)+`"}`)) != nil {
				break send // closed by the gateway
			}
		}
		select {
		case <-closed:
			break send
		case <-time.After(time.Until(start.Add(time.Duration(sent) * interval))):
		}
	}
	if time.Since(start) >= d {
		// Still open: make sure it is still served, then stop reading.
		mu.Lock()
		open := r.code == 0
		mu.Unlock()
		if open {
			_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		}
	}
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("the reader never ended")
	}
	mu.Lock()
	defer mu.Unlock()
	r.sent = sent
	if r.code == websocket.CloseNormalClosure {
		r.code = 0 // our own close at the end
	}
	return r
}

// Over real WebSockets with the default limits (20
// frames/s, burst 40, ELLIPSIS_INBOUND_MAX_REJECTED 50): a flood at 100
// frames/s is closed with 1008 within 10 s, a client at 25 frames/s within
// 30 s, one at 19 frames/s never; at most one rate_limited error frame per
// second reaches any of them. The three run in parallel (the 19/s and 25/s
// ones take about 20 s each).
func TestInboundAbuseRates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rate   float64
		run    time.Duration // how long the client sends at most
		within time.Duration // closed with 1008 within this; 0: never closed
	}{
		{rate: 100, run: 10 * time.Second, within: 10 * time.Second},
		{rate: 25, run: 30 * time.Second, within: 30 * time.Second},
		{rate: 19, run: 22 * time.Second},
	} {
		t.Run(strconv.FormatFloat(tc.rate, 'f', -1, 64)+"/s", func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.dial("alice", "")
			r := flood(t, c, tc.rate, tc.run)
			t.Logf("%g frames/s: sent %d, %d pongs, %d rate_limited notices, close %d after %v",
				tc.rate, r.sent, r.pongs, len(r.notices), r.code, r.closedAt.Round(time.Millisecond))
			if tc.within == 0 {
				if r.code != 0 {
					t.Fatalf("closed with %d after %v, want never closed", r.code, r.closedAt)
				}
				if n := e.metric("ellipsis_gateway_abuse_closes_total"); n != 0 {
					t.Fatalf("abuse_closes_total = %v", n)
				}
				if r.pongs == 0 {
					t.Fatal("no frame was served")
				}
				return
			}
			if r.code != websocket.ClosePolicyViolation {
				t.Fatalf("close %d after %v, want 1008 within %v", r.code, r.closedAt, tc.within)
			}
			if r.closedAt > tc.within {
				t.Fatalf("closed with 1008 after %v, want within %v", r.closedAt, tc.within)
			}
			if len(r.notices) == 0 || r.withID != 0 {
				t.Fatalf("%d rate_limited notices (%d with an id or room), want some, none with an id (the frame is not decoded)", len(r.notices), r.withID)
			}
			if max := int(r.closedAt/time.Second) + 1; len(r.notices) > max {
				t.Fatalf("%d rate_limited notices in %v", len(r.notices), r.closedAt)
			}
			testkit.WaitFor(t, 5*time.Second, "the abuse close to be counted", func() bool {
				return e.metric("ellipsis_gateway_abuse_closes_total") == 1 &&
					e.metric(`ellipsis_gateway_closes_total{code="1008"}`) == 1
			})
			if n := e.metric("ellipsis_gateway_rate_limited_total"); n <= 50 {
				t.Fatalf("rate_limited_total = %v, want more than 50", n)
			}
			if n := e.metric(`ellipsis_gateway_errors_total{code="rate_limited"}`); int(n) != len(r.notices) {
				t.Fatalf("errors_total{rate_limited} = %v, client saw %d notices", n, len(r.notices))
			}
		})
	}
}
