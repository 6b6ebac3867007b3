package roomevents_test

import (
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/examples/go/internal/stacktest"
	"github.com/ellipsis-chat/ellipsis/examples/go/roomevents"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

func TestToken(t *testing.T) {
	for room, want := range map[string]string{
		"42":      "42",
		"room:42": "room%3A42",
		"a.b":     "a%2Eb",
		"a*b>c":   "a%2Ab%3Ec",
		"a b":     "a%20b",
		"50%":     "50%25",
		"café ☕":  "caf%C3%A9%20%E2%98%95",
		"A-z_09":  "A-z_09",
		"{x}":     "%7Bx%7D",
		"..":      "%2E%2E",
	} {
		if got := roomevents.Token(room); got != want {
			t.Errorf("Token(%q) = %q, want %q", room, got, want)
		}
		if back, ok := names.New("", "").RoomFromEventSubject(roomevents.RoomSubject("", room)); !ok || back != room {
			t.Errorf("RoomSubject(%q) does not invert: %q %v", room, back, ok)
		}
	}
	if got := roomevents.RoomSubject("", "room:42"); got != "ellipsis.typing.v1.room.room%3A42" {
		t.Errorf("RoomSubject = %q", got)
	}
	if got := roomevents.AllRoomsSubject("acme"); got != "acme.typing.v1.room.>" {
		t.Errorf("AllRoomsSubject = %q", got)
	}
}

// TestFollow: with ELLIPSIS_NATS_EVENTS=true on the worker, a follower of
// the room's subject and one of every room see alice start and stop, with
// the fields of the Redis event.
func TestFollow(t *testing.T) {
	st := stacktest.Start(t, map[string]string{"ELLIPSIS_NATS_EVENTS": "true"})
	room := "room:42 ☕"
	one := make(chan protocol.RoomEvent, 16)
	all := make(chan protocol.RoomEvent, 16)
	for subject, ch := range map[string]chan protocol.RoomEvent{
		roomevents.RoomSubject(st.Prefix, room): one,
		roomevents.AllRoomsSubject(st.Prefix):   all,
	} {
		sub, err := roomevents.Follow(st.NC, subject, func(ev protocol.RoomEvent) { ch <- ev },
			func(data []byte, err error) { t.Errorf("bad event %s: %v", data, err) })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := st.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	alice := st.Dial(t, "alice")
	alice.Join(room)
	alice.Send(map[string]any{"type": "typing_start", "room": room})
	alice.Send(map[string]any{"type": "typing_stop", "room": room})
	for name, ch := range map[string]chan protocol.RoomEvent{"room": one, "all rooms": all} {
		for _, want := range []string{protocol.TypeTypingStart, protocol.TypeTypingStop} {
			select {
			case ev := <-ch:
				if ev.Type != want || ev.Room != room || ev.User != "alice" || ev.TsMs == 0 {
					t.Fatalf("%s follower: %+v, want %s of alice in %q", name, ev, want, room)
				}
				if want == protocol.TypeTypingStart && (ev.Name != "Alice" || ev.TTLMs <= 0) {
					t.Fatalf("%s follower: start %+v without name or ttl_ms", name, ev)
				}
				if want == protocol.TypeTypingStop && ev.Reason != "stopped" {
					t.Fatalf("%s follower: stop reason %q", name, ev.Reason)
				}
			case <-time.After(stacktest.Wait):
				t.Fatalf("%s follower: no %s within %s (does the worker publish room events on NATS? ELLIPSIS_NATS_EVENTS)", name, want, stacktest.Wait)
			}
		}
	}
}
