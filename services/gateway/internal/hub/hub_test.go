package hub

import (
	"context"
	"errors"
	"fmt"
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

// Unit tests of the hub's logic on the in-memory broker (run with -race);
// the Redis broker has its own tests against a real Redis in
// internal/pubsub.

type member struct {
	user string
	mu   sync.Mutex
	got  []string
	full bool
}

func (m *member) User() string { return m.user }
func (m *member) Send(f []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full {
		return false
	}
	m.got = append(m.got, string(f))
	return true
}
func (m *member) frames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.got...)
}

// snapshots is a fake Backend: rooms listed in fail fail, rooms in
// typing answer their typists as they were when the call began (the
// worker's read), others answer zed; calls are counted per room.
type snapshots struct {
	mu     sync.Mutex
	fail   map[string]bool
	typing map[string][]protocol.Typist
	calls  map[string]int
	block  chan struct{} // when set, every call waits for it (or ctx)
}

func (s *snapshots) Snapshot(ctx context.Context, room string) (protocol.Snapshot, error) {
	s.mu.Lock()
	s.calls[room]++
	fail, block := s.fail[room], s.block
	users, listed := s.typing[room]
	s.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return protocol.Snapshot{}, ctx.Err()
		}
	}
	if fail {
		return protocol.Snapshot{}, errors.New("snapshot failed (test)")
	}
	if listed {
		return protocol.Snapshot{Users: users, Total: len(users)}, nil
	}
	return protocol.Snapshot{Users: []protocol.Typist{{User: "zed"}}, Total: 1}, nil
}

func (s *snapshots) count(room string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[room]
}

type fixture struct {
	h    *Hub
	b    *pubsub.Memory
	n    names.Names
	snap *snapshots
}

func newFixture(t *testing.T, pending int) *fixture {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{b: pubsub.NewMemory(), n: names.New("hubt:", ""), snap: &snapshots{fail: map[string]bool{}, calls: map[string]int{}}}
	f.h = New(Options{Broker: f.b, Names: f.n, Metrics: met, PendingLimit: pending, ReadyTimeout: time.Second, Backend: f.snap})
	f.h.Start()
	t.Cleanup(f.h.Close)
	return f
}

// queued reports whether room has a flight queued behind the one in
// flight.
func (f *fixture) queued(room string) bool {
	fl := f.h.flights
	fl.mu.Lock()
	defer fl.mu.Unlock()
	rf := fl.rooms[room]
	return rf != nil && rf.next != nil
}

func (f *fixture) publish(room, payload string) bool {
	return f.b.Publish(f.n.RoomChannel(room), payload)
}

// join joins m to room through Sync, as the session does.
func (f *fixture) join(t *testing.T, room string, m Member) {
	t.Helper()
	if err := f.h.Sync(context.Background(), SyncJoin, room, m, nil, "j", nil); err != nil {
		t.Fatalf("join %s: %v", room, err)
	}
}

func event(room, user string, i int) string {
	return string(protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: room, User: user, TTLMs: 5000})) + strconv.Itoa(i) + "}"
}

