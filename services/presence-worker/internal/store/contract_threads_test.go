package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The contract suite, continued for issue 24 (docs/protocol.md, "Threads
// and activities"): thread scopes, their bound, activities and a platform
// service's own ttl, on both stores and both backends. The cases above
// run unchanged: a command without thread, activity or ttl_ms behaves as
// before.

// tstart is a start of conn in thread th of room ("" = the room itself).
func tstart(room, th, user, conn string, seq uint64) protocol.Command {
	return protocol.Command{V: 1, Op: protocol.OpStart, Room: room, Thread: th, User: user, Conn: conn, Seq: seq}
}

// tstop is a stop of conn ("" = every connection) in thread th of room.
func tstop(room, th, user, conn string, seq uint64) protocol.Command {
	return protocol.Command{V: 1, Op: protocol.OpStop, Room: room, Thread: th, User: user, Conn: conn, Seq: seq}
}

// want applies cmd (Apply: start, stop, leave or disconnect) and fails
// unless its outcome is one of outs.
func (se *storeEnv) want(cmd protocol.Command, outs ...Outcome) Outcome {
	se.t.Helper()
	got := se.apply(cmd)
	if !slices.Contains(outs, got) {
		se.t.Fatalf("%s %s/%s/%s conn %q seq %d activity %q: %q, want %q", cmd.Op, cmd.Room, cmd.Thread, cmd.User, cmd.Conn, cmd.Seq, cmd.Activity, got, outs)
	}
	return got
}

// expectIn is storetest.Stream.Expect that also wants the event's thread.
func expectIn(t *testing.T, s *storetest.Stream, typ, room, thread, user, reason string) protocol.RoomEvent {
	t.Helper()
	r := s.Expect(typ, room, user, reason, waitLong)
	if r.Ev.Thread != thread {
		t.Fatalf("event %s: thread %q, want %q", r.Raw, r.Ev.Thread, thread)
	}
	return r.Ev
}

// scopes returns who a snapshot lists per scope: "" for the room itself,
// each thread by name, as "user" or "user:activity" lists; it checks that
// every scope's total matches its list and that threads are sorted.
func (se *storeEnv) scopes(room string) map[string][]string {
	se.t.Helper()
	snap, err := se.st.Snapshot(context.Background(), room, MaxSnapshotLimit)
	if err != nil {
		se.t.Fatalf("snapshot %q: %v", room, err)
	}
	list := func(users []protocol.Typist, acts map[string]string) []string {
		out := []string{}
		for _, u := range users {
			if a := acts[u.User]; a != "" {
				out = append(out, u.User+":"+a)
			} else {
				out = append(out, u.User)
			}
		}
		return out
	}
	out := map[string][]string{}
	if snap.Total != len(snap.Users) {
		se.t.Fatalf("snapshot %q: room total %d for %d users", room, snap.Total, len(snap.Users))
	}
	if len(snap.Users) > 0 {
		out[""] = list(snap.Users, snap.Activities)
	}
	for i, th := range snap.Threads {
		if i > 0 && snap.Threads[i-1].Thread >= th.Thread {
			se.t.Fatalf("snapshot %q: threads not sorted: %+v", room, snap.Threads)
		}
		if th.Total != len(th.Users) || th.Total == 0 {
			se.t.Fatalf("snapshot %q: thread %q total %d for %d users", room, th.Thread, th.Total, len(th.Users))
		}
		out[th.Thread] = list(th.Users, th.Activities)
	}
	return out
}

func sameScopes(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// One user types in the room on the phone and in a thread on the laptop:
// each scope shows, throttles and ends on its own, and events and the
// snapshot say which.
func TestContractThreadScopes(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.want(tstart("r", "", "alice", "phone", 1), OutcomeStarted)
		se.want(tstart("r", "t1", "alice", "laptop", 1), OutcomeStarted) // not the room's throttle window
		se.want(tstart("r", "t1", "alice", "laptop", 2), OutcomeThrottled)
		se.want(tstart("r", "t1", "bob", "b", 1), OutcomeStarted)
		expectIn(t, s, protocol.TypeTypingStart, "r", "", "alice", "")
		expectIn(t, s, protocol.TypeTypingStart, "r", "t1", "alice", "")
		expectIn(t, s, protocol.TypeTypingStart, "r", "t1", "bob", "")
		if got, want := se.scopes("r"), map[string][]string{"": {"alice"}, "t1": {"alice", "bob"}}; !sameScopes(got, want) {
			t.Fatalf("snapshot %v, want %v", got, want)
		}
		// The laptop stops in the thread: the room still shows alice.
		se.want(tstop("r", "t1", "alice", "laptop", 3), OutcomeStopped)
		expectIn(t, s, protocol.TypeTypingStop, "r", "t1", "alice", protocol.ReasonStopped)
		// Bob's message is posted in the thread: his typing there ends,
		// alice's in the room does not.
		se.want(tstop("r", "t1", "bob", "", 0), OutcomeStopped)
		expectIn(t, s, protocol.TypeTypingStop, "r", "t1", "bob", protocol.ReasonStopped)
		if got, want := se.scopes("r"), map[string][]string{"": {"alice"}}; !sameScopes(got, want) {
			t.Fatalf("snapshot %v, want %v", got, want)
		}
		// A platform stop in the room ends the room only.
		se.want(tstart("r", "t2", "alice", "laptop", 4), OutcomeStarted)
		expectIn(t, s, protocol.TypeTypingStart, "r", "t2", "alice", "")
		se.want(tstop("r", "", "alice", "", 0), OutcomeStopped)
		expectIn(t, s, protocol.TypeTypingStop, "r", "", "alice", protocol.ReasonStopped)
		if got, want := se.scopes("r"), map[string][]string{"t2": {"alice"}}; !sameScopes(got, want) {
			t.Fatalf("snapshot %v, want %v", got, want)
		}
		// The thread's entry expires: its stop says so, with the thread.
		se.advance(stTTL + stMargin)
		if r := se.sweepAll(3); r.Stops != 1 {
			t.Fatalf("sweep %+v, want the thread's expired stop", r)
		}
		expectIn(t, s, protocol.TypeTypingStop, "r", "t2", "alice", protocol.ReasonExpired)
		s.ExpectNone(100 * time.Millisecond)
		if got := se.scopes("r"); len(got) != 0 {
			t.Fatalf("snapshot after expiry %v", got)
		}
	})
}

