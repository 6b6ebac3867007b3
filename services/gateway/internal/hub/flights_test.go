package hub

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// snapshotsCounted is snapshots_total{result} of the fixture's hub.
func (f *fixture) snapshotsCounted(result string) int {
	return int(testutil.ToFloat64(f.h.met.SnapshotsCounter(result)))
}

// blockSnapshots makes every snapshot call wait until the returned
// function is called.
func (f *fixture) blockSnapshots() (unblock func()) {
	f.snap.mu.Lock()
	defer f.snap.mu.Unlock()
	f.snap.block = make(chan struct{})
	ch := f.snap.block
	return func() {
		f.snap.mu.Lock()
		f.snap.block = nil
		f.snap.mu.Unlock()
		close(ch)
	}
}

// httpAsk starts a Hub.Snapshot of room (an asker with no hold) and
// returns its outcome's channel.
func (f *fixture) httpAsk(room string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := f.h.Snapshot(context.Background(), room)
		done <- err
	}()
	return done
}

// N members syncing a room at once while a flight is in flight share one
// queued flight: N askers, one request to the workers, and every member
// gets its own answer (id echoed).
func TestConcurrentSyncsShareOneRequest(t *testing.T) {
	const n = 20
	f := newFixture(t, 0)
	ms := make([]*member, n)
	for i := range ms {
		ms[i] = &member{user: "u" + strconv.Itoa(i)}
		f.join(t, "r", ms[i])
	}
	base := f.snap.count("r") // the joins' flights
	unblock := f.blockSnapshots()
	first := f.httpAsk("r")
	testkit.WaitFor(t, 5*time.Second, "the first flight in flight", func() bool { return f.snap.count("r") == base+1 })
	requested, shared := f.snapshotsCounted(metrics.SnapshotRequested), f.snapshotsCounted(metrics.SnapshotShared)
	done := make(chan error, n)
	for i, m := range ms {
		go func() { done <- f.h.Sync(context.Background(), SyncAsked, "r", m, nil, "s"+strconv.Itoa(i), nil) }()
	}
	testkit.WaitFor(t, 5*time.Second, "every sync waiting", func() bool { return f.snapshotsCounted(metrics.SnapshotShared) == shared+n-1 })
	if r := f.snapshotsCounted(metrics.SnapshotRequested); r != requested+1 {
		t.Fatalf("%d requests made for %d concurrent syncs, want 1", r-requested, n)
	}
	unblock()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if c := f.snap.count("r") - base; c != 2 {
		t.Fatalf("workers asked %d times, want 2 (the flight in flight, one shared by the %d syncs)", c, n)
	}
	for i, m := range ms {
		got := m.frames()
		last := got[len(got)-1]
		if !strings.Contains(last, `"type":"typing"`) || !strings.Contains(last, `"id":"s`+strconv.Itoa(i)+`"`) {
			t.Fatalf("member %d: last frame %q, want its typing answer", i, last)
		}
	}
}

// A flight that started before a member's hold may have read the room
// before an event the member got unheld: the member must not share it. It
// waits for the next flight, which reads the room after its hold, and
// ends with the typist the event announced.
func TestAskerDoesNotShareAFlightStartedBeforeItsHold(t *testing.T) {
	f := newFixture(t, 0)
	f.snap.typing = map[string][]protocol.Typist{"r": nil}
	m := &member{user: "alice"}
	f.join(t, "r", m)
	unblock := f.blockSnapshots()
	first := f.httpAsk("r") // reads the room: nobody types
	testkit.WaitFor(t, 5*time.Second, "the first flight in flight", func() bool { return f.snap.count("r") == 2 })
	// bob starts after that read; alice is not held and gets the event.
	f.snap.mu.Lock()
	f.snap.typing["r"] = []protocol.Typist{{User: "bob"}}
	f.snap.mu.Unlock()
	f.publish("r", event("r", "bob", 1))
	testkit.WaitFor(t, 5*time.Second, "alice got bob's start", func() bool { return len(m.frames()) == 2 })
	done := make(chan error, 1)
	go func() { done <- f.h.Sync(context.Background(), SyncAsked, "r", m, nil, "s", nil) }()
	testkit.WaitFor(t, 5*time.Second, "alice's sync queued", func() bool { return f.queued("r") })
	unblock()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := m.frames()
	if len(got) != 3 || !strings.Contains(got[2], `"id":"s"`) || !strings.Contains(got[2], `"user":"bob"`) {
		t.Fatalf("frames %q: want joined, bob's start, then a snapshot that still lists bob", got)
	}
	if c := f.snap.count("r"); c != 3 {
		t.Fatalf("workers asked %d times, want 3 (join, the first flight, alice's own)", c)
	}
}

