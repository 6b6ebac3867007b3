package gateway_test

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Summary mode end to end, on a real Redis and NATS (docs/protocol.md,
// "Summary mode"): threshold 3, so a room of 4 clients gets coalesced
// typing frames instead of events, and goes back to events at 2.
func TestSummaryModeEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.RoomSummaryMembers = 3
		c.RoomSummaryInterval = 200 * time.Millisecond
	})
	e.startWorker("")
	e.setSnapshot("big")
	cs := make([]*client, 4)
	for i := range cs {
		cs[i] = e.dial("u"+string(rune('a'+i)), "")
		cs[i].join("big")
	}
	state := func(users ...string) {
		list := make([]protocol.Typist, len(users))
		for i, u := range users {
			list[i] = protocol.Typist{User: u}
		}
		e.setSnapshot("big", list...)
	}
	// The worker's state and events: x, y and z start, y stops.
	state("x")
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "big", User: "x", TTLMs: 5000})
	state("x", "y")
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "big", User: "y", TTLMs: 5000})
	state("x", "y", "z")
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "big", User: "z", TTLMs: 5000})
	state("x", "z")
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: "big", User: "y", Reason: protocol.ReasonStopped})
	for _, c := range cs {
		// Summaries only, no event; the last one (state settled) is exact.
		var last []string
		for strings.Join(last, ",") != "x,z" {
			f := c.expect(protocol.TypeTyping)
			last = typistsOf(f)
		}
	}

	// Two leave: 2 < 3 (90 % of 3 rounds to 3). One last summary, then
	// events again.
	cs[2].send(map[string]string{"type": "leave", "room": "big", "id": "l"})
	cs[2].expect(protocol.TypeLeft)
	cs[3].send(map[string]string{"type": "leave", "room": "big", "id": "l"})
	cs[3].expect(protocol.TypeLeft)
	state("z")
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: "big", User: "x", Reason: protocol.ReasonStopped})
	for _, c := range cs[:2] {
		var last []string
		for strings.Join(last, ",") != "z" {
			last = typistsOf(c.expect(protocol.TypeTyping))
		}
	}
	ev := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "big", User: "w", TTLMs: 5000})
	for _, c := range cs[:2] {
		if got := string(c.readRaw()); got != ev {
			t.Fatalf("after leaving summary mode: got %s, want the event %s", got, ev)
		}
	}
	if n := e.metric("ellipsis_gateway_summary_rooms"); n != 0 {
		t.Fatalf("summary_rooms %v after leaving", n)
	}
	if n := e.metric("ellipsis_gateway_room_summaries_total"); n < 1 {
		t.Fatalf("room_summaries_total %v", n)
	}
}

func typistsOf(f frame) []string {
	var out []string
	users, _ := f["users"].([]any)
	for _, u := range users {
		m, _ := u.(map[string]any)
		s, _ := m["user"].(string)
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
