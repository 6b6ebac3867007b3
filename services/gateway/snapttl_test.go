package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// A snapshot typist's ttl_ms (a platform service's own ttl, given by the
// workers' reply) passes through every snapshot the gateway re-encodes:
// joined, typing (sync), the HTTP snapshot, summary mode's typing frames
// and a watched room's summary, in the room and in its threads, with the
// self filter applied (docs/protocol.md, "Threads and activities").
func TestSnapshotsCarryServiceTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.RoomSummaryMembers = 2
		c.RoomSummaryInterval = 100 * time.Millisecond
		c.WatchInterval = 100 * time.Millisecond
	})
	e.startWorker("")
	e.setFullSnapshot("r", protocol.Snapshot{
		Users: []protocol.Typist{{User: "alice"}, {User: "bot", Name: "Assistant", TTLMs: 30000}}, Total: 2,
		Activities: map[string]string{"bot": protocol.ActivityThinking},
		Threads: []protocol.ThreadSnapshot{
			{Thread: "t-9", Users: []protocol.Typist{{User: "alice"}, {User: "bot", TTLMs: 30000}}, Total: 2},
		},
	})
	bot := `{"user":"bot","name":"Assistant","activity":"thinking","ttl_ms":30000}`
	threads := `"threads":[{"thread":"t-9","users":[{"user":"bot","ttl_ms":30000}],"total":1}]`
	alice := e.dial("alice", "")
	alice.send(`{"type":"join","room":"r","id":"j"}`)
	if b, want := alice.readRaw(), `{"type":"joined","room":"r","typing":[`+bot+`],"total":1,`+threads+`,"id":"j"}`; string(b) != want {
		t.Fatalf("joined = %s\nwant     %s", b, want)
	}
	alice.send(`{"type":"sync","room":"r","id":"s"}`)
	if b, want := alice.readRaw(), `{"type":"typing","room":"r","users":[`+bot+`],"total":1,`+threads+`,"id":"s"}`; string(b) != want {
		t.Fatalf("typing = %s\nwant     %s", b, want)
	}
	status, body := httpGet(t, e.httpURL("/v1/rooms/r/typing?user=carol"), nil)
	b, _ := json.Marshal(body)
	if want := `{"room":"r","threads":[{"thread":"t-9","total":2,"users":[{"user":"alice"},{"ttl_ms":30000,"user":"bot"}]}],"total":2,` +
		`"users":[{"user":"alice"},{"activity":"thinking","name":"Assistant","ttl_ms":30000,"user":"bot"}]}`; status != 200 || string(b) != want {
		t.Fatalf("GET typing as carol = %d %s\nwant %s", status, b, want)
	}

	// A watcher's summary lists the bot with its ttl_ms.
	w := e.dial("watcher", "")
	w.send(`{"type":"watch","rooms":["r"],"id":"w"}`)
	w.expect(protocol.TypeWatching)
	if b, _ := json.Marshal(w.expectSummary()); !strings.Contains(string(b), `"typing":[{"user":"alice"},{"activity":"thinking","name":"Assistant","ttl_ms":30000,"user":"bot"}]`) {
		t.Fatalf("watch summary %s, want the bot with its ttl_ms", b)
	}

	// Summary mode (more than two members): the unasked typing frames
	// carry it too.
	c := e.dial("carol", "")
	c.join("r")
	e.dial("dave", "").join("r")
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "bot", Activity: "thinking", TTLMs: 30000})
	want := `{"type":"typing","room":"r","users":[{"user":"alice"},` + bot + `],"total":2,` +
		`"threads":[{"thread":"t-9","users":[{"user":"alice"},{"user":"bot","ttl_ms":30000}],"total":2}]}`
	for {
		b := c.readRaw()
		if string(b) == want {
			break
		}
		var f protocol.ServerFrame
		if err := json.Unmarshal(b, &f); err != nil || f.Type != protocol.TypeTyping && f.Type != protocol.TypeTypingStart {
			t.Fatalf("summary-mode frame %s, want %s", b, want)
		}
	}
}
