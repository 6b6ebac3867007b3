package hub

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Per-viewer filters (filter.View) in the hub, on the in-memory broker:
// hidden users never reach the viewer (events, joined, typing, summaries,
// watch summaries), others see them; a member whose typing is off gets
// its joined (empty) and nothing unasked.

func hides(users ...string) *filter.View { return filter.New(filter.NewSet(users), filter.Set{}, true) }

var typingOff = filter.New(filter.Set{}, filter.Set{}, false)

// decoded returns m's frames decoded.
func decoded(t *testing.T, m *member) []protocol.ServerFrame {
	t.Helper()
	var out []protocol.ServerFrame
	for _, s := range m.frames() {
		var f protocol.ServerFrame
		if err := json.Unmarshal([]byte(s), &f); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		out = append(out, f)
	}
	return out
}

func users(ts []protocol.Typist) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.User)
	}
	return out
}

func (f *fixture) joinView(t *testing.T, room string, m Member, v *filter.View, id string) {
	t.Helper()
	if err := f.h.Sync(context.Background(), SyncJoin, room, m, v, id, nil); err != nil {
		t.Fatalf("join %s: %v", room, err)
	}
}

func (f *fixture) setTyping(room string, us ...string) {
	f.snap.mu.Lock()
	defer f.snap.mu.Unlock()
	var ts []protocol.Typist
	for _, u := range us {
		ts = append(ts, protocol.Typist{User: u})
	}
	f.snap.typing[room] = ts
}

func TestViewFiltersJoinedAndEvents(t *testing.T) {
	f := newFixture(t, 16)
	f.snap.typing = map[string][]protocol.Typist{}
	f.setTyping("r", "alice", "bob", "carol")
	blocker := &member{user: "alice"} // hides bob
	other := &member{user: "dave"}
	f.joinView(t, "r", blocker, hides("bob"), "j1")
	f.joinView(t, "r", other, nil, "j2")

	j := decoded(t, blocker)[0]
	if j.Type != protocol.TypeJoined || !slices.Equal(users(j.Typing), []string{"carol"}) || j.Total != 1 {
		t.Fatalf("blocker's joined: %+v", j)
	}
	j = decoded(t, other)[0]
	if !slices.Equal(users(j.Typing), []string{"alice", "bob", "carol"}) || j.Total != 3 {
		t.Fatalf("other's joined: %+v", j)
	}
	for i, u := range []string{"bob", "carol", "bob"} {
		f.publish("r", event("r", u, i))
	}
	stop := protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: "r", User: "bob", Reason: protocol.ReasonStopped}
	f.publish("r", string(protocol.RoomEventPrefix(stop))+"9}")
	var got []string
	for _, fr := range decoded(t, blocker)[1:] {
		got = append(got, fr.Type+":"+fr.User)
	}
	if !slices.Equal(got, []string{"typing_start:carol"}) {
		t.Fatalf("blocker got %v, want carol's start only", got)
	}
	if n := len(other.frames()); n != 5 {
		t.Fatalf("other got %d frames, want joined + 4 events", n)
	}
	// A sync is filtered the same way.
	if err := f.h.Sync(context.Background(), SyncAsked, "r", blocker, nil, "s", nil); err != nil {
		t.Fatal(err)
	}
	all := decoded(t, blocker)
	if s := all[len(all)-1]; s.Type != protocol.TypeTyping || !slices.Equal(users(s.Users), []string{"carol"}) || s.Total != 1 || s.ID != "s" {
		t.Fatalf("blocker's sync: %+v", s)
	}
}

// A cut snapshot: total counts the listed typists not hidden, and may
// count hidden typists beyond the cut (the snapshot does not name them).
func TestViewTotalOfCutSnapshot(t *testing.T) {
	f := newFixture(t, 16)
	f.snap.typing = map[string][]protocol.Typist{}
	f.setTyping("r", "a", "b")
	cut := &cutSnapshots{snapshots: f.snap, total: 10}
	f.h.flights.backend = cut
	m := &member{user: "me"}
	f.joinView(t, "r", m, hides("b", "z"), "j")
	j := decoded(t, m)[0]
	if !slices.Equal(users(j.Typing), []string{"a"}) || j.Total != 9 {
		t.Fatalf("joined %+v, want [a] and total 10 - 1 listed hidden", j)
	}
}

