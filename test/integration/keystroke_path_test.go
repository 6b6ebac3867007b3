package integration

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// A start reaches the other members with user, name and ttl_ms; a stop
// follows with reason "stopped".
func TestStartAndStopReachOtherMembers(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1)
	room := "room:42"
	alice := dial(t, s.wsURL(0, "alice", "Alice"), "alice")
	bob := dial(t, s.wsURL(0, "bob", "Bob"), "bob")
	carol := dial(t, s.wsURL(0, "carol", ""), "carol")
	for _, c := range []*client{alice, bob, carol} {
		if j := c.join(room); len(j.Typing) != 0 {
			t.Fatalf("%s: empty room has typists %v", c.name, j.Typing)
		}
	}

	sent := time.Now()
	alice.start(room)
	for _, c := range []*client{bob, carol} {
		f := c.next(isStart(room, "alice"), 2*time.Second, "typing_start alice")
		if f.Name != "Alice" || f.TTLMs != testTTL.Milliseconds() {
			t.Fatalf("%s: typing_start = %v, want name Alice and ttl_ms %d", c.name, f, testTTL.Milliseconds())
		}
		t.Logf("%s saw typing_start %v after sending", c.name, f.at.Sub(sent))
	}
	alice.stop(room)
	for _, c := range []*client{bob, carol} {
		c.next(isStop(room, "alice", "stopped"), 2*time.Second, "typing_stop stopped")
	}
}

// A client that stays connected but stops refreshing is pushed as expired
// within ttl + 1 s (docs/protocol.md, "Timing").
func TestSilentTypistExpires(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1)
	room := "expiry"
	alice := dial(t, s.wsURL(0, "alice", "Alice"), "alice")
	bob := dial(t, s.wsURL(0, "bob", "Bob"), "bob")
	alice.join(room)
	bob.join(room)
	alice.start(room)
	started := bob.next(isStart(room, "alice"), 2*time.Second, "typing_start")
	f := bob.next(isStop(room, "alice", ""), expiryBound+500*time.Millisecond, "typing_stop")
	if f.Reason != "expired" {
		t.Fatalf("stop reason = %q, want expired", f.Reason)
	}
	if d := f.at.Sub(started.at); d > expiryBound || d < testTTL-200*time.Millisecond {
		t.Fatalf("expired stop %v after start, want within [ttl, ttl+1s] = [%v, %v]", d, testTTL, expiryBound)
	} else {
		t.Logf("expired stop %v after start (ttl %v)", d, testTTL)
	}
	// Exactly one stop.
	bob.quiet(isAbout("alice"), 800*time.Millisecond, "second event about alice")
}

// An abrupt TCP close (no close frame) makes others see a stop within
// ttl + 1 s; the gateway's disconnect command makes it immediate.
func TestAbruptDisconnectStopsTyping(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1)
	room := "abrupt"
	alice := dial(t, s.wsURL(0, "alice", "Alice"), "alice")
	bob := dial(t, s.wsURL(0, "bob", "Bob"), "bob")
	alice.join(room)
	bob.join(room)
	alice.start(room)
	bob.next(isStart(room, "alice"), 2*time.Second, "typing_start")
	cut := time.Now()
	alice.abort()
	f := bob.next(isStop(room, "alice", ""), expiryBound, "typing_stop after abrupt close")
	t.Logf("stop %q %v after the TCP close", f.Reason, f.at.Sub(cut))
}

// A connection never hears about its own user, from any device.
func TestSelfFilter(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1)
	room := "self"
	phone := dial(t, s.wsURL(0, "alice", "Alice"), "alice-phone")
	laptop := dial(t, s.wsURL(0, "alice", "Alice"), "alice-laptop")
	bob := dial(t, s.wsURL(0, "bob", "Bob"), "bob")
	for _, c := range []*client{phone, laptop, bob} {
		c.join(room)
	}
	phone.start(room)
	bob.next(isStart(room, "alice"), 2*time.Second, "typing_start alice")
	// A late joiner of the same user gets a snapshot without itself.
	tablet := dial(t, s.wsURL(0, "alice", "Alice"), "alice-tablet")
	if j := tablet.join(room); len(j.Typing) != 0 {
		t.Fatalf("snapshot for alice lists %v", j.Typing)
	}
	phone.send(map[string]any{"type": "sync", "room": room, "id": "s1"})
	snap := phone.next(func(f frame) bool { return f.Type == "typing" && f.ID == "s1" }, 3*time.Second, "typing snapshot")
	if len(snap.Users) != 0 {
		t.Fatalf("sync for alice lists %v", snap.Users)
	}
	phone.stop(room)
	bob.next(isStop(room, "alice", "stopped"), 2*time.Second, "typing_stop alice")
	for _, c := range []*client{phone, laptop, tablet} {
		c.quiet(isAbout("alice"), 300*time.Millisecond, "event about its own user")
	}
}

