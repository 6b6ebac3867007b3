package worker

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Threads and activities through NATS (docs/protocol.md, "Threads and
// activities"): the wire shapes of commands, events and the snapshot
// reply, the worker's checks of activity and ttl_ms, and the thread bound.
func TestThreadsAndActivitiesOverNATS(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker(func(c *config.Config) {
			c.Activities = []string{"drawing"}
			c.MaxThreadsPerUser = 2
			c.ServiceMaxTTL = 20 * time.Second
		})
		s := e.subscribe("r")
		e.send(
			protocol.Command{Op: protocol.OpStart, Room: "r", User: "alice", Name: "Alice", Conn: "gw-1:1", Seq: 1},
			protocol.Command{Op: protocol.OpStart, Room: "r", Thread: "t1", User: "bob", Conn: "gw-1:2", Seq: 1, Activity: "drawing"},
			protocol.Command{Op: protocol.OpStart, Room: "r", Thread: "t2", User: "agent", Conn: "bot-7:1", Activity: protocol.ActivityThinking, TTLMs: 15000},
		)
		got := map[string]protocol.RoomEvent{}
		for range 3 {
			r, ok := s.Next(waitLong)
			if !ok {
				t.Fatal("fewer than 3 typing_start events")
			}
			got[r.Ev.User] = r.Ev
		}
		if ev := got["alice"]; ev.Thread != "" || ev.Activity != "" || ev.TTLMs != e.cfg.TypingTTL.Milliseconds() {
			t.Fatalf("alice's event %+v", ev)
		}
		if ev := got["bob"]; ev.Thread != "t1" || ev.Activity != "drawing" {
			t.Fatalf("bob's event %+v", ev)
		}
		if ev := got["agent"]; ev.Thread != "t2" || ev.Activity != protocol.ActivityThinking || ev.TTLMs != 15000 {
			t.Fatalf("agent's event %+v", ev)
		}

		// The reply's room scope is what an old reader takes; the threads
		// come beside it.
		msg, err := e.nc.Request(e.names.SnapshotSubject(), []byte(`{"v":1,"room":"r"}`), waitLong)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"v":1,"room":"r","users":[{"user":"alice","name":"Alice"}],"total":1,"threads":[` +
			`{"thread":"t1","users":[{"user":"bob","activity":"drawing"}],"total":1},` +
			`{"thread":"t2","users":[{"user":"agent","activity":"thinking","ttl_ms":15000}],"total":1}]}`
		if string(msg.Data) != want {
			t.Fatalf("snapshot reply %s\nwant           %s", msg.Data, want)
		}

		// Refused: an activity outside the set, a ttl_ms above the
		// setting, a third thread of one user (the bound is 2 here).
		e.send(
			protocol.Command{Op: protocol.OpStart, Room: "r", User: "x", Conn: "c", Activity: "dancing"},
			protocol.Command{Op: protocol.OpStart, Room: "r", User: "x", Conn: "c", TTLMs: 20001},
			protocol.Command{Op: protocol.OpStart, Room: "r", Thread: "t3", User: "agent", Conn: "bot-7:1"},
			protocol.Command{Op: protocol.OpStart, Room: "r", Thread: "t4", User: "agent", Conn: "bot-7:1"},
		)
		for f, n := range map[string]float64{"activity": 1, "ttl_ms": 1} {
			if got := e.metric("ellipsis_worker_invalid_payloads_total", map[string]string{"field": f}); got != n {
				t.Errorf("invalid_payloads_total{field=%q} = %v, want %v", f, got, n)
			}
		}
		if got := e.metric("ellipsis_worker_commands_total", map[string]string{"outcome": "too_many_threads"}); got != 1 {
			t.Errorf("commands_total{too_many_threads} = %v, want 1", got)
		}
		if r, ok := s.Next(waitLong); !ok || r.Ev.User != "agent" || r.Ev.Thread != "t3" {
			t.Fatalf("want agent's start in t3, got %s", r.Raw)
		}
		s.ExpectNone(100 * time.Millisecond)

		// The agent's reply is posted in t2: its indicator ends there only.
		e.send(protocol.Command{Op: protocol.OpStop, Room: "r", Thread: "t2", User: "agent"})
		if r, ok := s.Next(waitLong); !ok || r.Ev.Type != protocol.TypeTypingStop || r.Ev.Thread != "t2" || r.Ev.Reason != protocol.ReasonStopped {
			t.Fatalf("want agent's stop in t2, got %s", r.Raw)
		}
		rep := e.snapshot("r")
		var threads []string
		for _, th := range rep.Threads {
			threads = append(threads, fmt.Sprintf("%s:%d", th.Thread, th.Total))
		}
		if fmt.Sprint(threads) != "[t1:1 t3:1]" || rep.Total != 1 {
			b, _ := json.Marshal(rep)
			t.Fatalf("snapshot after the post: %s", b)
		}
	})
}
