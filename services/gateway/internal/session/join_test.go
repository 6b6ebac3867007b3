package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// fakeRooms answers Sync with err; on success it runs commit and queues a
// joined frame as the hub would.
type fakeRooms struct {
	err    error
	left   []string
	synced []hub.SyncKind
}

func (r *fakeRooms) Sync(_ context.Context, kind hub.SyncKind, room string, m hub.Member, v *filter.View, id string, commit func() bool) error {
	r.synced = append(r.synced, kind)
	if r.err != nil {
		return r.err
	}
	if commit != nil && !commit() {
		return hub.ErrAborted
	}
	f, _ := protocol.Encode(protocol.NewJoined(room, protocol.Snapshot{}, id))
	m.SendSnapshot(room, f)
	return nil
}
func (r *fakeRooms) Leave(room string, _ hub.Member) bool { r.left = append(r.left, room); return true }
func (r *fakeRooms) LeaveAll(_ hub.Member, rooms ...string) int {
	r.left = append(r.left, rooms...)
	return len(rooms)
}

func (r *fakeRooms) Watch(context.Context, string, hub.Watcher, *filter.View) error { return r.err }
func (r *fakeRooms) Arm(hub.Watcher, ...string)                                     {}
func (r *fakeRooms) Unwatch(_ hub.Watcher, rooms ...string) int                     { return len(rooms) }

type fakeBackend struct{}

func (fakeBackend) Connected() bool                 { return true }
func (fakeBackend) Publish(*protocol.Command) error { return nil }
func (fakeBackend) Snapshot(context.Context, string) (protocol.Snapshot, error) {
	return protocol.Snapshot{}, nil
}

// newTestConn is a Conn without a socket: frames it sends stay queued.
func newTestConn(t *testing.T, rooms Rooms) *Conn {
	t.Helper()
	return newTestConnWith(t, rooms, fakeBackend{})
}

// newTestConnWith is newTestConn with the presence backend be, and a
// snapshot budget of its own with the gateway's default rate and burst
// (ELLIPSIS_SNAPSHOT_RATE 10/s, ELLIPSIS_SNAPSHOT_BURST 20).
func newTestConnWith(t *testing.T, rooms Rooms, be Backend) *Conn {
	t.Helper()
	return newBudgetedConn(t, rooms, be, testBudgets(t, BudgetConfig{FreeJoins: 2, SnapshotRate: 10, SnapshotBurst: 20, Users: 10}))
}

// testBudgets is NewBudgets(cfg) or the test's end.
func testBudgets(t *testing.T, cfg BudgetConfig) *Budgets {
	t.Helper()
	b, err := NewBudgets(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newBudgetedConn is a Conn of user alice (MaxRooms 2) without a socket
// whose snapshot budget is alice's in budgets.
func newBudgetedConn(t *testing.T, rooms Rooms, be Backend, budgets *Budgets) *Conn {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return New(nil, "gw:1", auth.Identity{User: "alice", ShareTyping: true},
		testConfig(2, 100),
		Deps{Hub: rooms, Backend: be, Authorizer: authz.AllowAll{}, Metrics: met, Logger: zap.NewNop(), Budgets: budgets})
}

// testConfig is a connection's Config with maxRooms rooms and an inbound
// rate and burst of inbound frames, the gateway's defaults otherwise.
func testConfig(maxRooms, inbound int) Config {
	return Config{MaxFrameBytes: 4096, MaxRooms: maxRooms, InboundRate: float64(inbound), InboundBurst: inbound,
		OutboundQueue: 256, SnapshotTimeout: time.Second, PongWait: time.Minute, WriteWait: 10 * time.Second, WriteStall: 10 * time.Second, MaxRejectedWindow: 50}
}

// drainQueued takes every queued frame.
func (c *Conn) drainQueued() []string {
	var out []string
	for {
		f, ok := c.w.dequeue()
		if !ok {
			return out
		}
		out = append(out, string(f))
	}
}

// The session maps every hub outcome of a join to its answer, and records
// the room only through the commit.
func TestJoinAnswersEveryHubOutcome(t *testing.T) {
	for _, tc := range []struct {
		err    error
		want   string
		joined bool
	}{
		{nil, `"type":"joined"`, true},
		{fmt.Errorf("%w: link down", hub.ErrUnavailable), "room subscription unavailable (Redis)", false},
		{fmt.Errorf("%w: %w: NOPERM", hub.ErrUnavailable, hub.ErrRefused), `"code":"unavailable","message":"room subscription refused by Redis; retry"`, false},
		{fmt.Errorf("%w: %w", hub.ErrSnapshot, errors.New("x")), "typing snapshot unavailable", false},
		{hub.ErrAborted, "gateway shutting down", false},
		{hub.ErrClosed, "gateway shutting down", false},
	} {
		rooms := &fakeRooms{err: tc.err}
		c := newTestConn(t, rooms)
		c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "j"})
		got := c.drainQueued()
		if len(got) != 1 || !strings.Contains(got[0], tc.want) || !strings.Contains(got[0], `"id":"j"`) {
			t.Fatalf("hub error %v: frames %q, want one containing %q", tc.err, got, tc.want)
		}
		if c.isJoined("r") != tc.joined {
			t.Fatalf("hub error %v: joined %v", tc.err, c.isJoined("r"))
		}
	}
}

// After the disconnect command went out (shutdown), the commit refuses the
// room: the hub undoes the join and the client is told to reconnect.
func TestJoinAfterDisconnectIsRefused(t *testing.T) {
	rooms := &fakeRooms{}
	c := newTestConn(t, rooms)
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "1"})
	c.drainQueued()
	c.mu.Lock()
	c.disconnected = true
	c.mu.Unlock()
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "s", ID: "2"})
	if got := c.drainQueued(); len(got) != 1 || !strings.Contains(got[0], "shutting down") {
		t.Fatalf("frames %q", got)
	}
	if c.isJoined("s") || len(rooms.synced) != 1 {
		t.Fatalf("joined s %v after disconnect; syncs %v", c.isJoined("s"), rooms.synced)
	}
}

// sync goes through the same hub method; not joined is answered first.
func TestSyncUsesTheHubSequence(t *testing.T) {
	rooms := &fakeRooms{}
	c := newTestConn(t, rooms)
	c.sync(protocol.ClientFrame{Type: protocol.TypeSync, Room: "r", ID: "s"})
	if got := c.drainQueued(); len(got) != 1 || !strings.Contains(got[0], protocol.CodeNotJoined) {
		t.Fatalf("sync before join: %q", got)
	}
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "j"})
	c.drainQueued()
	c.sync(protocol.ClientFrame{Type: protocol.TypeSync, Room: "r", ID: "s"})
	if len(rooms.synced) != 2 || rooms.synced[1] != hub.SyncAsked {
		t.Fatalf("syncs %v", rooms.synced)
	}
}
