package hub

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
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

// Watching rooms (watch.go) on the in-memory broker. The watch ticker's
// interval is an hour: the tests call tick themselves, one call being one
// interval, so "at most one summary per interval" and "only when changed"
// are counted exactly, whatever the machine's speed.

func (m *member) SendSummary(_ string, f []byte) bool { return m.Send(f) }

func watchFixture(t testing.TB) *fixture {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{b: pubsub.NewMemory(), n: names.New("hubw:", ""), snap: &snapshots{fail: map[string]bool{}, calls: map[string]int{}, typing: map[string][]protocol.Typist{}}}
	f.h = New(Options{Broker: f.b, Names: f.n, Metrics: met, ReadyTimeout: 5 * time.Second, Backend: f.snap,
		SummaryInterval: time.Hour, WatchInterval: time.Hour})
	f.h.Start()
	t.Cleanup(f.h.Close)
	return f
}

// watch watches and arms rooms for w, as the session does.
func (f *fixture) watch(t testing.TB, w Watcher, rooms ...string) {
	t.Helper()
	for _, r := range rooms {
		f.snap.mu.Lock()
		if _, ok := f.snap.typing[r]; !ok {
			f.snap.typing[r] = nil // listed: nobody types yet
		}
		f.snap.mu.Unlock()
		if err := f.h.Watch(context.Background(), r, w, nil); err != nil {
			t.Fatalf("watch %s: %v", r, err)
		}
	}
	f.h.Arm(w, rooms...)
}

// summaries decodes m's frames, all of which must be summaries.
func summaries(t *testing.T, m *member) []protocol.ServerFrame {
	t.Helper()
	var out []protocol.ServerFrame
	for _, fr := range m.frames() {
		var sf protocol.ServerFrame
		if err := json.Unmarshal([]byte(fr), &sf); err != nil || sf.Type != protocol.TypeSummary {
			t.Fatalf("frame %q is not a summary (%v)", fr, err)
		}
		out = append(out, sf)
	}
	return out
}

// wantSummary is the summary of room's truth for user: the first 3 of its
// self-filtered typists and their total.
func (f *fixture) wantSummary(room, user string) string {
	truth := f.truthFor(room, user)
	all := len(truth)
	if len(truth) > protocol.SummaryTypists {
		truth = truth[:protocol.SummaryTypists]
	}
	return strings.Join(truth, ",") + "/" + strconv.Itoa(all)
}

func gotSummary(sf protocol.ServerFrame) string {
	users := make([]string, len(sf.Typing))
	for i, ty := range sf.Typing {
		users[i] = ty.User
	}
	return strings.Join(users, ",") + "/" + strconv.Itoa(sf.Total)
}

func TestWatchInitialSummaryThenOnlyWhenChanged(t *testing.T) {
	f := watchFixture(t)
	w := &member{user: "w"}
	f.watch(t, w, "r")
	if n := len(w.frames()); n != 0 {
		t.Fatalf("summary before the tick: %q", w.frames())
	}
	f.h.watch.tick()
	if got := w.frames(); len(got) != 1 || got[0] != `{"type":"summary","room":"r","typing":[],"total":0}` {
		t.Fatalf("initial summary: %q", got)
	}
	reads := f.snap.count("r")
	f.h.watch.tick() // nothing changed: no read, no frame
	if n := len(w.frames()); n != 1 || f.snap.count("r") != reads {
		t.Fatalf("idle tick: frames %q, reads %d -> %d", w.frames(), reads, f.snap.count("r"))
	}
	f.change(t, "r", "alice", true)
	f.change(t, "r", "bob", true)
	f.h.watch.tick()
	s := summaries(t, w)
	if len(s) != 2 || gotSummary(s[1]) != "alice,bob/2" {
		t.Fatalf("after two starts: %q", w.frames())
	}
	// A refresh (same state, a new event): read again, not sent again.
	f.change(t, "r", "alice", true)
	f.h.watch.tick()
	if n := len(w.frames()); n != 2 || f.snap.count("r") != reads+2 {
		t.Fatalf("unchanged summary sent again or not read: %q, reads %d", w.frames(), f.snap.count("r")-reads)
	}
	// Back to nobody typing is a change.
	f.change(t, "r", "alice", false)
	f.change(t, "r", "bob", false)
	f.h.watch.tick()
	if s := summaries(t, w); len(s) != 3 || gotSummary(s[2]) != "/0" {
		t.Fatalf("after the stops: %q", w.frames())
	}
}

