package integration

import (
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
)

// Every id of docs/protocol.md's examples ("Terms and ids") works end to end
// (gateway, NATS, worker, Redis, Pub/Sub) as a room and as a user, in both
// stores; look-alike ids never share state, and glob characters never widen
// seed pattern 1's SCAN ("a*b?c[d]" unescaped would match "aXbYcd", "a*"
// would match "a").
func TestProtocolIDsEndToEnd(t *testing.T) {
	t.Parallel()
	ids := []string{"42", "room:42", "!abc:matrix.org", "a*b?c[d]", "{x}", "café ☕", "a b",
		"aXbYcd", "x", "a", "a*", "%7Bx%7D", `a\b`}
	for _, store := range []string{config.StoreZSet, config.StoreKeys} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, 1, 1, func(c *config.Config) { c.Store = store })
			obs := dial(t, s.wsURL(0, "observer", ""), "observer")
			late := dial(t, s.wsURL(0, "late", ""), "late")
			for _, id := range ids {
				obs.join(id)
			}
			for _, id := range ids {
				c := dial(t, s.wsURL(0, id, "N "+id), id)
				c.join(id)
				c.start(id)
				f := obs.next(isStart(id, id), 3*time.Second, "typing_start of "+id)
				if f.Name != "N "+id {
					t.Fatalf("room %q: typing_start %v", id, f)
				}
				// A new member of the room sees exactly its typist.
				j := late.join(id)
				if len(j.Typing) != 1 || j.Typing[0].User != id || j.Typing[0].Name != "N "+id {
					t.Fatalf("room %q: joined snapshot %v, want only %q", id, j.Typing, id)
				}
				// The typist never hears about itself.
				c.quiet(isAbout(id), 50*time.Millisecond, "its own typing")
			}
		})
	}
}