// HTTP askers (no hold) arriving while a flight is in flight, which
// started before their requests, do not share it: the first of them
// queues a flight and the others share that queued one. Six askers, two
// requests to the workers.
func TestHTTPAskersShareTheQueuedFlight(t *testing.T) {
	f := newFixture(t, 0)
	unblock := f.blockSnapshots()
	first := f.httpAsk("r")
	testkit.WaitFor(t, 5*time.Second, "the first flight in flight", func() bool { return f.snap.count("r") == 1 })
	var rest []<-chan error
	for range 5 {
		rest = append(rest, f.httpAsk("r"))
	}
	testkit.WaitFor(t, 5*time.Second, "the askers waiting", func() bool { return f.snapshotsCounted(metrics.SnapshotShared) == 4 })
	unblock()
	for _, ch := range append(rest, first) {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if c := f.snap.count("r"); c != 2 {
		t.Fatalf("workers asked %d times for 6 askers, want 2", c)
	}
}

// A flight's error goes to every asker that shares it, and nothing is
// queued to the members.
func TestFlightErrorGoesToEveryAsker(t *testing.T) {
	f := newFixture(t, 0)
	ms := []*member{{user: "a"}, {user: "b"}, {user: "c"}}
	for _, m := range ms {
		f.join(t, "r", m)
	}
	unblock := f.blockSnapshots()
	first := f.httpAsk("r")
	testkit.WaitFor(t, 5*time.Second, "the first flight in flight", func() bool { return f.snap.count("r") == 4 })
	f.snap.mu.Lock()
	f.snap.fail["r"] = true
	f.snap.mu.Unlock()
	done := make(chan error, len(ms))
	for _, m := range ms {
		go func() { done <- f.h.Sync(context.Background(), SyncAsked, "r", m, nil, "s", nil) }()
	}
	testkit.WaitFor(t, 5*time.Second, "the syncs waiting", func() bool { return f.queued("r") && f.snapshotsCounted(metrics.SnapshotShared) == 2 })
	unblock()
	if err := <-first; err != nil {
		t.Fatalf("first asker (its flight read the room before the failure): %v", err)
	}
	for range ms {
		if err := <-done; !errors.Is(err, ErrSnapshot) {
			t.Fatalf("sync: %v, want ErrSnapshot", err)
		}
	}
	if c := f.snap.count("r"); c != 5 {
		t.Fatalf("workers asked %d times, want 5 (3 joins, 2 flights)", c)
	}
	for _, m := range ms {
		if got := m.frames(); len(got) != 1 {
			t.Fatalf("member %s got %q after a failed sync, want its joined only", m.user, got)
		}
	}
}

// An asker that stops waiting (its own deadline, its connection closing)
// does not cancel the flight it shared for the others: the flight runs on
// the hub's context, bounded by ReadyTimeout.
func TestAskerCancelLeavesTheFlightToOthers(t *testing.T) {
	f := newFixture(t, 0)
	unblock := f.blockSnapshots()
	first := f.httpAsk("r")
	testkit.WaitFor(t, 5*time.Second, "the first flight in flight", func() bool { return f.snap.count("r") == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	quitter := make(chan error, 1)
	go func() {
		_, err := f.h.Snapshot(ctx, "r")
		quitter <- err
	}()
	testkit.WaitFor(t, 5*time.Second, "the quitter queued", func() bool { return f.queued("r") })
	stayer := f.httpAsk("r") // shares the quitter's queued flight
	testkit.WaitFor(t, 5*time.Second, "the stayer sharing it", func() bool { return f.snapshotsCounted(metrics.SnapshotShared) == 1 })
	cancel()
	if err := <-quitter; !errors.Is(err, ErrSnapshot) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled asker: %v, want ErrSnapshot wrapping context.Canceled", err)
	}
	unblock()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-stayer; err != nil {
		t.Fatalf("the other asker of the quitter's flight: %v, want its snapshot", err)
	}
	if c := f.snap.count("r"); c != 2 {
		t.Fatalf("workers asked %d times, want 2", c)
	}
}

// Askers of a flight that the hub's Close cancels, in flight or queued,
// get ErrClosed (the HTTP answer "gateway shutting down"), not a snapshot
// failure.
func TestFlightsCancelledByCloseAnswerClosed(t *testing.T) {
	f := newFixture(t, 0)
	f.blockSnapshots()
	inFlight := f.httpAsk("r")
	testkit.WaitFor(t, 5*time.Second, "the first flight in flight", func() bool { return f.snap.count("r") == 1 })
	queued := f.httpAsk("r")
	testkit.WaitFor(t, 5*time.Second, "the second asker queued", func() bool { return f.queued("r") })
	f.h.Close()
	for what, ch := range map[string]<-chan error{"in flight": inFlight, "queued": queued} {
		if err := <-ch; !errors.Is(err, ErrClosed) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrSnapshot) {
			t.Fatalf("asker of the flight %s when the hub closed: %v, want ErrClosed", what, err)
		}
	}
}
