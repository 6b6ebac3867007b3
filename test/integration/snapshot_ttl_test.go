package integration

import (
	"strconv"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Issue 24 end to end: an agent's start with its own ttl_ms (30 s) reaches
// a tab that joins while the agent thinks with that ttl_ms on the typist
// of joined, sync's typing and the HTTP snapshot, in the room and in a
// thread, so the tab keeps showing it until the agent's next refresh; a
// client's typist carries none (docs/protocol.md, "Threads and
// activities").
func TestSnapshotsCarryAnAgentsTTL(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1)
	const room = "agent-ttl"
	nc := connectNATS(t, s.cfg.NATSURL)
	alice := dial(t, s.wsURL(0, "alice", "Alice"), "alice")
	bob := dial(t, s.wsURL(0, "bob", ""), "bob")
	alice.join(room)
	bob.join(room)
	alice.start(room)
	bob.next(isScopeStart(room, "", "alice"), 5*time.Second, "alice's start")
	for _, th := range []string{"", "t-9"} {
		publishCommand(t, nc, s.cfg.SubjectPrefix, protocol.Command{Op: protocol.OpStart, Room: room, Thread: th,
			User: "assistant", Name: "Assistant", Conn: "bot-7:1", Activity: protocol.ActivityThinking, TTLMs: 30000})
		if f := bob.next(isScopeStart(room, th, "assistant"), 5*time.Second, "the assistant's start"); f.TTLMs != 30000 {
			t.Fatalf("assistant's start %v, want ttl_ms 30000", f)
		}
	}
	// ttls is "user=ttl_ms" of a list, in order.
	ttls := func(ts []protocol.Typist) string {
		var out string
		for i, u := range ts {
			if i > 0 {
				out += ","
			}
			out += u.User + "=" + strconv.FormatInt(u.TTLMs, 10)
		}
		return out
	}
	const want, agent = "alice=0,assistant=30000", "assistant=30000"
	// Alice refreshes before each read: her entry has the test's short
	// standard ttl.
	alice.start(room)
	late := dial(t, s.wsURL(0, "carol", ""), "carol")
	j := late.join(room)
	if ttls(j.Typing) != want || len(j.Threads) != 1 || ttls(j.Threads[0].Users) != agent || j.Threads[0].Users[0].Activity != protocol.ActivityThinking {
		t.Fatalf("joined = %v, want %s and the thread's %s", j, want, agent)
	}
	alice.start(room)
	if snap := late.syncFrame(room); ttls(snap.Users) != want || len(snap.Threads) != 1 || ttls(snap.Threads[0].Users) != agent {
		t.Fatalf("typing for sync = %v", snap)
	}
	alice.start(room)
	code, body := httpTypingBody(t, s.gateways[0].HTTPAddr(), room, "carol")
	if code != 200 || ttls(body.Users) != want || len(body.Threads) != 1 || ttls(body.Threads[0].Users) != agent {
		t.Fatalf("GET typing = %d %+v", code, body)
	}
	// The self filter keeps the others' ttl_ms.
	if j := alice.join(room); ttls(j.Typing) != agent || ttls(j.Threads[0].Users) != agent {
		t.Fatalf("alice's joined again = %v", j)
	}
}
