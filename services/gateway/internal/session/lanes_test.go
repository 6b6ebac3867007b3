package session

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
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
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// gateRooms is a hub whose snapshots wait until the gate opens or the
// caller's context ends (a frozen Redis). It keeps the membership the hub
// would: a join adds the member before the snapshot and removes it when
// the sync fails or the commit refuses.
type gateRooms struct {
	gate chan struct{} // closed: snapshots answer

	mu       sync.Mutex
	members  map[string]bool
	inFlight int
	maxIn    int
}

func newGateRooms() *gateRooms {
	return &gateRooms{gate: make(chan struct{}), members: map[string]bool{}}
}

func (r *gateRooms) Sync(ctx context.Context, kind hub.SyncKind, room string, m hub.Member, v *filter.View, id string, commit func() bool) error {
	r.mu.Lock()
	gate := r.gate
	existed := r.members[room]
	if kind == hub.SyncJoin {
		r.members[room] = true
	} else if !existed {
		r.mu.Unlock()
		return hub.ErrNotMember
	}
	r.inFlight++
	r.maxIn = max(r.maxIn, r.inFlight)
	r.mu.Unlock()
	undo := func() {
		r.mu.Lock()
		if !existed {
			delete(r.members, room)
		}
		r.mu.Unlock()
	}
	defer func() { r.mu.Lock(); r.inFlight--; r.mu.Unlock() }()
	select {
	case <-gate:
	case <-ctx.Done():
		undo()
		return fmt.Errorf("%w: %w", hub.ErrSnapshot, ctx.Err())
	}
	if commit != nil && !commit() {
		undo()
		return hub.ErrAborted
	}
	var f []byte
	if kind == hub.SyncJoin {
		f, _ = protocol.Encode(protocol.NewJoined(room, protocol.Snapshot{}, id))
	} else {
		f, _ = protocol.Encode(protocol.NewTypingSnapshot(room, protocol.Snapshot{}, id))
	}
	m.SendSnapshot(room, f)
	return nil
}

func (r *gateRooms) Leave(room string, m hub.Member) bool { return r.LeaveAll(m, room) == 1 }

func (r *gateRooms) LeaveAll(_ hub.Member, rooms ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, room := range rooms {
		if r.members[room] {
			delete(r.members, room)
			n++
		}
	}
	return n
}

func (r *gateRooms) Watch(context.Context, string, hub.Watcher, *filter.View) error { return nil }
func (r *gateRooms) Arm(hub.Watcher, ...string)                                     {}
func (r *gateRooms) Unwatch(_ hub.Watcher, rooms ...string) int                     { return len(rooms) }

func (r *gateRooms) stats() (inFlight, maxIn int, members []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for m := range r.members {
		members = append(members, m)
	}
	slices.Sort(members)
	return r.inFlight, r.maxIn, members
}

// recBackend records the commands published, as "op room".
type recBackend struct {
	mu  sync.Mutex
	ops []string
}

func (b *recBackend) Connected() bool { return true }
func (b *recBackend) Publish(cmd *protocol.Command) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ops = append(b.ops, cmd.Op+" "+cmd.Room)
	return nil
}
func (b *recBackend) Snapshot(context.Context, string) (protocol.Snapshot, error) {
	return protocol.Snapshot{}, nil
}
func (b *recBackend) published() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.ops)
}

func newLaneConn(t *testing.T, rooms Rooms, be Backend, maxRooms int) *Conn {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return New(nil, "gw:1", auth.Identity{User: "alice", ShareTyping: true},
		testConfig(maxRooms, 1000),
		Deps{Hub: rooms, Backend: be, Authorizer: authz.AllowAll{}, Metrics: met, Logger: zap.NewNop(),
			Budgets: testBudgets(t, BudgetConfig{FreeJoins: maxRooms, SnapshotRate: 1000, SnapshotBurst: 1000, Users: 10})})
}

// in hands a client frame to the connection as its reader would.
func (c *Conn) in(t *testing.T, typ, room, id string) {
	t.Helper()
	b, err := json.Marshal(map[string]string{"type": typ, "room": room, "id": id})
	if err != nil {
		t.Fatal(err)
	}
	c.handle(true, b)
}

// closeNoSocket does what a close request does, without a socket.
func (c *Conn) closeNoSocket() {
	c.closeOnce.Do(func() { close(c.w.quit) })
}