func TestHoldBuffersAndOverflows(t *testing.T) {
	f := newFixture(t, 2)
	m := &member{user: "alice"}
	hd, _, err := f.h.Join(context.Background(), "r", m, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		f.publish("r", event("r", "bob", i))
	}
	f.publish("r", event("r", "alice", 9)) // self: never delivered
	if len(m.frames()) != 0 {
		t.Fatalf("held member got %q", m.frames())
	}
	if !f.h.Release(hd, []byte("snapshot"), protocol.TypeJoined) {
		t.Fatal("overflow not reported")
	}
	want := []string{"snapshot", event("r", "bob", 1), event("r", "bob", 2)}
	if got := m.frames(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
	f.publish("r", event("r", "bob", 5))
	if got := m.frames(); len(got) != 4 || got[3] != event("r", "bob", 5) {
		t.Fatalf("after release: %q", got)
	}
}

func TestSyncJoinsSelfFiltersAndPushesAfterOverflow(t *testing.T) {
	f := newFixture(t, 1)
	f.snap.block = make(chan struct{})
	m := &member{user: "zed"} // the snapshot's typist: filtered out of its own frame
	done := make(chan error, 1)
	go func() { done <- f.h.Sync(context.Background(), SyncJoin, "r", m, nil, "7", nil) }()
	testkit.WaitFor(t, 5*time.Second, "member held", func() bool { return f.h.Members("r") == 1 && f.snap.count("r") == 1 })
	f.publish("r", event("r", "bob", 1))
	f.publish("r", event("r", "bob", 2)) // over PendingLimit 1: a push follows
	close(f.snap.block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := m.frames()
	if len(got) != 3 || !strings.Contains(got[0], `"type":"joined"`) || !strings.Contains(got[0], `"id":"7"`) ||
		strings.Contains(got[0], "zed") || got[1] != event("r", "bob", 1) || !strings.Contains(got[2], `"type":"typing"`) {
		t.Fatalf("frames %q", got)
	}
	if f.snap.count("r") != 2 {
		t.Fatalf("snapshots %d, want 2 (join, push after overflow)", f.snap.count("r"))
	}
}

func TestSyncErrorsUndoTheJoin(t *testing.T) {
	f := newFixture(t, 0)
	m := &member{user: "a"}
	f.snap.fail["r"] = true
	if err := f.h.Sync(context.Background(), SyncJoin, "r", m, nil, "", nil); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("err %v, want ErrSnapshot", err)
	}
	if f.h.Members("r") != 0 || len(f.b.Subscribed()) != 0 {
		t.Fatalf("failed join left members %d, channels %v", f.h.Members("r"), f.b.Subscribed())
	}
	delete(f.snap.fail, "r")
	if err := f.h.Sync(context.Background(), SyncJoin, "r", m, nil, "", func() bool { return false }); !errors.Is(err, ErrAborted) {
		t.Fatalf("err %v, want ErrAborted", err)
	}
	if err := f.h.Sync(context.Background(), SyncAsked, "r", m, nil, "", nil); !errors.Is(err, ErrNotMember) {
		t.Fatalf("err %v, want ErrNotMember", err)
	}
	f.b.SetDown(true)
	if err := f.h.Sync(context.Background(), SyncJoin, "r", m, nil, "", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
	if len(m.frames()) != 0 || f.h.Members("r") != 0 {
		t.Fatalf("frames %q, members %d", m.frames(), f.h.Members("r"))
	}
}

// A join whose subscription Redis refused (an ACL without the room
// channels' pattern) fails with ErrRefused and ErrUnavailable, sends no
// frame, keeps neither the membership nor the subscription, and a later
// join subscribes again.
func TestRefusedSubscriptionFailsTheJoin(t *testing.T) {
	f := newFixture(t, 0)
	var refused atomic.Bool
	refused.Store(true)
	f.b.Hook = func(context.Context, string) error {
		if refused.Load() {
			return fmt.Errorf("%w: NOPERM (test)", pubsub.ErrRefused)
		}
		return nil
	}
	m := &member{user: "a"}
	err := f.h.Sync(context.Background(), SyncJoin, "r", m, nil, "j", nil)
	if !errors.Is(err, ErrRefused) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v, want ErrRefused and ErrUnavailable", err)
	}
	if len(m.frames()) != 0 || f.h.Members("r") != 0 || len(f.b.Subscribed()) != 0 {
		t.Fatalf("refused join left frames %q, members %d, channels %v", m.frames(), f.h.Members("r"), f.b.Subscribed())
	}
	refused.Store(false)
	f.join(t, "r", m)
	if got := m.frames(); len(got) != 1 || !strings.Contains(got[0], `"joined"`) {
		t.Fatalf("frames after the retried join %q, want one joined", got)
	}
	if subs := f.b.Subscribed(); len(subs) != 1 || subs[0] != f.n.RoomChannel("r") {
		t.Fatalf("channels after the retried join %v", subs)
	}
}

// A subscription that is never confirmed bounds the join by ReadyTimeout
// (1 s here), and leaving never waits on the broker. The caller's context
// has no deadline, so the join ends on ReadyTimeout's (DeadlineExceeded)
// or never: the 30 s guard only turns that hang into a failure, with
// room for a loaded CI machine.
func TestJoinBoundedWhenBrokerHangs(t *testing.T) {
	f := newFixture(t, 0)
	f.b.Hook = func(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }
	m := &member{user: "a"}
	done := make(chan error, 1)
	go func() { done <- f.h.Sync(context.Background(), SyncJoin, "r", m, nil, "", nil) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("join still waiting 30 s after its 1 s ReadyTimeout with the broker hung")
	}
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want ErrUnavailable ending on ReadyTimeout's deadline", err)
	}
	if len(f.b.Subscribed()) != 0 {
		t.Fatalf("channels left subscribed: %v", f.b.Subscribed())
	}
}

