package worker

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The worker on each store kind (the store's own contract suite is in
// internal/store).

// ELLIPSIS_STORE selects the store; anything else is refused.
func TestContractStoreSelection(t *testing.T) {
	for _, kind := range storetest.Kinds {
		cfg := config.Dev()
		cfg.Store = kind
		if _, err := New(Options{Config: cfg}); err != nil {
			t.Fatalf("New with store %q: %v", kind, err)
		}
	}
	cfg := config.Dev()
	cfg.Store = "hash"
	if _, err := New(Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "ELLIPSIS_STORE") {
		t.Fatalf("New with store hash: %v, want an error naming ELLIPSIS_STORE", err)
	}
}

// The whole worker on each store, selected by Config.Store, through NATS:
// commands in, events and snapshots out, expiry pushed once by two workers.
func TestContractEndToEnd(t *testing.T) {
	t.Parallel()
	for _, kind := range storetest.Kinds {
		for _, be := range storetest.Backends {
			t.Run(kind+"/"+be.Name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, be, func(c *config.Config) { c.Store = kind })
				e.startWorker()
				e.startWorker()
				s := e.subscribe("42", "café ☕")
				e.send(start("42", "alice", "Alice", "phone", 1), start("42", "bob", "", "b1", 1), start("café ☕", "a*b?c[d]", "", "x", 1))
				got := map[string]bool{}
				for range 3 {
					r, ok := s.Next(waitLong)
					if !ok || r.Ev.Type != protocol.TypeTypingStart {
						t.Fatalf("want starts, got %s", r.Raw)
					}
					got[r.Ev.Room+"/"+r.Ev.User] = true
				}
				// next skips the refreshes of alice (throttled or not: timing).
				next := func(d time.Duration) (storetest.Received, bool) {
					for {
						r, ok := s.Next(d)
						if !ok || r.Ev.Type != protocol.TypeTypingStart || r.Ev.User != "alice" {
							return r, ok
						}
					}
				}
				sent := time.Now()
				e.send(start("42", "alice", "Alice", "laptop", 1))
				e.send(stop("42", "alice", "phone", 2), stop("42", "bob", "", 0))
				if r, ok := next(waitLong); !ok || r.Ev.Type != protocol.TypeTypingStop || r.Ev.User != "bob" || r.Ev.Reason != protocol.ReasonStopped {
					t.Fatalf("want bob's stop, got %s", r.Raw)
				}
				if got := typists(e.snapshot("42")); !slices.Equal(got, []string{"alice/Alice"}) {
					t.Fatalf("snapshot %v, want alice (laptop)", got)
				}
				// alice's laptop and the café typist expire: one stop each.
				stops := map[string]int{}
				for len(stops) < 2 {
					r, ok := next(time.Until(sent.Add(expiryBound)))
					if !ok {
						t.Fatalf("expired stops %v within ttl+1s", stops)
					}
					if r.Ev.Type != protocol.TypeTypingStop || r.Ev.Reason != protocol.ReasonExpired {
						t.Fatalf("event %s", r.Raw)
					}
					stops[r.Ev.Room+"/"+r.Ev.User]++
				}
				if stops["42/alice"] != 1 || stops["café ☕/a*b?c[d]"] != 1 {
					t.Fatalf("stops %v", stops)
				}
				s.ExpectNone(3 * testSweep)
				if got := typists(e.snapshot("42")); len(got) != 0 {
					t.Fatalf("snapshot after expiry %v", got)
				}
				if n := e.metric("ellipsis_worker_expired_stops_total", nil); n != 2 {
					t.Fatalf("expired_stops_total %v", n)
				}
			})
		}
	}
}