// collect gathers the frames the connection queued until done reports true
// for all gathered so far (or fails after a generous deadline).
func collect(t *testing.T, c *Conn, got *[]string, what string, done func([]string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		*got = append(*got, c.drainQueued()...)
		if done(*got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: frames so far %q", what, *got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func count(frames []string, sub string) int {
	n := 0
	for _, f := range frames {
		if strings.Contains(f, sub) {
			n++
		}
	}
	return n
}

// Five joins whose snapshots hang and a ping, sent at once: the pong is
// queued before any join is answered, and the five snapshots are awaited
// at the same time (not one after the other).
func TestPingAndJoinsDoNotWaitBehindAJoin(t *testing.T) {
	rooms := newGateRooms()
	c := newLaneConn(t, rooms, &recBackend{}, 10)
	for i := range 5 {
		c.in(t, protocol.TypeJoin, fmt.Sprintf("r%d", i), fmt.Sprintf("j%d", i))
	}
	c.in(t, protocol.TypePing, "", "p") // handle returned: the reader is free
	got := c.drainQueued()
	if len(got) != 1 || !strings.Contains(got[0], `"type":"pong"`) {
		t.Fatalf("frames queued right after the ping: %q, want just the pong", got)
	}
	testkit.WaitFor(t, 10*time.Second, "5 snapshots awaited at once", func() bool { n, _, _ := rooms.stats(); return n == 5 })
	close(rooms.gate)
	collect(t, c, &got, "5 joined", func(f []string) bool { return count(f, `"type":"joined"`) == 5 })
	for i := range 5 {
		if !c.isJoined(fmt.Sprintf("r%d", i)) {
			t.Fatalf("r%d not joined", i)
		}
	}
}

// join r, typing_start r, leave r, with the join's snapshot hanging: the
// typing frame and the leave wait in r's lane and then behave as if served
// one at a time (the start is published as joined, the leave leaves),
// while frames of other rooms are served at once.
func TestLaneKeepsRoomOrder(t *testing.T) {
	rooms := newGateRooms()
	be := &recBackend{}
	c := newLaneConn(t, rooms, be, 10)
	c.in(t, protocol.TypeJoin, "r", "j")
	c.in(t, protocol.TypeTypingStart, "r", "t")
	c.in(t, protocol.TypeLeave, "r", "l")
	c.in(t, protocol.TypeTypingStart, "other", "o") // not joined: answered at once
	got := c.drainQueued()
	if len(got) != 1 || !strings.Contains(got[0], protocol.CodeNotJoined) || !strings.Contains(got[0], `"room":"other"`) {
		t.Fatalf("frames before the join's snapshot: %q, want only not_joined for other", got)
	}
	if p := be.published(); len(p) != 0 {
		t.Fatalf("published %q while r's join was in flight", p)
	}
	close(rooms.gate)
	got = nil
	collect(t, c, &got, "joined then left", func(f []string) bool { return count(f, `"type":"left"`) == 1 })
	if len(got) != 2 || !strings.Contains(got[0], `"type":"joined"`) || !strings.Contains(got[1], `"type":"left"`) {
		t.Fatalf("frames %q, want joined then left", got)
	}
	if p := be.published(); !slices.Equal(p, []string{protocol.OpStart + " r", protocol.OpLeave + " r"}) {
		t.Fatalf("published %q, want start r then leave r", p)
	}
	testkit.WaitFor(t, 10*time.Second, "lane of r ended", func() bool { c.lanes.mu.Lock(); defer c.lanes.mu.Unlock(); return len(c.lanes.rooms) == 0 })
	if _, _, m := rooms.stats(); c.isJoined("r") || len(m) != 0 {
		t.Fatalf("after leave: joined %v, hub members %q", c.isJoined("r"), m)
	}
}

// Closing while joins are in flight cancels them, ends every lane (no
// goroutine left), leaves no membership behind in the hub and lists in the
// disconnect command only the room joined before.
func TestCloseWithJoinsInFlight(t *testing.T) {
	rooms := newGateRooms()
	be := &recBackend{}
	c := newLaneConn(t, rooms, be, 10)
	before := runtime.NumGoroutine()
	// "a" joins first (its snapshot answers), then five hang.
	close(rooms.gate)
	c.in(t, protocol.TypeJoin, "a", "ja")
	testkit.WaitFor(t, 10*time.Second, "a joined", func() bool { return c.isJoined("a") })
	rooms.mu.Lock()
	rooms.gate = make(chan struct{})
	rooms.mu.Unlock()
	for i := range 5 {
		c.in(t, protocol.TypeJoin, fmt.Sprintf("r%d", i), "")
		c.in(t, protocol.TypeTypingStart, fmt.Sprintf("r%d", i), "") // queued behind
	}
	testkit.WaitFor(t, 10*time.Second, "5 joins in flight", func() bool { n, _, _ := rooms.stats(); return n == 5 })
	c.closeNoSocket()
	left := c.leaveAll()
	if !slices.Equal(left, []string{"a"}) {
		t.Fatalf("left %q, want [a]", left)
	}
	if _, _, m := rooms.stats(); len(m) != 0 {
		t.Fatalf("hub members after close: %q", m)
	}
	if p := be.published(); !slices.Equal(p, []string{protocol.OpDisconnect + " "}) {
		t.Fatalf("published %q, want only the disconnect", p)
	}
	testkit.WaitFor(t, 10*time.Second, "lane goroutines gone", func() bool { return runtime.NumGoroutine() <= before })
}

// Joins in flight count against MaxRooms: with two hanging, a third room
// is refused at once.
func TestRoomLimitCountsJoinsInFlight(t *testing.T) {
	rooms := newGateRooms()
	c := newLaneConn(t, rooms, &recBackend{}, 2)
	c.in(t, protocol.TypeJoin, "a", "ja")
	c.in(t, protocol.TypeJoin, "b", "jb")
	testkit.WaitFor(t, 10*time.Second, "2 joins in flight", func() bool { n, _, _ := rooms.stats(); return n == 2 })
	c.in(t, protocol.TypeJoin, "c", "jc")
	var got []string
	collect(t, c, &got, "room_limit for c", func(f []string) bool { return count(f, protocol.CodeRoomLimit) == 1 })
	if len(got) != 1 || !strings.Contains(got[0], `"id":"jc"`) {
		t.Fatalf("frames %q, want only room_limit for jc", got)
	}
	close(rooms.gate)
	collect(t, c, &got, "a and b joined", func(f []string) bool { return count(f, `"type":"joined"`) == 2 })
	// Once a and b are in, the limit still holds (reservation handed over).
	c.in(t, protocol.TypeJoin, "c", "jc2")
	collect(t, c, &got, "room_limit for c again", func(f []string) bool { return count(f, protocol.CodeRoomLimit) == 2 })
	testkit.WaitFor(t, 10*time.Second, "lanes ended", func() bool { c.lanes.mu.Lock(); defer c.lanes.mu.Unlock(); return len(c.lanes.rooms) == 0 })
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.joining != 0 {
		t.Fatalf("joining = %d after every join ended", c.joining)
	}
}

// At most MaxLanes rooms are in flight: one more join makes the reader
// wait until a lane ends, or until the connection closes.
func TestLanesBoundTheRoomsInFlight(t *testing.T) {
	rooms := newGateRooms()
	c := newLaneConn(t, rooms, &recBackend{}, 100)
	for i := range MaxLanes {
		c.in(t, protocol.TypeJoin, fmt.Sprintf("r%d", i), "")
	}
	testkit.WaitFor(t, 10*time.Second, "MaxLanes joins in flight", func() bool { n, _, _ := rooms.stats(); return n == MaxLanes })
	done := make(chan struct{})
	go func() { defer close(done); c.in(t, protocol.TypeJoin, "extra", "x") }()
	select {
	case <-done:
		t.Fatal("a join beyond MaxLanes rooms in flight did not wait")
	case <-time.After(100 * time.Millisecond):
	}
	close(rooms.gate)
	<-done
	var got []string
	collect(t, c, &got, "all joined", func(f []string) bool { return count(f, `"type":"joined"`) == MaxLanes+1 })
	if _, maxIn, _ := rooms.stats(); maxIn > MaxLanes {
		t.Fatalf("%d snapshots in flight at once, want at most %d", maxIn, MaxLanes)
	}

	// A reader waiting for a lane is let go by a close.
	rooms2 := newGateRooms()
	c2 := newLaneConn(t, rooms2, &recBackend{}, 100)
	for i := range MaxLanes {
		c2.in(t, protocol.TypeJoin, fmt.Sprintf("r%d", i), "")
	}
	done2 := make(chan struct{})
	go func() { defer close(done2); c2.in(t, protocol.TypeJoin, "extra", "x") }()
	c2.closeNoSocket()
	<-done2
	c2.leaveAll()
}

// A lane holds at most LaneQueue frames behind its frame in flight; one
// more is answered unavailable with its room and id.
func TestLaneQueueIsBounded(t *testing.T) {
	rooms := newGateRooms()
	c := newLaneConn(t, rooms, &recBackend{}, 10)
	c.in(t, protocol.TypeJoin, "r", "j")
	for i := range LaneQueue + 1 {
		c.in(t, protocol.TypeTypingStart, "r", fmt.Sprintf("t%d", i))
	}
	got := c.drainQueued()
	want := fmt.Sprintf(`"id":"t%d"`, LaneQueue)
	if len(got) != 1 || !strings.Contains(got[0], protocol.CodeUnavailable) || !strings.Contains(got[0], want) || !strings.Contains(got[0], `"room":"r"`) {
		t.Fatalf("frames %q, want unavailable for the frame over the lane's queue", got)
	}
	close(rooms.gate)
	collect(t, c, &got, "joined", func(f []string) bool { return count(f, `"type":"joined"`) == 1 })
	testkit.WaitFor(t, 10*time.Second, "lane ended", func() bool { c.lanes.mu.Lock(); defer c.lanes.mu.Unlock(); return len(c.lanes.rooms) == 0 })
}