func TestConcurrentJoinsLeavesFanOut(t *testing.T) {
	f := newFixture(t, 0)
	stop := make(chan struct{})
	var published atomic.Int64
	var pubWG sync.WaitGroup
	pubWG.Add(1)
	go func() {
		defer pubWG.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			f.publish("r"+strconv.Itoa(i%4), event("r"+strconv.Itoa(i%4), "pub", i))
			published.Add(1)
		}
	}()
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &member{user: "u" + strconv.Itoa(i)}
			for j := 0; j < 20; j++ {
				room := "r" + strconv.Itoa((i+j)%4)
				if err := f.h.Sync(context.Background(), SyncJoin, room, m, nil, "", nil); err != nil {
					t.Error(err)
					return
				}
				if j%3 == 0 {
					if err := f.h.Sync(context.Background(), SyncAsked, room, m, nil, "", nil); err != nil {
						t.Error(err)
					}
				}
				f.h.Leave(room, m)
			}
		}()
	}
	wg.Wait()
	close(stop)
	pubWG.Wait()
	for i := 0; i < 4; i++ {
		if n := f.h.Members("r" + strconv.Itoa(i)); n != 0 {
			t.Fatalf("room r%d has %d members", i, n)
		}
	}
	if chs := f.b.Subscribed(); len(chs) != 0 {
		t.Fatalf("channels still subscribed: %v", chs)
	}
	if published.Load() == 0 {
		t.Fatal("nothing published")
	}
	m := &member{user: "last"}
	f.join(t, "r0", m)
	if chs := f.b.Subscribed(); len(chs) != 1 || chs[0] != f.n.RoomChannel("r0") {
		t.Fatalf("channels %v", chs)
	}
}

// Link loss: when the link comes back, every room on it is resynced once
// (an unasked typing frame), and events flow again.
func TestLinkRestoredResyncsItsRooms(t *testing.T) {
	f := newFixture(t, 0)
	a, b := &member{user: "a"}, &member{user: "b"}
	f.join(t, "r1", a)
	f.join(t, "r2", b)
	f.b.SetDown(true)
	if f.publish("r1", event("r1", "x", 1)) {
		t.Fatal("published while down")
	}
	f.b.SetDown(false)
	for _, m := range []*member{a, b} {
		testkit.WaitFor(t, 5*time.Second, m.user+" resynced", func() bool {
			fr := m.frames()
			return len(fr) == 2 && strings.Contains(fr[1], `"type":"typing"`)
		})
	}
	f.publish("r1", event("r1", "x", 2))
	if fr := a.frames(); len(fr) != 3 || fr[2] != event("r1", "x", 2) {
		t.Fatalf("a %q", fr)
	}
}

// One room whose snapshot always fails beside 50 healthy
// rooms: the healthy rooms are resynced once and their members get no
// other frame; only the failing room is retried, with backoff.
func TestFailingRoomNeverCausesFramesElsewhere(t *testing.T) {
	f := newFixture(t, 0)
	ms := make([]*member, 50)
	for i := range ms {
		ms[i] = &member{user: "u" + strconv.Itoa(i)}
		f.join(t, "ok"+strconv.Itoa(i), ms[i])
	}
	bad := &member{user: "bad"}
	f.join(t, "bad", bad)
	f.snap.mu.Lock()
	f.snap.fail["bad"] = true
	f.snap.mu.Unlock()
	f.h.Resync()
	testkit.WaitFor(t, 5*time.Second, "failing room retried", func() bool { return f.snap.count("bad") >= 4 })
	for i, m := range ms {
		testkit.WaitFor(t, 5*time.Second, "ok"+strconv.Itoa(i)+" resynced", func() bool { return len(m.frames()) >= 2 })
	}
	time.Sleep(500 * time.Millisecond) // room for frames that should not come
	for i, m := range ms {
		if n := len(m.frames()); n != 2 {
			t.Fatalf("member of ok%d got %d frames (joined + one resync expected): %q", i, n, m.frames())
		}
		if c := f.snap.count("ok" + strconv.Itoa(i)); c != 2 {
			t.Fatalf("ok%d: %d snapshots, want 2 (join, one resync)", i, c)
		}
	}
	if n := len(bad.frames()); n != 1 {
		t.Fatalf("failing room's member got %d frames, want only joined", n)
	}
	// Its retries back off: far fewer than one per 100 ms.
	before := f.snap.count("bad")
	time.Sleep(2 * time.Second)
	if n := f.snap.count("bad") - before; n > 8 {
		t.Fatalf("failing room retried %d times in 2 s: no backoff", n)
	}
}