type cutSnapshots struct {
	*snapshots
	total int
}

func (c *cutSnapshots) Snapshot(ctx context.Context, room string) (protocol.Snapshot, error) {
	s, err := c.snapshots.Snapshot(ctx, room)
	s.Total = c.total
	return s, err
}

func TestTypingOffJoin(t *testing.T) {
	f := newFixture(t, 16)
	f.snap.typing = map[string][]protocol.Typist{}
	f.setTyping("r", "bob")
	m := &member{user: "alice"}
	f.joinView(t, "r", m, typingOff, "j")
	if n := f.snap.count("r"); n != 0 {
		t.Fatalf("%d snapshots asked for a join with typing off, want 0", n)
	}
	j := decoded(t, m)[0]
	if j.Type != protocol.TypeJoined || j.Typing == nil && len(m.frames()[0]) == 0 || len(j.Typing) != 0 || j.Total != 0 || j.ID != "j" {
		t.Fatalf("joined: %+v", j)
	}
	if want := `{"type":"joined","room":"r","typing":[],"total":0,"id":"j"}`; m.frames()[0] != want {
		t.Fatalf("joined %s, want %s", m.frames()[0], want)
	}
	f.publish("r", event("r", "bob", 1))
	// sync: an empty typing snapshot at once, no snapshot asked.
	if err := f.h.Sync(context.Background(), SyncAsked, "r", m, nil, "s", nil); err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"typing","room":"r","users":[],"total":0,"id":"s"}`; len(m.frames()) != 2 || m.frames()[1] != want {
		t.Fatalf("frames %q, want joined and %s", m.frames(), want)
	}
	// A resync (a Redis link restored) pushes it nothing.
	other := &member{user: "carol"}
	f.joinView(t, "r", other, nil, "j2")
	f.h.HandleRestored([]string{f.n.RoomChannel("r")})
	testkit.WaitFor(t, 5*time.Second, "carol's resync snapshot", func() bool { return len(other.frames()) == 2 })
	if n := len(m.frames()); n != 2 {
		t.Fatalf("typing-off member got %d frames after the resync: %q", n, m.frames())
	}
	// A join again with typing on: a fresh snapshot, then events.
	f.joinView(t, "r", m, nil, "j3")
	j = decoded(t, m)[2]
	if j.Type != protocol.TypeJoined || !slices.Equal(users(j.Typing), []string{"bob"}) || j.Total != 1 || j.ID != "j3" {
		t.Fatalf("re-join: %+v", j)
	}
	f.publish("r", event("r", "bob", 2))
	if fr := decoded(t, m); len(fr) != 4 || fr[3].Type != protocol.TypeTypingStart {
		t.Fatalf("after the re-join: %q", m.frames())
	}
	// And off again: nothing more.
	f.joinView(t, "r", m, typingOff, "j4")
	f.publish("r", event("r", "bob", 3))
	if fr := decoded(t, m); len(fr) != 5 || fr[4].Type != protocol.TypeJoined || fr[4].Total != 0 {
		t.Fatalf("off again: %q", m.frames())
	}
}

// Events buffered while a member is held are dropped when its re-join
// turns typing off.
func TestTypingOffDropsBufferedEvents(t *testing.T) {
	f := newFixture(t, 16)
	m := &member{user: "alice"}
	f.join(t, "r", m)
	hd := f.h.Hold("r", m) // a sync in flight, say
	f.publish("r", event("r", "bob", 1))
	f.joinView(t, "r", m, typingOff, "j2")
	if f.h.Release(hd, []byte(`{"type":"typing"}`), protocol.TypeTyping) {
		t.Fatal("an off member reported an overflow")
	}
	for _, s := range m.frames()[1:] {
		var fr protocol.ServerFrame
		_ = json.Unmarshal([]byte(s), &fr)
		if fr.Type != protocol.TypeJoined {
			t.Fatalf("typing-off member got %s", s)
		}
	}
}

func TestViewInSummaryMode(t *testing.T) {
	f := summaryFixture(t)
	blocker, off := &member{user: "alice"}, &member{user: "olga"}
	f.joinView(t, "r", blocker, hides("bob"), "j")
	f.joinView(t, "r", off, typingOff, "j")
	for _, u := range []string{"m1", "m2", "m3"} {
		f.join(t, "r", &member{user: u})
	}
	if f.h.Summarizing() != 1 {
		t.Fatal("not in summary mode")
	}
	f.change(t, "r", "bob", true)
	f.change(t, "r", "carol", true)
	f.h.summary.tick()
	fr := decoded(t, blocker)
	if s := fr[len(fr)-1]; s.Type != protocol.TypeTyping || !slices.Equal(users(s.Users), []string{"carol"}) || s.Total != 1 {
		t.Fatalf("blocker's summary: %+v", s)
	}
	if n := len(off.frames()); n != 1 {
		t.Fatalf("typing-off member got %d frames in summary mode: %q", n, off.frames())
	}
}

func TestViewInWatchSummary(t *testing.T) {
	f := watchFixture(t)
	blocker, other := &member{user: "alice"}, &member{user: "dave"}
	f.snap.typing["r"] = []protocol.Typist{{User: "bob"}, {User: "carol"}}
	if err := f.h.Watch(context.Background(), "r", blocker, hides("bob")); err != nil {
		t.Fatal(err)
	}
	f.h.Arm(blocker, "r")
	f.watch(t, other, "r")
	f.h.watch.tick()
	s := summaries(t, blocker)
	if len(s) != 1 || !slices.Equal(users(s[0].Typing), []string{"carol"}) || s[0].Total != 1 {
		t.Fatalf("blocker's summary: %+v", s)
	}
	if s := summaries(t, other); len(s) != 1 || s[0].Total != 2 {
		t.Fatalf("other's summary: %+v", s)
	}
}

// threadSnapshots answers the room's typists and one thread, t1, with
// bob and carol typing in it.
type threadSnapshots struct{ *snapshots }

func (s threadSnapshots) Snapshot(ctx context.Context, room string) (protocol.Snapshot, error) {
	snap, err := s.snapshots.Snapshot(ctx, room)
	snap.Threads = []protocol.ThreadSnapshot{{Thread: "t1", Users: []protocol.Typist{{User: "bob"}, {User: "carol"}}, Total: 2}}
	return snap, err
}

func TestViewFiltersThreads(t *testing.T) {
	f := newFixture(t, 16)
	f.snap.typing = map[string][]protocol.Typist{}
	f.setTyping("r", "bob")
	f.h.flights.backend = threadSnapshots{f.snap}
	blocker := &member{user: "alice"}
	f.joinView(t, "r", blocker, hides("bob"), "j")
	j := decoded(t, blocker)[0]
	if len(j.Typing) != 0 || j.Total != 0 || len(j.Threads) != 1 || j.Threads[0].Thread != "t1" || !slices.Equal(users(j.Threads[0].Users), []string{"carol"}) || j.Threads[0].Total != 1 {
		t.Fatalf("joined %+v, want no room typist and t1 with carol only", j)
	}
	for _, u := range []string{"bob", "carol"} {
		ev := protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", Thread: "t1", User: u, TTLMs: 5000}
		f.publish("r", string(protocol.RoomEventPrefix(ev))+"1}")
	}
	fr := decoded(t, blocker)
	if len(fr) != 2 || fr[1].User != "carol" || fr[1].Thread != "t1" {
		t.Fatalf("blocker got %q, want carol's start in t1 only", blocker.frames())
	}
}