// A user types in at most DefaultMaxThreads threads of a room at once;
// one more is refused, the room itself never is, and an ended thread frees
// its place.
func TestContractThreadsBounded(t *testing.T) {
	forEachKindTTL(t, 3*stTTL, func(t *testing.T, se *storeEnv) {
		for i := range DefaultMaxThreads {
			se.want(tstart("r", fmt.Sprintf("t%d", i), "u", "c", uint64(i+1)), OutcomeStarted, OutcomeCoalesced)
		}
		se.want(tstart("r", "extra", "u", "c2", 1), OutcomeTooManyThreads)
		se.want(tstart("r", "t0", "u", "c2", 2), OutcomeThrottled, OutcomeRefreshed) // a thread it types in
		se.want(tstart("r", "", "u", "c2", 3), OutcomeStarted, OutcomeCoalesced)     // the room
		se.want(tstart("r", "extra", "other", "o", 1), OutcomeStarted)               // per user
		if got := len(se.scopes("r")["extra"]); got != 1 {
			t.Fatalf("thread extra lists %d typists, want the other user only", got)
		}
		// The stop in t0 must end both of u's connections there.
		se.want(tstop("r", "t0", "u", "", 0), OutcomeStopped, OutcomeCoalesced)
		se.want(tstart("r", "extra", "u", "c2", 4), OutcomeStarted, OutcomeCoalesced)
		se.want(tstart("r", "more", "u", "c2", 5), OutcomeTooManyThreads)
	})
}

