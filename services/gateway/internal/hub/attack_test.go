package hub

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/pubsub"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Adversarial tests of the hub: races of
// joins, leaves, syncs, fan-out and link restores on the same rooms, and
// snapshot failures at the worst moments.

// scriptedSnapshots answers snapshot number i (1-based, over all rooms)
// with script(i); nil means an empty snapshot.
type scriptedSnapshots struct {
	n      atomic.Int64
	script func(ctx context.Context, i int64) error
}

func (s *scriptedSnapshots) Snapshot(ctx context.Context, room string) (protocol.Snapshot, error) {
	i := s.n.Add(1)
	if s.script != nil {
		if err := s.script(ctx, i); err != nil {
			return protocol.Snapshot{}, err
		}
	}
	return protocol.Snapshot{Users: []protocol.Typist{{User: "zed"}}, Total: 1}, nil
}

func newScriptedHub(t *testing.T, pending int, s *scriptedSnapshots) (*Hub, *pubsub.Memory, names.Names) {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b, n := pubsub.NewMemory(), names.New("hubx:", "")
	h := New(Options{Broker: b, Names: n, Metrics: met, PendingLimit: pending, ReadyTimeout: time.Second, Backend: s})
	h.Start()
	t.Cleanup(h.Close)
	return h, b, n
}

// Events dropped while a join was held are made up for by one more
// snapshot after joined. When that snapshot fails, the member must not be
// left with the dropped events missing for good: the room is resynced
// with backoff like any room whose snapshot failed.
func TestPushAfterOverflowRetriedWhenItsSnapshotFails(t *testing.T) {
	gate := make(chan struct{})
	s := &scriptedSnapshots{script: func(ctx context.Context, i int64) error {
		switch i {
		case 1: // the join's snapshot: held until the test overflowed the buffer
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		case 2: // the snapshot pushed after joined: fails
			return errors.New("snapshot failed (test)")
		}
		return nil
	}}
	h, b, n := newScriptedHub(t, 1, s)
	m := &member{user: "m"}
	done := make(chan error, 1)
	go func() { done <- h.Sync(context.Background(), SyncJoin, "r", m, nil, "j", nil) }()
	testkit.WaitFor(t, 5*time.Second, "join waiting for its snapshot", func() bool { return s.n.Load() == 1 })
	for i := 0; i < 3; i++ { // PendingLimit 1: the buffer overflows
		if !b.Publish(n.RoomChannel("r"), event("r", "x", i)) {
			t.Fatal("not published")
		}
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "a typing snapshot after joined, making up for the dropped events", func() bool {
		fr := m.frames()
		for _, f := range fr[1:] {
			if strings.Contains(f, `"type":"typing"`) {
				return true
			}
		}
		return false
	})
	if fr := m.frames(); !strings.Contains(fr[0], `"type":"joined"`) {
		t.Fatalf("first frame %q, want joined", fr[0])
	}
}

// orderedMember records its frames and the moments it left a room, to
// check that nothing reaches it outside a membership and that joined is
// always the first frame of a membership.
type orderedMember struct {
	user string
	mu   sync.Mutex
	log  []string // frames, and "LEFT" markers
}

func (m *orderedMember) User() string { return m.user }
func (m *orderedMember) Send(f []byte) bool {
	m.mu.Lock()
	m.log = append(m.log, string(f))
	m.mu.Unlock()
	return true
}
func (m *orderedMember) mark(s string) {
	m.mu.Lock()
	m.log = append(m.log, s)
	m.mu.Unlock()
}

