package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/pubsub"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Summary mode (summary.go) on the in-memory broker. The ticker's
// interval is an hour: the tests call tick themselves, one call being one
// interval, so "at most one frame per interval" is counted exactly and
// nothing depends on the machine's speed.

// summaryFixture is a hub with summary threshold 4 (exit below 4 - 0 = 4,
// i.e. at 3 members) whose backend answers the room's true typists.
func summaryFixture(t *testing.T) *fixture {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{b: pubsub.NewMemory(), n: names.New("hubs:", ""), snap: &snapshots{fail: map[string]bool{}, calls: map[string]int{}, typing: map[string][]protocol.Typist{}}}
	f.h = New(Options{Broker: f.b, Names: f.n, Metrics: met, ReadyTimeout: 5 * time.Second, Backend: f.snap,
		SummaryMembers: 4, SummaryInterval: time.Hour})
	f.snap.typing["r"] = nil // listed: nobody types yet
	f.h.Start()
	t.Cleanup(f.h.Close)
	return f
}

// change applies one typing change to the backend's truth and publishes
// its event, as the worker does (state and event atomically).
func (f *fixture) change(t *testing.T, room, user string, start bool) {
	t.Helper()
	f.snap.mu.Lock()
	cur := f.snap.typing[room]
	i := slices.IndexFunc(cur, func(ty protocol.Typist) bool { return ty.User == user })
	ev := protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: room, User: user, Reason: protocol.ReasonStopped}
	if start {
		ev = protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: room, User: user, TTLMs: 5000}
		if i < 0 {
			cur = append(cur, protocol.Typist{User: user})
			sort.Slice(cur, func(a, b int) bool { return cur[a].User < cur[b].User })
		}
	} else if i >= 0 {
		cur = slices.Delete(slices.Clone(cur), i, i+1)
	}
	f.snap.typing[room] = cur
	f.snap.mu.Unlock()
	if !f.publish(room, string(protocol.RoomEventPrefix(ev))+"1}") {
		t.Fatal("publish failed")
	}
}

// truthFor is the room's true typists as user should see them (self
// filtered), sorted.
func (f *fixture) truthFor(room, user string) []string {
	f.snap.mu.Lock()
	defer f.snap.mu.Unlock()
	var out []string
	for _, ty := range f.snap.typing[room] {
		if ty.User != user {
			out = append(out, ty.User)
		}
	}
	return out
}