// A leave or a disconnect ends the connection in the room and in every
// thread of it, each with its own typing_stop.
func TestContractLeaveEndsThreads(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.want(tstart("r", "", "u", "c", 1), OutcomeStarted)
		se.want(tstart("r", "a", "u", "c", 2), OutcomeStarted)
		se.want(tstart("r", "b", "u", "c", 3), OutcomeStarted)
		se.want(tstart("r", "b", "u", "other", 1), OutcomeThrottled) // another device in b
		for _, th := range []string{"", "a", "b"} {
			expectIn(t, s, protocol.TypeTypingStart, "r", th, "u", "")
		}
		se.want(protocol.Command{V: 1, Op: protocol.OpLeave, Room: "r", User: "u", Conn: "c", Seq: 4}, OutcomeStopped)
		expectIn(t, s, protocol.TypeTypingStop, "r", "", "u", protocol.ReasonLeft)
		expectIn(t, s, protocol.TypeTypingStop, "r", "a", "u", protocol.ReasonLeft)
		s.ExpectNone(100 * time.Millisecond) // the other device still types in b
		if got, want := se.scopes("r"), map[string][]string{"b": {"u"}}; !sameScopes(got, want) {
			t.Fatalf("snapshot %v, want %v", got, want)
		}
		// A start of c delayed past its leave is stale in a thread too.
		se.want(tstart("r", "a", "u", "c", 3), OutcomeStale)
		outs, err := se.st.Disconnect(context.Background(), protocol.Command{V: 1, Op: protocol.OpDisconnect, Rooms: []string{"r"}, User: "u", Conn: "other", Seq: 2})
		if err != nil || !slices.Equal(outs, []Outcome{OutcomeNoop}) {
			t.Fatalf("disconnect: %v, %v", outs, err)
		}
		expectIn(t, s, protocol.TypeTypingStop, "r", "b", "u", protocol.ReasonDisconnected)
		s.ExpectNone(100 * time.Millisecond)
		if got := se.scopes("r"); len(got) != 0 {
			t.Fatalf("snapshot %v, want nobody", got)
		}
		if r := se.sweepAll(3); r.Stops != 0 {
			t.Fatalf("sweep %+v after every scope ended", r)
		}
	})
}

// A change of activity while shown is a state change: published at once
// (not held by the refresh window), throttled by the event rate limit and
// coalesced to the final activity.
func TestContractActivityChanges(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		act := func(seq uint64, a string, outs ...Outcome) Outcome {
			c := tstart("r", "", "bot", "svc", seq)
			c.Activity = a
			return se.want(c, outs...)
		}
		act(1, "thinking", OutcomeStarted)
		if ev := expectIn(t, s, protocol.TypeTypingStart, "r", "", "bot", ""); ev.Activity != "thinking" {
			t.Fatalf("start activity %q", ev.Activity)
		}
		act(2, "thinking", OutcomeThrottled)
		if got, want := se.scopes("r"), map[string][]string{"": {"bot:thinking"}}; !sameScopes(got, want) {
			t.Fatalf("snapshot %v, want %v", got, want)
		}
		act(3, "", OutcomeRefreshed) // typing: inside the window, still shown at once
		if ev := expectIn(t, s, protocol.TypeTypingStart, "r", "", "bot", ""); ev.Activity != "" {
			t.Fatalf("typing carries activity %q", ev.Activity)
		}
		// Toggle faster than the rate limit: the last activity wins.
		last := ""
		for i, a := range []string{"uploading", "thinking", "recording_audio", "uploading", "recording_video"} {
			act(uint64(4+i), a, OutcomeRefreshed, OutcomeCoalesced, OutcomeThrottled)
			last = a
		}
		se.advance(se.throttle + stMargin)
		se.sweepAll(3)
		var final protocol.RoomEvent
		for _, r := range s.Drain(300 * time.Millisecond) {
			final = r.Ev
		}
		if final.Type != protocol.TypeTypingStart || final.Activity != last {
			t.Fatalf("last event %+v, want typing_start %q", final, last)
		}
		if got, want := se.scopes("r"), map[string][]string{"": {"bot:" + last}}; !sameScopes(got, want) {
			t.Fatalf("snapshot %v, want %v", got, want)
		}
	})
}

