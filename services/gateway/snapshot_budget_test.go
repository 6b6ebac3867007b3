package gateway_test

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// GET /v1/rooms/{room}/typing over the user's budget is answered 429
// rate_limited with Retry-After and asks the workers nothing; another
// user has its own budget.
func TestHTTPSnapshotBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.HTTPSnapshotRate, c.HTTPSnapshotBurst = 0.01, 2 })
	var asked atomic.Int64
	e.onSnapshot = func(string) { asked.Add(1) }
	e.startWorker("")
	for i := range 2 {
		if st, body := httpGet(t, e.httpURL("/v1/rooms/42/typing?user=alice"), nil); st != 200 {
			t.Fatalf("snapshot %d within the burst: %d %v", i, st, body)
		}
	}
	resp, err := http.Get(e.httpURL("/v1/rooms/42/typing?user=alice"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("past the burst: %d, want 429", resp.StatusCode)
	}
	// At 0.01/s the next token is about 100 s away.
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 90 || ra > 100 {
		t.Fatalf("Retry-After %q, want about 100 (s)", resp.Header.Get("Retry-After"))
	}
	st, body := httpGet(t, e.httpURL("/v1/rooms/42/typing?user=alice"), nil)
	if code, msg := errorOf(body); st != 429 || code != protocol.CodeRateLimited || msg == "" {
		t.Fatalf("past the burst: %d %v, want 429 rate_limited with a message", st, body)
	}
	if n := asked.Load(); n != 2 {
		t.Fatalf("workers asked %d snapshots, want 2 (the refused ones ask nothing)", n)
	}
	if st, body := httpGet(t, e.httpURL("/v1/rooms/42/typing?user=bob"), nil); st != 200 {
		t.Fatalf("another user: %d %v", st, body)
	}
}

// A sync over the connection's snapshot budget is answered rate_limited
// with its room and id, the connection stays, and later frames are served.
func TestSyncSnapshotBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.SnapshotRate, c.SnapshotBurst = 0.01, 2 })
	var asked atomic.Int64
	e.onSnapshot = func(string) { asked.Add(1) }
	e.startWorker("")
	c := e.dial("alice", "")
	c.join("42") // a first join: free
	for i := range 2 {
		c.send(`{"type":"sync","room":"42","id":"s` + strconv.Itoa(i) + `"}`)
		if f := c.expect(protocol.TypeTyping); f.str("id") != "s"+strconv.Itoa(i) {
			t.Fatalf("sync %d: %v", i, f)
		}
	}
	c.send(`{"type":"sync","room":"42","id":"s2"}`)
	if f := c.expectError(protocol.CodeRateLimited); f.str("id") != "s2" || f.str("room") != "42" {
		t.Fatalf("over budget: %v, want rate_limited with room 42 and id s2", f)
	}
	c.send(`{"type":"join","room":"42","id":"j2"}`) // a re-join pays too
	if f := c.expectError(protocol.CodeRateLimited); f.str("id") != "j2" {
		t.Fatalf("re-join over budget: %v", f)
	}
	c.send(`{"type":"ping","id":"p"}`)
	c.expect(protocol.TypePong)
	if n := asked.Load(); n != 3 {
		t.Fatalf("workers asked %d snapshots, want 3 (join, two syncs)", n)
	}
}