// A new member sees current typists at once, with their names.
func TestSnapshotOnJoin(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1)
	room := "café ☕"
	alice := dial(t, s.wsURL(0, "alice", "Alice"), "alice")
	bob := dial(t, s.wsURL(0, "bob", "Bob"), "bob")
	watcher := dial(t, s.wsURL(0, "watcher", ""), "watcher")
	alice.join(room)
	bob.join(room)
	watcher.join(room)
	alice.start(room)
	bob.start(room)
	// The two starts come from different connections, so they may be
	// applied (and arrive) in either order.
	w := watch(watcher)
	w.waitShown(room, "alice,bob", 2*time.Second)

	carol := dial(t, s.wsURL(0, "carol", "Carol"), "carol")
	j := carol.join(room)
	sort.Slice(j.Typing, func(a, b int) bool { return j.Typing[a].User < j.Typing[b].User })
	if users(j.Typing) != "alice,bob" || j.Typing[0].Name != "Alice" || j.Typing[1].Name != "Bob" {
		t.Fatalf("joined snapshot = %+v, want alice (Alice) and bob (Bob)", j.Typing)
	}
}

// start → stop → start within 300 ms ends shown: the seed's throttle would
// drop the second start; the state-aware throttle does not.
func TestStartStopStartEndsShown(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1)
	room := "flap"
	alice := dial(t, s.wsURL(0, "alice", "Alice"), "alice")
	bob := dial(t, s.wsURL(0, "bob", "Bob"), "bob")
	alice.join(room)
	bob.join(room)
	alice.start(room)
	time.Sleep(100 * time.Millisecond)
	alice.stop(room)
	time.Sleep(100 * time.Millisecond)
	alice.start(room)
	bob.next(isStart(room, "alice"), 2*time.Second, "first start")
	bob.next(isStop(room, "alice", "stopped"), 2*time.Second, "stop")
	bob.next(isStart(room, "alice"), 2*time.Second, "second start")
	bob.send(map[string]any{"type": "sync", "room": room, "id": "s"})
	snap := bob.next(func(f frame) bool { return f.Type == "typing" && f.ID == "s" }, 3*time.Second, "snapshot")
	if users(snap.Users) != "alice" {
		t.Fatalf("after start→stop→start the snapshot is %v, want alice", snap.Users)
	}
}

// A burst of refreshes fans out at most once per throttle window, and the
// refreshes still keep the entry alive.
func TestRefreshBurstIsThrottled(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1)
	room := "burst"
	alice := dial(t, s.wsURL(0, "alice", "Alice"), "alice")
	bob := dial(t, s.wsURL(0, "bob", "Bob"), "bob")
	alice.join(room)
	bob.join(room)
	const burst = 2 * time.Second
	const every = 100 * time.Millisecond
	begin := time.Now()
	for time.Since(begin) < burst {
		alice.start(room)
		time.Sleep(every)
	}
	frames := bob.drain(300 * time.Millisecond)
	starts := 0
	for _, f := range frames {
		switch {
		case isStart(room, "alice")(f):
			starts++
		case f.Type == "typing_stop":
			t.Fatalf("refreshes did not keep alice alive: %v", f)
		}
	}
	// One start, then at most one refresh per throttle window.
	max := 1 + int(burst/testThrottle)
	if starts < 2 || starts > max {
		t.Fatalf("%d typing_start frames for %d refreshes over %v, want 2..%d (one per %v window)", starts, int(burst/every), burst, max, testThrottle)
	}
	t.Logf("%d refresh frames sent, %d fanned out", int(burst/every), starts)
}

// Two gateways and two workers side by side (each with its own connections):
// every receiver sees every other user's start and stop exactly once.
func TestTwoGatewaysTwoWorkersNoDuplicatesNoLoss(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2, 2)
	room := "!abc:matrix.org"
	var cs []*client
	for i := 0; i < 6; i++ {
		u := fmt.Sprintf("user%d", i)
		c := dial(t, s.wsURL(i%2, u, strings.ToUpper(u)), u)
		c.join(room)
		cs = append(cs, c)
	}
	for _, c := range cs {
		c.start(room)
	}
	time.Sleep(300 * time.Millisecond)
	for _, c := range cs {
		c.stop(room)
	}
	for i, c := range cs {
		got := map[string]int{}
		for _, f := range c.drain(1500 * time.Millisecond) {
			if f.Type == "typing_start" || f.Type == "typing_stop" {
				got[f.Type+" "+f.User]++
			}
		}
		for j := range cs {
			if j == i {
				continue
			}
			u := fmt.Sprintf("user%d", j)
			if got["typing_start "+u] != 1 || got["typing_stop "+u] != 1 {
				t.Errorf("%s saw %v for %s, want exactly one start and one stop", c.name, got, u)
			}
		}
		if got[fmt.Sprintf("typing_start user%d", i)] != 0 {
			t.Errorf("%s heard about itself", c.name)
		}
	}
}