// A platform service's start lives its own ttl_ms: the entry, the event's
// ttl_ms and the room's keys, which a standard start never cuts short; the
// platform's stop ends it at once.
func TestContractServiceTTL(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		long := 3 * stTTL
		c := tstart("r", "th", "agent", "svc", 0)
		c.Activity, c.TTLMs = "thinking", long.Milliseconds()
		se.want(c, OutcomeStarted)
		if ev := expectIn(t, s, protocol.TypeTypingStart, "r", "th", "agent", ""); ev.TTLMs != long.Milliseconds() || ev.Activity != "thinking" {
			t.Fatalf("event %+v", ev)
		}
		se.want(tstart("r", "th", "human", "h", 1), OutcomeStarted)
		expectIn(t, s, protocol.TypeTypingStart, "r", "th", "human", "")
		// The human's start renewed the thread users set without cutting
		// it below the agent's key lifetime (ttl + grace + throttle).
		pttl, err := se.rdb.PTTL(context.Background(), threadUsersKey(se.names, "r")).Result()
		if err != nil || pttl <= stTTL+DefaultKeyGrace+se.throttle+stTTL/2 {
			t.Fatalf("thread users set PTTL %s, %v: cut below the agent's %s", pttl, err, long+DefaultKeyGrace)
		}
		se.advance(stTTL + stMargin)
		se.sweepAll(3)
		expectIn(t, s, protocol.TypeTypingStop, "r", "th", "human", protocol.ReasonExpired)
		if got, want := se.scopes("r"), map[string][]string{"th": {"agent:thinking"}}; !sameScopes(got, want) {
			t.Fatalf("snapshot %v, want %v", got, want)
		}
		// The reply is posted: the agent's indicator ends at once.
		se.want(tstop("r", "th", "agent", "", 0), OutcomeStopped)
		expectIn(t, s, protocol.TypeTypingStop, "r", "th", "agent", protocol.ReasonStopped)
		s.ExpectNone(100 * time.Millisecond)
		if got := se.scopes("r"); len(got) != 0 {
			t.Fatalf("snapshot %v, want nobody", got)
		}
	})
}

// A service's long entry that nobody stops expires at its own ttl, not
// the standard one.
func TestContractServiceTTLExpires(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		c := tstart("r", "", "agent", "svc", 0)
		c.TTLMs = (2 * stTTL).Milliseconds()
		se.want(c, OutcomeStarted)
		expectIn(t, s, protocol.TypeTypingStart, "r", "", "agent", "")
		se.advance(stTTL + stMargin)
		if r := se.sweepAll(3); r.Stops != 0 {
			t.Fatalf("sweep %+v at the standard ttl", r)
		}
		if got := se.scopes("r"); !sameScopes(got, map[string][]string{"": {"agent"}}) {
			t.Fatalf("snapshot %v", got)
		}
		se.advance(stTTL + stMargin)
		if r := se.sweepAll(3); r.Stops != 1 {
			t.Fatalf("sweep %+v past the service's ttl", r)
		}
		expectIn(t, s, protocol.TypeTypingStop, "r", "", "agent", protocol.ReasonExpired)
	})
}

// A leave that arrives after a later command of its connection in the
// room itself (stale there) still ends the connection in the threads it
// is not stale in, and a start there delayed behind it stays stale.
func TestContractStaleLeaveStillEndsThreads(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		s := se.subscribe("r")
		se.want(tstart("r", "a", "u", "c", 1), OutcomeStarted)
		se.want(tstart("r", "", "u", "c", 4), OutcomeStarted) // after a rejoin, applied before the leave
		expectIn(t, s, protocol.TypeTypingStart, "r", "a", "u", "")
		expectIn(t, s, protocol.TypeTypingStart, "r", "", "u", "")
		se.want(protocol.Command{V: 1, Op: protocol.OpLeave, Room: "r", User: "u", Conn: "c", Seq: 3}, OutcomeStale)
		expectIn(t, s, protocol.TypeTypingStop, "r", "a", "u", protocol.ReasonLeft)
		se.want(tstart("r", "a", "u", "c", 2), OutcomeStale)
		s.ExpectNone(100 * time.Millisecond)
		if got, want := se.scopes("r"), map[string][]string{"": {"u"}}; !sameScopes(got, want) {
			t.Fatalf("snapshot %v, want %v", got, want)
		}
	})
}