// No member gets a resync snapshot before its joined: a resync while the
// join waits for its snapshot is postponed to after joined.
func TestNoResyncBeforeJoined(t *testing.T) {
	f := newFixture(t, 0)
	old := &member{user: "old"}
	f.join(t, "r", old)
	f.snap.mu.Lock()
	f.snap.block = make(chan struct{})
	f.snap.mu.Unlock()
	m := &member{user: "new"}
	done := make(chan error, 1)
	go func() { done <- f.h.Sync(context.Background(), SyncJoin, "r", m, nil, "", nil) }()
	testkit.WaitFor(t, 5*time.Second, "join waiting for its snapshot", func() bool { return f.snap.count("r") == 2 })
	f.h.HandleRestored([]string{f.n.RoomChannel("r")})
	// The resync's holds came after the join's flight started: it waits
	// in the queue for the next flight (flights.go).
	testkit.WaitFor(t, 5*time.Second, "resync queued", func() bool { return f.queued("r") })
	f.snap.mu.Lock()
	close(f.snap.block)
	f.snap.block = nil
	f.snap.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "old member resynced", func() bool { return len(old.frames()) == 2 })
	testkit.WaitFor(t, 5*time.Second, "the postponed snapshot", func() bool { return len(m.frames()) == 2 })
	if c := f.snap.count("r"); c != 4 {
		t.Fatalf("%d snapshot requests, want 4 (old's join, new's join, the resync, the push after new's joined)", c)
	}
	fr := m.frames()
	if len(fr) == 0 || !strings.Contains(fr[0], `"type":"joined"`) {
		t.Fatalf("first frame of the joining member: %q", fr)
	}
	if len(fr) != 2 || !strings.Contains(fr[1], `"type":"typing"`) {
		t.Fatalf("joining member: want joined then the postponed snapshot, got %q", fr)
	}
}

// Fan-out into a big room never blocks a join in another room: the join
// completes while the big room's fan-out is stuck in a member's Send.
func TestFanOutDoesNotBlockOtherRooms(t *testing.T) {
	f := newFixture(t, 0)
	stuck := &blockingMember{user: "slow", release: make(chan struct{}), entered: make(chan struct{})}
	f.join(t, "big", stuck)
	go f.publish("big", event("big", "x", 1))
	<-stuck.entered
	defer close(stuck.release)
	done := make(chan error, 1)
	go func() { done <- f.h.Sync(context.Background(), SyncJoin, "other", &member{user: "a"}, nil, "", nil) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a join in another room waited for the fan-out of room big")
	}
}

type blockingMember struct {
	user     string
	once     sync.Once
	entered  chan struct{}
	release  chan struct{}
	sendings atomic.Int64
}

func (m *blockingMember) User() string { return m.user }
func (m *blockingMember) Send([]byte) bool {
	if m.sendings.Add(1) == 1 {
		return true // the joined frame
	}
	m.once.Do(func() { close(m.entered) })
	<-m.release
	return true
}

func (m *member) SendEvent(_, _ string, f []byte) bool    { return m.Send(f) }
func (m *member) SendSnapshot(_ string, f []byte) bool    { return m.Send(f) }
func (m *member) SendRoomSummary(_ string, f []byte) bool { return m.Send(f) }

func (m *blockingMember) SendEvent(_, _ string, f []byte) bool    { return m.Send(f) }
func (m *blockingMember) SendSnapshot(_ string, f []byte) bool    { return m.Send(f) }
func (m *blockingMember) SendRoomSummary(_ string, f []byte) bool { return m.Send(f) }
