package gateway_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// The lame duck, in process: Shutdown starts a lame duck. At once
// /readyz answers 503 and a new upgrade gets a 503 JSON error, while the
// open connection is served normally (pong, typing commands) for
// ELLIPSIS_LAME_DUCK; then it publishes its disconnect and is closed with
// 1001. test/integration's TestGatewaySIGTERMDrains does the same through
// SIGTERM to a gateway process, with a receiver on another gateway.
func TestLameDuck(t *testing.T) {
	t.Parallel()
	const lameDuck = 1500 * time.Millisecond
	e := newEnv(t, func(c *config.Config) { c.LameDuck = lameDuck; c.ShutdownDrain = 200 * time.Millisecond })
	e.startWorker("")
	a := e.dial("alice", "")
	a.join("42")

	done := make(chan error, 1)
	began := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(ctx)
	}()

	testkit.WaitFor(t, 5*time.Second, "/readyz to fail", func() bool {
		st, body := httpGet(t, "http://"+e.srv.AdminAddr()+"/readyz", nil)
		down, _ := body["down"].([]any)
		return st == http.StatusServiceUnavailable && len(down) == 1 && down[0] == "shutdown"
	})
	st, code, msg, resp := handshakeResp(t, e.wsURL(url.Values{"user": {"carol"}}), nil)
	if st != http.StatusServiceUnavailable || code != protocol.CodeUnavailable || !strings.Contains(msg, "shutting down") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("upgrade in the lame duck: %d %s %q (Retry-After %q), want 503 unavailable", st, code, msg, resp.Header.Get("Retry-After"))
	}
	if n := e.metric(`ellipsis_gateway_handshakes_rejected_total{reason="shutdown"}`); n != 1 {
		t.Fatalf("handshakes_rejected_total{shutdown} = %v", n)
	}

	// The open connection is still served: a pong, and a typing command
	// published as usual (not a disconnect yet).
	a.send(`{"type":"ping","id":"still"}`)
	if f := a.expect(protocol.TypePong); f.str("id") != "still" {
		t.Fatalf("pong %v", f)
	}
	a.send(`{"type":"typing_start","room":"42"}`)
	if cmd := e.nextCommand(); cmd.Op != protocol.OpStart || cmd.User != "alice" {
		t.Fatalf("command in the lame duck: %+v, want alice's start", cmd)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) during the lame duck", err)
	default:
	}

	// Then: its disconnect, and 1001, not before the lame duck ended.
	if cmd := e.nextCommand(); cmd.Op != protocol.OpDisconnect || cmd.User != "alice" {
		t.Fatalf("command %+v, want alice's disconnect", cmd)
	}
	a.expectClose(websocket.CloseGoingAway)
	if d := time.Since(began); d < lameDuck {
		t.Fatalf("closed %v after Shutdown began, before the %v lame duck ended", d, lameDuck)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}