// Many changes with ticks in between: at most one summary per tick, and
// the last one once the changes stop is the room's exact state; a
// watcher that is also a typist never sees itself.
func TestWatchSummariesExactAfterChangesStop(t *testing.T) {
	f := watchFixture(t)
	users := []string{"a", "b", "c", "d", "e", "f"}
	watchers := []*member{{user: "w"}, {user: "a"}, {user: "c"}}
	for _, w := range watchers {
		f.watch(t, w, "r")
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	ticks := 0
	for i := range 400 {
		f.change(t, "r", users[rnd.IntN(len(users))], rnd.IntN(2) == 0)
		if i%7 == 0 {
			f.h.watch.tick()
			ticks++
		}
	}
	f.h.watch.tick()
	ticks++
	for _, w := range watchers {
		s := summaries(t, w)
		if len(s) > ticks {
			t.Fatalf("%s: %d summaries in %d ticks", w.user, len(s), ticks)
		}
		for i, sf := range s {
			for _, ty := range sf.Typing {
				if ty.User == w.user {
					t.Fatalf("%s sees itself in summary %d: %+v", w.user, i, sf)
				}
			}
			if i > 0 && gotSummary(sf) == gotSummary(s[i-1]) {
				t.Fatalf("%s: summary %d repeats the one before: %s", w.user, i, gotSummary(sf))
			}
		}
		if got, want := gotSummary(s[len(s)-1]), f.wantSummary("r", w.user); got != want {
			t.Fatalf("%s: last summary %s, truth %s", w.user, got, want)
		}
	}
}

func TestUnwatchEndsSummariesAndTheSubscription(t *testing.T) {
	f := watchFixture(t)
	w, m := &member{user: "w"}, &member{user: "m"}
	f.watch(t, w, "r", "s")
	f.join(t, "r", m)
	f.h.watch.tick()
	if n := len(w.frames()); n != 2 {
		t.Fatalf("initial summaries: %q", w.frames())
	}
	if got := f.b.Subscribed(); len(got) != 2 {
		t.Fatalf("subscribed %v", got)
	}
	if n := f.h.Unwatch(w, "r", "s", "never"); n != 2 {
		t.Fatalf("Unwatch = %d, want 2", n)
	}
	f.change(t, "r", "x", true)
	f.h.watch.tick()
	if n := len(w.frames()); n != 2 {
		t.Fatalf("summary after unwatch: %q", w.frames())
	}
	// r stays for its member, s is gone with its subscription.
	if got := f.b.Subscribed(); len(got) != 1 || got[0] != f.n.RoomChannel("r") {
		t.Fatalf("subscribed after unwatch %v", got)
	}
	if f.h.Watchers("r") != 0 || f.h.Members("r") != 1 {
		t.Fatalf("r: %d watchers, %d members", f.h.Watchers("r"), f.h.Members("r"))
	}
	f.h.Leave("r", m)
	if got := f.b.Subscribed(); len(got) != 0 {
		t.Fatalf("subscribed after leave %v", got)
	}
}

// An unarmed watcher (its "watching" not queued yet) gets nothing; arming
// it brings its first summary at the next tick.
func TestWatchNothingBeforeArm(t *testing.T) {
	f := watchFixture(t)
	w := &member{user: "w"}
	f.snap.typing["r"] = nil
	if err := f.h.Watch(context.Background(), "r", w, nil); err != nil {
		t.Fatal(err)
	}
	f.change(t, "r", "x", true)
	f.h.watch.tick()
	if n := len(w.frames()); n != 0 {
		t.Fatalf("unarmed watcher got %q", w.frames())
	}
	f.h.Arm(w, "r")
	f.h.watch.tick()
	if s := summaries(t, w); len(s) != 1 || gotSummary(s[0]) != "x/1" {
		t.Fatalf("after arm: %q", w.frames())
	}
}

// countingWatcher counts SendSummary calls.
type countingWatcher struct {
	user string
	n    atomic.Int64
}

func (c *countingWatcher) User() string                    { return c.user }
func (c *countingWatcher) SendSummary(string, []byte) bool { c.n.Add(1); return true }

// A room with 2000 watchers and no member: an event touches no watcher
// and marks the room dirty once (O(1) per event); a tick reads one
// snapshot and queues one summary per watcher whose summary changed; the
// room has one subscription.
func TestWatchFanOutIsO1PerEvent(t *testing.T) {
	f := watchFixture(t)
	ws := make([]*countingWatcher, 2000)
	for i := range ws {
		ws[i] = &countingWatcher{user: "w" + strconv.Itoa(i)}
		f.watch(t, ws[i], "big")
	}
	f.h.watch.tick()
	reads := f.snap.count("big")
	for i := range 1000 {
		f.change(t, "big", "t"+strconv.Itoa(i%5), i%3 != 0)
	}
	for _, w := range ws {
		if w.n.Load() != 1 {
			t.Fatalf("%s got %d summaries before the tick, want only the initial one", w.user, w.n.Load())
		}
	}
	f.h.watch.mu.Lock()
	dirty := len(f.h.watch.dirty)
	f.h.watch.mu.Unlock()
	if dirty != 1 {
		t.Fatalf("dirty set holds %d rooms after 1000 events of one room", dirty)
	}
	f.h.watch.tick()
	if got := f.snap.count("big") - reads; got != 1 {
		t.Fatalf("%d snapshot reads for 2000 watchers in one tick, want 1", got)
	}
	for _, w := range ws {
		if w.n.Load() != 2 {
			t.Fatalf("%s got %d summaries, want 2", w.user, w.n.Load())
		}
	}
	if got := f.b.Subscribed(); len(got) != 1 {
		t.Fatalf("subscribed %v", got)
	}
	// The same work per event with 2000 watchers as with one.
	f.watch(t, &countingWatcher{user: "w"}, "small")
	big, small := event("big", "t1", 1), event("small", "t1", 1)
	allocsBig := testing.AllocsPerRun(200, func() { f.h.fanOut(f.n.RoomChannel("big"), big) })
	allocsSmall := testing.AllocsPerRun(200, func() { f.h.fanOut(f.n.RoomChannel("small"), small) })
	if allocsBig > allocsSmall {
		t.Fatalf("fanOut allocates %v per event with 2000 watchers, %v with one", allocsBig, allocsSmall)
	}
}

// After the Redis link was lost and restored, the next tick re-reads the
// room: a change whose event was lost reaches the watcher.
func TestWatchLinkRestoredRereads(t *testing.T) {
	f := watchFixture(t)
	w := &member{user: "w"}
	f.watch(t, w, "r")
	f.h.watch.tick()
	f.b.SetDown(true)
	f.snap.mu.Lock()
	f.snap.typing["r"] = []protocol.Typist{{User: "x"}} // its event is lost
	f.snap.mu.Unlock()
	f.h.watch.tick()
	if n := len(w.frames()); n != 1 {
		t.Fatalf("summary with no event: %q", w.frames())
	}
	f.b.SetDown(false) // restored: the room is resynced, marked dirty
	testkit.WaitFor(t, 10*time.Second, "the room marked dirty", func() bool {
		f.h.watch.mu.Lock()
		defer f.h.watch.mu.Unlock()
		_, ok := f.h.watch.dirty["r"]
		return ok
	})
	f.h.watch.tick()
	if s := summaries(t, w); len(s) != 2 || gotSummary(s[1]) != "x/1" {
		t.Fatalf("after the restore: %q", w.frames())
	}
}

// A failed snapshot keeps the room dirty; the next tick retries it.
func TestWatchSnapshotFailureRetries(t *testing.T) {
	f := watchFixture(t)
	w := &member{user: "w"}
	f.watch(t, w, "r")
	f.snap.mu.Lock()
	f.snap.fail["r"] = true
	f.snap.mu.Unlock()
	f.h.watch.tick()
	if n := len(w.frames()); n != 0 {
		t.Fatalf("summary from a failed snapshot: %q", w.frames())
	}
	f.snap.mu.Lock()
	delete(f.snap.fail, "r")
	f.snap.mu.Unlock()
	f.h.watch.tick()
	if n := len(w.frames()); n != 1 {
		t.Fatalf("no summary after the retry: %q", w.frames())
	}
}

// Watch fails, leaving nothing behind, when the subscription fails.
func TestWatchSubscriptionFailure(t *testing.T) {
	f := watchFixture(t)
	w := &member{user: "w"}
	f.b.SetDown(true)
	if err := f.h.Watch(context.Background(), "r", w, nil); err == nil {
		t.Fatal("watch with the link down succeeded")
	}
	f.b.SetDown(false)
	if f.h.Watchers("r") != 0 || len(f.b.Subscribed()) != 0 {
		t.Fatalf("left behind: %d watchers, subscribed %v", f.h.Watchers("r"), f.b.Subscribed())
	}
}

// BenchmarkFanOutWatchedRoom is one room event into a room with N
// watchers and no member: the same cost for 1 and 10000 watchers.
func BenchmarkFanOutWatchedRoom(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run("watchers="+strconv.Itoa(n), func(b *testing.B) {
			f := watchFixture(b)
			for i := range n {
				f.watch(b, &countingWatcher{user: "w" + strconv.Itoa(i)}, "r")
			}
			ch, ev := f.n.RoomChannel("r"), event("r", "x", 1)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				f.h.fanOut(ch, ev)
			}
		})
	}
}