// view is what a client (the JS SDK's Room._receive) shows after applying
// frames in order: joined and typing replace the list, typing_start adds,
// typing_stop removes.
func view(t *testing.T, frames []string) []string {
	t.Helper()
	set := map[string]bool{}
	for _, fr := range frames {
		var sf protocol.ServerFrame
		if err := json.Unmarshal([]byte(fr), &sf); err != nil {
			t.Fatalf("frame %q: %v", fr, err)
		}
		switch sf.Type {
		case protocol.TypeJoined, protocol.TypeTyping:
			list := sf.Users
			if sf.Type == protocol.TypeJoined {
				list = sf.Typing
			}
			set = map[string]bool{}
			for _, ty := range list {
				set[ty.User] = true
			}
		case protocol.TypeTypingStart:
			set[sf.User] = true
		case protocol.TypeTypingStop:
			delete(set, sf.User)
		default:
			t.Fatalf("unexpected frame %q", fr)
		}
	}
	out := make([]string, 0, len(set))
	for u := range set {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

func typeOf(fr string) string {
	var sf protocol.ServerFrame
	_ = json.Unmarshal([]byte(fr), &sf)
	return sf.Type
}

func joinMembers(t *testing.T, f *fixture, room string, n int) []*member {
	t.Helper()
	ms := make([]*member, n)
	for i := range ms {
		ms[i] = &member{user: "m" + strconv.Itoa(i)}
		f.join(t, room, ms[i])
	}
	return ms
}

func checkViews(t *testing.T, f *fixture, room string, ms []*member, when string) {
	t.Helper()
	for _, m := range ms {
		got, want := view(t, m.frames()), f.truthFor(room, m.user)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: %s shows %v, truth %v (frames %q)", when, m.user, got, want, m.frames())
		}
	}
}

// Below the threshold nothing changes: every event is delivered as
// published, and a tick sends nothing.
func TestSummaryBelowThresholdSendsEveryEvent(t *testing.T) {
	f := summaryFixture(t)
	ms := joinMembers(t, f, "r", 4) // 4 is not more than 4
	for i := 0; i < 20; i++ {
		f.change(t, "r", "x"+strconv.Itoa(i%3), i%2 == 0)
	}
	f.h.summary.tick()
	for _, m := range ms {
		if n := len(m.frames()); n != 1+20 {
			t.Fatalf("%s got %d frames, want joined + 20 events", m.user, n)
		}
	}
	checkViews(t, f, "r", ms, "below threshold")
	if f.h.Summarizing() != 0 {
		t.Fatal("room of 4 members in summary mode")
	}
}

// Above the threshold: no event is sent; each tick in which the room
// changed sends each member exactly one typing frame with the exact state
// (self-filtered), and a tick without change sends nothing.
func TestSummaryAboveThresholdOneFramePerInterval(t *testing.T) {
	f := summaryFixture(t)
	ms := joinMembers(t, f, "r", 5)
	if f.h.Summarizing() != 1 {
		t.Fatal("room of 5 members not in summary mode")
	}
	for round := 1; round <= 3; round++ {
		for i := 0; i < 50; i++ {
			// m0 and m1 type too: they must not see themselves.
			users := []string{"m0", "m1", "x0", "x1", "x2"}
			f.change(t, "r", users[(i*7+round)%5], (i+round)%3 != 0)
		}
		f.h.summary.tick()
		for _, m := range ms {
			fr := m.frames()
			if len(fr) != 1+round {
				t.Fatalf("round %d: %s got %d frames, want joined + %d summaries: %q", round, m.user, len(fr), round, fr)
			}
			if typeOf(fr[len(fr)-1]) != protocol.TypeTyping {
				t.Fatalf("round %d: last frame %q, want typing", round, fr[len(fr)-1])
			}
		}
		checkViews(t, f, "r", ms, fmt.Sprintf("round %d", round))
	}
	f.h.summary.tick() // nothing changed
	for _, m := range ms {
		if n := len(m.frames()); n != 4 {
			t.Fatalf("%s got a frame from a tick without change (%d frames)", m.user, n)
		}
	}
}

// Entering (a 5th member) sends nothing and loses nothing; leaving
// (members fall to 3, below 90 % of 4) sends one last summary at the next
// tick and events again after it; the final state is exact throughout and
// no event is sent twice.
func TestSummaryCrossingBothWaysKeepsTheFinalState(t *testing.T) {
	f := summaryFixture(t)
	ms := joinMembers(t, f, "r", 4)
	f.change(t, "r", "x0", true)
	f.change(t, "r", "x1", true)
	checkViews(t, f, "r", ms, "events mode")

	extra := &member{user: "m4"}
	f.join(t, "r", extra) // 5 > 4: summary mode
	all := append(slices.Clone(ms), extra)
	before := len(ms[0].frames())
	f.change(t, "r", "x0", false)
	f.change(t, "r", "x2", true)
	if n := len(ms[0].frames()); n != before {
		t.Fatalf("an event was sent in summary mode (%d frames, had %d)", n, before)
	}
	f.h.summary.tick()
	checkViews(t, f, "r", all, "after entering")

	f.h.Leave("r", extra) // 4: not below 4 - 0 = 4, still summary
	f.change(t, "r", "x3", true)
	f.h.summary.tick()
	checkViews(t, f, "r", ms, "at 4 members (hysteresis)")
	if f.h.Summarizing() != 1 {
		t.Fatal("left summary mode at 4 members")
	}

	f.h.Leave("r", ms[3]) // 3 < 4: leaving at the next tick
	ms = ms[:3]
	f.change(t, "r", "x1", false) // suppressed until the last summary
	f.h.summary.tick()
	if f.h.Summarizing() != 0 {
		t.Fatal("still in summary mode after the leaving tick")
	}
	checkViews(t, f, "r", ms, "after leaving")
	n := len(ms[0].frames())
	f.change(t, "r", "x2", false)
	f.change(t, "r", "x4", true)
	fr := ms[0].frames()
	if len(fr) != n+2 || typeOf(fr[n]) != protocol.TypeTypingStop || typeOf(fr[n+1]) != protocol.TypeTypingStart {
		t.Fatalf("after leaving: want the two events, got %q", fr[n:])
	}
	checkViews(t, f, "r", ms, "events again")
	f.h.summary.tick()
	if len(ms[0].frames()) != n+2 {
		t.Fatal("a tick sent a frame to a room back in events mode")
	}
}

// A member held (a sync in flight) is skipped by a summary, and a change
// while it was held makes the next tick send it (and the room) the state.
// Events in summary mode are never buffered: memory stays bounded.
func TestSummaryHeldMemberAndBoundedMemory(t *testing.T) {
	f := summaryFixture(t)
	ms := joinMembers(t, f, "r", 6)
	hd := f.h.Hold("r", ms[0])
	for i := 0; i < 10000; i++ {
		f.change(t, "r", "x"+strconv.Itoa(i%300), i%4 != 0)
	}
	rm := f.h.lookup("r")
	buffered := len(rm.members[ms[0]].buf)
	rm.mu.Unlock()
	if buffered != 0 {
		t.Fatalf("held member buffered %d events in summary mode", buffered)
	}
	f.h.summary.tick()
	if n := len(ms[0].frames()); n != 1 {
		t.Fatalf("held member got a summary: %q", ms[0].frames())
	}
	checkViews(t, f, "r", ms[1:], "others")
	f.h.Release(hd, nil, "")
	f.h.summary.tick()
	checkViews(t, f, "r", ms, "after the release")
	for _, m := range ms[1:] {
		if n := len(m.frames()); n != 3 {
			t.Fatalf("%s got %d frames, want joined + 2 summaries", m.user, n)
		}
	}
}

// A failing summary snapshot sends nothing and is tried again at the
// next tick.
func TestSummarySnapshotFailureRetries(t *testing.T) {
	f := summaryFixture(t)
	ms := joinMembers(t, f, "r", 5)
	f.change(t, "r", "x", true)
	f.snap.mu.Lock()
	f.snap.fail["r"] = true
	f.snap.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { f.h.summary.tick(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("tick did not end")
	}
	if n := len(ms[0].frames()); n != 1 {
		t.Fatalf("frames after a failed summary: %q", ms[0].frames())
	}
	f.snap.mu.Lock()
	delete(f.snap.fail, "r")
	f.snap.mu.Unlock()
	f.h.summary.tick()
	checkViews(t, f, "r", ms, "after the retry")
}
