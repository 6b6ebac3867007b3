package worker

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// A platform service's start with its own ttl_ms (30 s) is listed in the
// NATS snapshot reply with that ttl_ms, in the room and in a thread, on
// both stores; a client's start (the standard ttl) is listed without one,
// byte for byte as before (docs/protocol.md, "Threads and activities").
func TestSnapshotReplyCarriesServiceTTL(t *testing.T) {
	for _, kind := range []string{config.StoreZSet, config.StoreKeys} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, storetest.Backend{Name: "redis", PubSub: storetest.PubSub}, func(c *config.Config) { c.Store = kind })
			e.startWorker()
			s := e.subscribe("r")
			e.send(
				protocol.Command{Op: protocol.OpStart, Room: "r", User: "alice", Name: "Alice", Conn: "gw-1:1", Seq: 1},
				protocol.Command{Op: protocol.OpStart, Room: "r", User: "assistant", Name: "Assistant", Conn: "bot-7:1", Activity: protocol.ActivityThinking, TTLMs: 30000},
				protocol.Command{Op: protocol.OpStart, Room: "r", Thread: "t-9", User: "assistant", Name: "Assistant", Conn: "bot-7:1", TTLMs: 30000},
			)
			for range 3 {
				if _, ok := s.Next(waitLong); !ok {
					t.Fatal("fewer than 3 typing_start events")
				}
			}
			rep := e.snapshot("r")
			ttls := map[string]int64{}
			for _, u := range rep.Users {
				ttls[u.User] = u.TTLMs
			}
			if got := ttls["assistant"]; got <= e.cfg.TypingTTL.Milliseconds() || got > 30000 {
				t.Fatalf("assistant's ttl_ms %d, want in (%d, 30000]", got, e.cfg.TypingTTL.Milliseconds())
			}
			if got, ok := ttls["alice"]; !ok || got != 0 {
				t.Fatalf("alice's ttl_ms %d (listed %v), want none", got, ok)
			}
			msg, err := e.nc.Request(e.names.SnapshotSubject(), []byte(`{"v":1,"room":"r"}`), waitLong)
			if err != nil {
				t.Fatal(err)
			}
			want := `{"v":1,"room":"r","users":[{"user":"alice","name":"Alice"},` +
				`{"user":"assistant","name":"Assistant","activity":"thinking","ttl_ms":30000}],"total":2,` +
				`"threads":[{"thread":"t-9","users":[{"user":"assistant","name":"Assistant","ttl_ms":30000}],"total":1}]}`
			if string(msg.Data) != want {
				t.Fatalf("snapshot reply %s\nwant           %s", msg.Data, want)
			}
		})
	}
}

// A reply cut to max_payload keeps each listed typist's ttl_ms and
// activity, and lists as many as fit counting both.
func TestEncodeSnapshotReplyKeepsTTLs(t *testing.T) {
	users := bigTypists(700)
	acts := map[string]string{}
	for i := range users {
		if i%2 == 0 {
			users[i].TTLMs = 60000
			acts[users[i].User] = protocol.ActivityRecordingAudio
		}
	}
	for _, maxPayload := range []int{5000, 64 << 10} {
		snap := protocol.Snapshot{Users: users, Activities: acts, Total: 700}
		data, listed, err := encodeSnapshotReply("r", snap, maxPayload)
		if err != nil || len(data) > maxPayload || listed < 2 {
			t.Fatalf("max %d: %d bytes, %d listed, %v", maxPayload, len(data), listed, err)
		}
		r, err := protocol.DecodeSnapshotReply(data)
		if err != nil || !slices.Equal(r.Users, users[:listed]) || r.Total != 700 {
			t.Fatalf("max %d: %d listed, total %d, %v", maxPayload, len(r.Users), r.Total, err)
		}
		if r.Activities[users[0].User] != protocol.ActivityRecordingAudio || !strings.Contains(string(data), `"ttl_ms":60000`) {
			t.Fatalf("max %d: activity or ttl_ms lost", maxPayload)
		}
		more, _ := json.Marshal(protocol.SnapshotReply{V: 1, Room: "r", Users: users[:listed+1], Activities: acts, Total: 700})
		if len(more) <= maxPayload {
			t.Fatalf("max %d: %d listed, but %d fit (%d bytes)", maxPayload, listed, listed+1, len(more))
		}
	}
}
