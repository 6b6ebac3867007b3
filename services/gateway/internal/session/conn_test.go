package session

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// fakeConn serves a Conn of user alice over a fake transport with cfg
// (testConfig's when zero). It returns the Conn, its transport, and a
// channel closed when Serve returned; the test's end closes it.
func fakeConn(t *testing.T, cfg Config) (*Conn, *fakeTransport, <-chan struct{}) {
	t.Helper()
	if reflect.DeepEqual(cfg, Config{}) {
		cfg = testConfig(2, 100)
	}
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	tr := newFakeTransport()
	c := New(tr, "gw:1", auth.Identity{User: "alice", ShareTyping: true}, cfg,
		Deps{Hub: &fakeRooms{}, Backend: fakeBackend{}, Authorizer: authz.AllowAll{}, Metrics: met, Logger: zap.NewNop(),
			Budgets: testBudgets(t, BudgetConfig{FreeJoins: 2, SnapshotRate: 10, SnapshotBurst: 20, Users: 10})})
	done := make(chan struct{})
	go func() {
		c.Serve()
		close(done)
	}()
	t.Cleanup(func() {
		c.Close(CloseGoingAway, "test over")
		_ = tr.Close()
		<-done
	})
	return c, tr, done
}

// waitServed fails the test unless Serve returns within 10 s, and returns
// the close code the metrics got.
func waitServed(t *testing.T, c *Conn, done <-chan struct{}) int {
	t.Helper()
	select {
	case <-done:
		return c.finalCode
	case <-time.After(10 * time.Second):
		t.Fatal("connection still served 10 s on")
		return 0
	}
}

// wantText fails unless f is a text frame holding every one of subs.
func wantText(t *testing.T, f frame, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if f.kind != fText || !strings.Contains(f.data, s) {
			t.Fatalf("wrote %v, want a text frame with %s", f, s)
		}
	}
}

// Client frames in, server frames out: a ping frame gets its pong, a join
// its joined frame, a leave its left frame, in order.
func TestConnFramesInAndOut(t *testing.T) {
	_, tr, _ := fakeConn(t, Config{})
	tr.send(fText, `{"type":"ping","id":"p1"}`)
	wantText(t, tr.nextNot(t, fPing), `"type":"pong"`, `"id":"p1"`)
	tr.send(fText, `{"type":"join","room":"r1","id":"j1"}`)
	wantText(t, tr.nextNot(t, fPing), `"type":"joined"`, `"room":"r1"`, `"id":"j1"`)
	tr.send(fText, `{"type":"leave","room":"r1","id":"l1"}`)
	wantText(t, tr.nextNot(t, fPing), `"type":"left"`, `"room":"r1"`)
	tr.send(fText, `{"type":"typing_start","room":"r1"}`)
	wantText(t, tr.nextNot(t, fPing), `"type":"error"`, `"code":"not_joined"`)
}

// Frames the protocol refuses close the connection with their code: the
// close frame goes out, the peer's reply ends reading, and Serve returns
// with that code; a frame over the read limit ends it with 1009 (sent by
// the transport).
func TestConnCloseCodes(t *testing.T) {
	for _, tc := range []struct {
		name, kind, data string
		code             int
	}{
		{"binary", fBinary, `{"type":"ping"}`, CloseUnsupported},
		{"invalid UTF-8", fText, "{\"type\":\"ping\",\"id\":\"\xff\"}", CloseInvalidData},
		{"too big", fText, `{"type":"ping","id":"` + strings.Repeat("x", 5000) + `"}`, CloseTooBig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, tr, done := fakeConn(t, Config{})
			tr.send(tc.kind, tc.data)
			if f := tr.nextNot(t, fPing); f.kind != fClose || f.code != tc.code {
				t.Fatalf("wrote %v, want close %d", f, tc.code)
			}
			if tc.code != CloseTooBig {
				tr.peer <- frame{kind: fClose, code: tc.code} // the peer's reply
			}
			if got := waitServed(t, c, done); got != tc.code {
				t.Fatalf("closed with %d, want %d", got, tc.code)
			}
		})
	}
}

// The peer's close ends the connection with its code and no close frame
// of the session's (the transport answered it).
func TestConnPeerClose(t *testing.T) {
	c, tr, done := fakeConn(t, Config{})
	tr.peer <- frame{kind: fClose, code: CloseNormal}
	if got := waitServed(t, c, done); got != CloseNormal {
		t.Fatalf("closed with %d, want %d", got, CloseNormal)
	}
	tr.next(t) // the transport's answer
	tr.wantNoMore(t, "after the peer closed")
}

