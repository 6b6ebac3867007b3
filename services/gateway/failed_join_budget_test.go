package gateway_test

import (
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// A join that failed joined nothing, so it gives back the user's free
// join it held (docs/protocol.md, "Snapshots: budget and sharing": the
// user's ELLIPSIS_MAX_ROOMS_PER_CONN free joins let "a client joins all
// its rooms at once"). A client whose joins were
// answered unavailable while the workers were away (here: nobody answers
// the snapshot request) and that retries them, as docs/protocol.md tells
// it to, must get its rooms at once when the workers are back, within
// its room limit, without paying the snapshot budget.
func TestFailedJoinsKeepFreeJoins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.MaxRoomsPerConn = 2
		c.SnapshotRate, c.SnapshotBurst = 0.01, 1
		c.SnapshotTimeout = 200 * time.Millisecond
		c.AuthzTimeout = 100 * time.Millisecond
	})
	c := e.dial("alice", "")
	for _, room := range []string{"a", "b"} {
		c.send(map[string]string{"type": "join", "room": room, "id": "j-" + room})
		if f := c.expectError(protocol.CodeUnavailable); f.str("id") != "j-"+room {
			t.Fatalf("join %s with no worker: %v, want unavailable", room, f)
		}
	}
	e.startWorker("")
	c.join("a")
	c.send(map[string]string{"type": "join", "room": "b", "id": "j-b"})
	if f := c.read(); f.str("type") != protocol.TypeJoined {
		t.Fatalf("the client's second room, retried once the workers answer: %v, want joined (its 2 free joins were spent by joins that joined nothing)", f)
	}
}
