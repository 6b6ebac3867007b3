package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestClientConfigDurations(t *testing.T) {
	var c ClientConfig
	if err := json.Unmarshal([]byte(`{"ttl_ms":5000,"refresh_ms":4000,"idle_stop_ms":-1,"auth":"jwt"}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.TTL() != 5*time.Second || c.Refresh() != 4*time.Second || c.IdleStop() != 0 || c.Auth != "jwt" {
		t.Fatalf("%+v: ttl %s refresh %s idle stop %s", c, c.TTL(), c.Refresh(), c.IdleStop())
	}
	if (ClientConfig{}).TTL() != 0 {
		t.Fatal("absent ttl_ms is not 0")
	}
}

// TestServerFrameHoldsEveryServerFrame decodes each server frame type into
// ServerFrame refusing unknown fields: a field added to a frame and not to
// the union fails here.
func TestServerFrameHoldsEveryServerFrame(t *testing.T) {
	snap := Snapshot{Users: []Typist{{User: "alice", Name: "Alice"}}, Total: 2}
	start := string(RoomEventPrefix(RoomEvent{Type: TypeTypingStart, Room: "42", User: "alice", Name: "Alice", TTLMs: 5000})) + "7}"
	for _, tc := range []struct {
		frame any
		check func(f ServerFrame) bool
	}{
		{NewJoined("42", snap, "c1"), func(f ServerFrame) bool {
			return f.Type == TypeJoined && f.Room == "42" && len(f.Typing) == 1 && f.Typing[0].Name == "Alice" && f.Total == 2 && f.ID == "c1"
		}},
		{NewLeft("42", "c2"), func(f ServerFrame) bool { return f.Type == TypeLeft && f.Room == "42" && f.ID == "c2" }},
		{NewTypingSnapshot("42", snap, "c3"), func(f ServerFrame) bool {
			return f.Type == TypeTyping && len(f.Users) == 1 && f.Users[0].User == "alice" && f.Total == 2 && f.ID == "c3"
		}},
		{NewPong("c4"), func(f ServerFrame) bool { return f.Type == TypePong && f.ID == "c4" }},
		{NewWatching("w1", []string{"42"}, []Refusal{{Room: "43", Code: CodeWatchLimit, Message: "full"}}, 1), func(f ServerFrame) bool {
			return f.Type == TypeWatching && f.ID == "w1" && len(f.Rooms) == 1 && len(f.Refused) == 1 && f.Refused[0].Code == CodeWatchLimit && f.Watched == 1
		}},
		{NewUnwatched("u1", []string{"42"}, 3), func(f ServerFrame) bool {
			return f.Type == TypeUnwatched && f.Rooms[0] == "42" && f.Watched == 3
		}},
		{NewSummary("42", snap), func(f ServerFrame) bool {
			return f.Type == TypeSummary && f.Room == "42" && len(f.Typing) == 1 && f.Total == 2
		}},
		{NewError(CodeRateLimited, "slow down", "42", "c5"), func(f ServerFrame) bool {
			return f.Type == TypeError && f.Code == CodeRateLimited && f.Message == "slow down" && f.Room == "42" && f.ID == "c5"
		}},
		{json.RawMessage(start), func(f ServerFrame) bool {
			return f.V == Version && f.Type == TypeTypingStart && f.User == "alice" && f.Name == "Alice" && f.TTLMs == 5000 && f.TsMs == 7
		}},
		{RoomEvent{V: Version, Type: TypeTypingStop, Room: "42", User: "alice", Reason: ReasonExpired, TsMs: 9}, func(f ServerFrame) bool {
			return f.Type == TypeTypingStop && f.Reason == ReasonExpired && f.TsMs == 9
		}},
	} {
		b, err := Encode(tc.frame)
		if err != nil {
			t.Fatal(err)
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		var f ServerFrame
		if err := d.Decode(&f); err != nil || !tc.check(f) {
			t.Errorf("%s: decoded %+v, %v", b, f, err)
		}
	}
}
