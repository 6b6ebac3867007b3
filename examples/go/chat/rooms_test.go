package chat

import (
	"fmt"
	"testing"
)

// Rooms beyond MaxRooms drop the least recently used room without open
// streams; only when every room has open streams is a new one refused.
// Message ids never repeat, also for a room dropped and made again.
func TestRoomsAreEvictedNotExhausted(t *testing.T) {
	s := NewService(nil, "")
	first, ok := s.publish("r0", Post{User: "alice", Text: "hi"})
	if !ok {
		t.Fatal("first post refused")
	}
	for i := range MaxRooms * 2 { // GET streams that open and close
		ch, _, err := s.open(fmt.Sprintf("r%d", i+1), 0)
		if err != nil {
			t.Fatalf("stream of room %d: %v", i+1, err)
		}
		s.closeStream(fmt.Sprintf("r%d", i+1), ch)
	}
	if len(s.rooms) != MaxRooms {
		t.Fatalf("%d rooms held, want %d", len(s.rooms), MaxRooms)
	}
	if _, ok := s.rooms["r0"]; ok {
		t.Fatal("the least recently used room r0 was kept")
	}
	again, ok := s.publish("r0", Post{User: "alice", Text: "again"})
	if !ok || again.ID <= first.ID {
		t.Fatalf("post to r0 again: ok %v, id %d after %d (ids must not repeat)", ok, again.ID, first.ID)
	}

	// Every room with an open stream: a new room is refused, none dropped.
	s2 := NewService(nil, "")
	for i := range MaxRooms {
		if _, _, err := s2.open(fmt.Sprintf("r%d", i), 0); err != nil {
			t.Fatalf("stream of room %d: %v", i, err)
		}
	}
	if _, _, err := s2.open("new", 0); err == nil {
		t.Fatal("a new room was made with every room streaming")
	}
	if _, ok := s2.publish("new", Post{User: "alice", Text: "hi"}); ok || len(s2.rooms) != MaxRooms {
		t.Fatalf("post to a new room with every room streaming: ok %v, %d rooms", ok, len(s2.rooms))
	}
}
