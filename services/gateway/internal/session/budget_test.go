package session

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// slowBudgets is a registry whose users have 2 free joins and a snapshot
// bucket of burst tokens, refilled too slowly to matter within a test (the
// free joins refill 2 a minute: a test takes less than 30 s).
func slowBudgets(t *testing.T, burst int) *Budgets {
	t.Helper()
	return testBudgets(t, BudgetConfig{FreeJoins: 2, SnapshotRate: 1e-6, SnapshotBurst: burst, Users: 10})
}

// budgetConn is a test Conn (MaxRooms 2) of its own slowBudgets.
func budgetConn(t *testing.T, rooms Rooms, burst int) *Conn {
	t.Helper()
	return newBudgetedConn(t, rooms, fakeBackend{}, slowBudgets(t, burst))
}

// wantRateLimited checks that c answered exactly one rate_limited error
// carrying the frame's room and id.
func wantRateLimited(t *testing.T, c *Conn, room, id string) {
	t.Helper()
	got := c.drainQueued()
	if len(got) != 1 {
		t.Fatalf("frames %q, want one rate_limited error", got)
	}
	var f protocol.ErrorFrame
	if err := json.Unmarshal([]byte(got[0]), &f); err != nil {
		t.Fatalf("decode %q: %v", got[0], err)
	}
	if f.Type != protocol.TypeError || f.Code != protocol.CodeRateLimited || f.Room != room || f.ID != id {
		t.Fatalf("frame %q, want error rate_limited for room %q id %q", got[0], room, id)
	}
	if !strings.Contains(f.Message, "retry in") {
		t.Fatalf("message %q gives no retry delay", f.Message)
	}
}

// Syncs over the bucket are answered rate_limited (id echoed) and never
// reach the hub; the connection stays.
func TestSyncOverBudgetIsRateLimited(t *testing.T) {
	rooms := &fakeRooms{}
	c := budgetConn(t, rooms, 2)
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "j"}) // a first join: free
	c.drainQueued()
	for i := range 2 {
		c.sync(protocol.ClientFrame{Type: protocol.TypeSync, Room: "r", ID: "s"})
		if got := c.drainQueued(); len(got) != 1 || !strings.Contains(got[0], `"type":"joined"`) {
			t.Fatalf("sync %d within the burst: %q", i, got)
		}
	}
	c.sync(protocol.ClientFrame{Type: protocol.TypeSync, Room: "r", ID: "s3"})
	wantRateLimited(t, c, "r", "s3")
	if len(rooms.synced) != 3 {
		t.Fatalf("hub asked %d times, want 3 (join, two syncs)", len(rooms.synced))
	}
	if c.closing() {
		t.Fatal("a rate-limited sync closed the connection")
	}
	if n := testutil.ToFloat64(c.met.SnapshotsCounter("rate_limited")); n != 1 {
		t.Fatalf("snapshots_total{result=rate_limited} = %v, want 1", n)
	}
}

// A join of a room already joined pays like a sync.
func TestRejoinOverBudgetIsRateLimited(t *testing.T) {
	rooms := &fakeRooms{}
	c := budgetConn(t, rooms, 1)
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "j1"})
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "j2"}) // the token
	c.drainQueued()
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "j3"})
	wantRateLimited(t, c, "r", "j3")
	if len(rooms.synced) != 2 || !c.isJoined("r") {
		t.Fatalf("hub asked %d times (want 2); joined %v (want true)", len(rooms.synced), c.isJoined("r"))
	}
}

// The first MaxRooms joins of new rooms are free whatever the bucket
// holds; a leave → join loop pays from the join after them, so it cannot
// ask snapshots past the budget.
func TestJoinLeaveLoopPaysAfterTheFirstJoins(t *testing.T) {
	rooms := &fakeRooms{}
	c := budgetConn(t, rooms, 1) // MaxRooms 2
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "a", ID: "1"})
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "b", ID: "2"})
	if !c.isJoined("a") || !c.isJoined("b") {
		t.Fatal("the first MaxRooms joins were not served")
	}
	c.leave(protocol.ClientFrame{Type: protocol.TypeLeave, Room: "a", ID: "3"})
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "a", ID: "4"}) // pays the one token
	c.leave(protocol.ClientFrame{Type: protocol.TypeLeave, Room: "a", ID: "5"})
	c.drainQueued()
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "a", ID: "6"})
	wantRateLimited(t, c, "a", "6")
	if c.isJoined("a") || len(rooms.synced) != 3 {
		t.Fatalf("joined a %v (want false), hub asked %d times (want 3)", c.isJoined("a"), len(rooms.synced))
	}
	// The refused join gave its place among MaxRooms back.
	c.mu.Lock()
	joining := c.joining
	c.mu.Unlock()
	if joining != 0 {
		t.Fatalf("joining = %d after a refused join, want 0", joining)
	}
}