// Close from another goroutine flushes the queued frames before the close
// frame.
func TestConnCloseFlushes(t *testing.T) {
	c, tr, done := fakeConn(t, Config{})
	tr.send(fText, `{"type":"ping","id":"p1"}`)
	wantText(t, tr.nextNot(t, fPing), `"type":"pong"`)
	c.Send([]byte("a"))
	c.Close(CloseGoingAway, "gateway shutting down")
	var got []string
	for f := tr.nextNot(t, fPing); ; f = tr.nextNot(t, fPing) {
		got = append(got, f.String())
		if f.kind == fClose {
			break
		}
	}
	if want := `[text a close 1001 "gateway shutting down"]`; fmt.Sprint(got) != want {
		t.Fatalf("wrote %q, want %s", got, want)
	}
	tr.peer <- frame{kind: fClose, code: CloseGoingAway}
	if code := waitServed(t, c, done); code != CloseGoingAway {
		t.Fatalf("closed with %d, want %d", code, CloseGoingAway)
	}
	if c.Send([]byte("late")) {
		t.Fatal("Send after the close took a frame")
	}
}

// The session pings every 9/10 of PongWait; the peer's pongs keep it open
// past PongWait, and a silent peer is dropped (1006) once PongWait passed
// without a frame.
func TestConnPings(t *testing.T) {
	cfg := testConfig(2, 100)
	cfg.PongWait = 300 * time.Millisecond
	c, tr, done := fakeConn(t, cfg)
	began := time.Now()
	for range 4 { // 4 * 270 ms: past PongWait several times
		if f := tr.next(t); f.kind != fPing {
			t.Fatalf("wrote %v, want a ping", f)
		}
		tr.send(fPong, "")
	}
	if waited := time.Since(began); waited < 3*cfg.PongWait {
		t.Fatalf("4 pings in %v, want them 9/10 of PongWait apart", waited)
	}
	select {
	case <-done:
		t.Fatal("connection answering pings was dropped")
	default:
	}
	silent := time.Now()
	if got := waitServed(t, c, done); got != CloseAbnormal {
		t.Fatalf("silent peer closed with %d, want %d", got, CloseAbnormal)
	}
	if el := time.Since(silent); el < cfg.PongWait/2 {
		t.Fatalf("silent peer dropped after %v, want about PongWait (%v)", el, cfg.PongWait)
	}
}

// The peer's WebSocket ping gets a pong with its payload.
func TestConnAnswersPeerPing(t *testing.T) {
	_, tr, _ := fakeConn(t, Config{})
	tr.send(fPing, "hello")
	if f := tr.nextNot(t, fPing); f.kind != fPong || f.data != "hello" {
		t.Fatalf("wrote %v, want pong hello", f)
	}
}

// A reader whose queue overflows is not closed for it (its room events
// conflate), but one whose write stalls for WriteStall is closed with
// 1013, counted in write_stall_closes_total, and gets no queued frame
// after it.
func TestConnWriteStall(t *testing.T) {
	cfg := testConfig(2, 100)
	cfg.OutboundQueue = 2
	cfg.WriteStall = 300 * time.Millisecond
	c, tr, done := fakeConn(t, cfg)
	tr.stall.Store(true)
	c.Send([]byte("blocked"))
	testkit.WaitFor(t, 10*time.Second, "the writer to take the first frame", func() bool { return c.w.queued() == 0 })
	for i := range 50 {
		if !c.SendEvent("r", "u"+strconv.Itoa(i%7), []byte("x")) {
			t.Fatalf("event %d refused before the stall", i)
		}
	}
	if f := tr.nextNot(t, fPing); f.kind != fClose || f.code != CloseTryAgainLater {
		t.Fatalf("wrote %v, want close 1013", f)
	}
	tr.peer <- frame{kind: fClose, code: CloseTryAgainLater}
	if got := waitServed(t, c, done); got != CloseTryAgainLater {
		t.Fatalf("closed with %d, want %d", got, CloseTryAgainLater)
	}
	if n := testutil.ToFloat64(c.met.WriteStallCloses); n != 1 {
		t.Fatalf("write_stall_closes_total %v, want 1", n)
	}
	if n := testutil.ToFloat64(c.met.Conflating); n != 0 {
		t.Fatalf("conflating_connections %v after the close, want 0", n)
	}
}

// A flood of frames over the inbound rate gets one rate_limited error,
// then the close 1008 once more than MaxRejectedWindow were rejected.
func TestConnInboundFlood(t *testing.T) {
	cfg := testConfig(2, 2)
	cfg.MaxRejectedWindow = 5
	c, tr, done := fakeConn(t, cfg)
	for range 10 {
		tr.send(fText, `{"type":"ping"}`)
	}
	var got []string
	for {
		f := tr.nextNot(t, fPing)
		got = append(got, f.String())
		if f.kind == fClose {
			if f.code != ClosePolicy {
				t.Fatalf("closed with %v, want 1008", f)
			}
			break
		}
	}
	if n := count(got, `"rate_limited"`); n != 1 {
		t.Fatalf("%d rate_limited errors in %q, want 1", n, got)
	}
	if n := count(got, `"pong"`); n != 2 {
		t.Fatalf("%d pongs in %q, want the burst's 2", n, got)
	}
	tr.peer <- frame{kind: fClose, code: ClosePolicy}
	if code := waitServed(t, c, done); code != ClosePolicy {
		t.Fatalf("closed with %d, want %d", code, ClosePolicy)
	}
}