// Thousands of joins, syncs and leaves of the same rooms, racing with
// fan-out and link restores (resyncs), each member serial as a session's
// reader is: every membership's first frame is joined, no frame reaches a
// member between its leave and its next joined, and at the end a room's
// channel is subscribed exactly when the room has members.
func TestJoinLeaveResyncRaceKeepsOrderAndSubscriptions(t *testing.T) {
	var fail atomic.Bool
	s := &scriptedSnapshots{script: func(ctx context.Context, i int64) error {
		if fail.Load() && i%3 == 0 {
			return errors.New("snapshot failed (test)")
		}
		return nil
	}}
	h, b, n := newScriptedHub(t, 4, s)
	rooms := []string{"a", "b", "c"}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { // publisher
		defer bg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := rooms[i%len(rooms)]
			b.Publish(n.RoomChannel(r), event(r, "pub", i))
		}
	}()
	go func() { // link restores and failing snapshots
		defer bg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			fail.Store(i%2 == 0)
			h.HandleRestored([]string{n.RoomChannel(rooms[i%len(rooms)])})
		}
	}()
	members := make([]*orderedMember, 24)
	var wg sync.WaitGroup
	for i := range members {
		m := &orderedMember{user: "u" + strconv.Itoa(i%6)}
		members[i] = m
		wg.Add(1)
		go func() {
			defer wg.Done()
			churnMembership(h, m, rooms, i)
		}()
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	for _, r := range rooms {
		if k := h.Members(r); k != 0 {
			t.Fatalf("room %s has %d members after every member left", r, k)
		}
	}
	if chs := b.Subscribed(); len(chs) != 0 {
		t.Fatalf("channels subscribed with no member: %v", chs)
	}
	for i, m := range members {
		m.checkMemberships(t, i)
	}
}

// churnMembership runs member i's 150 random joins, syncs and leaves of
// rooms on h, serially as a session's reader does, marking each leave and
// failed first join in m's log, then leaves every room it is still in.
func churnMembership(h *Hub, m *orderedMember, rooms []string, i int) {
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	joined := map[string]bool{}
	for j := 0; j < 150; j++ {
		r := rooms[rng.IntN(len(rooms))]
		switch op := rng.IntN(3); {
		case op == 0 || !joined[r]:
			if err := h.Sync(context.Background(), SyncJoin, r, m, nil, r, nil); err == nil {
				joined[r] = true
			} else if !joined[r] {
				m.mark("FAILED " + r)
			}
		case op == 1:
			_ = h.Sync(context.Background(), SyncAsked, r, m, nil, r, nil)
		default:
			h.Leave(r, m)
			m.mark("LEFT " + r)
			joined[r] = false
		}
	}
	for r, ok := range joined {
		if ok {
			h.Leave(r, m)
			m.mark("LEFT " + r)
		}
	}
}

// checkMemberships checks member i's log: no frame but joined reaches it
// outside a membership (before joined or after leave).
func (m *orderedMember) checkMemberships(t *testing.T, i int) {
	t.Helper()
	m.mu.Lock()
	in := map[string]bool{} // room -> between joined and LEFT
	for k, e := range m.log {
		switch {
		case strings.HasPrefix(e, "LEFT "):
			in[strings.TrimPrefix(e, "LEFT ")] = false
		case strings.HasPrefix(e, "FAILED "):
		default:
			r := roomOf(t, e)
			if strings.Contains(e, `"type":"joined"`) {
				in[r] = true
			} else if !in[r] {
				t.Errorf("member %d, entry %d: %s reached it outside a membership (before joined or after leave)", i, k, e)
			}
		}
	}
	m.mu.Unlock()
}

func roomOf(t *testing.T, frame string) string {
	t.Helper()
	_, rest, ok := strings.Cut(frame, `"room":"`)
	if !ok {
		t.Fatalf("frame without room: %s", frame)
	}
	r, _, _ := strings.Cut(rest, `"`)
	return r
}

func (m *orderedMember) SendEvent(_, _ string, f []byte) bool    { return m.Send(f) }
func (m *orderedMember) SendSnapshot(_ string, f []byte) bool    { return m.Send(f) }
func (m *orderedMember) SendRoomSummary(_ string, f []byte) bool { return m.Send(f) }
