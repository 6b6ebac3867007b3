package protocol

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

var contractIDs = []string{"42", "room:42", "!abc:matrix.org", "a*b?c[d]", "{x}", "café ☕", "a b"}

func TestValidateID(t *testing.T) {
	for _, id := range contractIDs {
		if err := ValidateID("room", id); err != nil {
			t.Errorf("ValidateID(%q) = %v", id, err)
		}
	}
	bad := map[string]string{
		"":                       "room: is required",
		strings.Repeat("x", 257): "room: must be 1..256 bytes, got 257",
		"a\x00b":                 "room: control character U+0000 at byte 1",
		"a\nb":                   "room: control character U+000A at byte 1",
		"a\x7fb":                 "room: control character U+007F at byte 1",
		"a\u0085b":               "room: control character U+0085 at byte 1",
		"a\xffb":                 "room: invalid UTF-8 at byte 1",
	}
	for id, want := range bad {
		err := ValidateID("room", id)
		var fe *FieldError
		if !errors.As(err, &fe) || err.Error() != want {
			t.Errorf("ValidateID(%q) = %v, want %q", id, err, want)
		}
	}
	if err := ValidateID("room", strings.Repeat("é", 128)); err != nil {
		t.Errorf("256-byte id rejected: %v", err)
	}
	if err := ValidateID("room", "\uFFFD"); err != nil {
		t.Errorf("a literal U+FFFD is valid UTF-8 and must pass: %v", err)
	}
}

func TestDecodeClientFrame(t *testing.T) {
	good := map[string]ClientFrame{
		`{"type":"join","room":"42","id":"c1"}`:                {Type: TypeJoin, Room: "42", ID: "c1"},
		`{"type":"typing_start","room":"café ☕"}`:              {Type: TypeTypingStart, Room: "café ☕"},
		`{"type":"typing_stop","room":"{x}","user":"mallory"}`: {Type: TypeTypingStop, Room: "{x}"},
		`{"type":"ping","id":"c4","room":"ignored"}`:           {Type: TypePing, ID: "c4"},
		`{"type":"sync","room":"42","extra":{"a":[1]}}`:        {Type: TypeSync, Room: "42"},
		`{"type":"join","room":"42","rooms":["43"]}`:           {Type: TypeJoin, Room: "42"},
		`{"type":"watch","rooms":["42","43","42"],"id":"w1"}`:  {Type: TypeWatch, Rooms: []string{"42", "43", "42"}, ID: "w1"},
		// Invalid ids are refused one by one in "watching", not here.
		`{"type":"watch","rooms":[""],"room":"x"}`:    {Type: TypeWatch, Rooms: []string{""}},
		`{"type":"unwatch","rooms":["42"],"id":"u1"}`: {Type: TypeUnwatch, Rooms: []string{"42"}, ID: "u1"},
		`{"type":"unwatch","id":"u2"}`:                {Type: TypeUnwatch, ID: "u2"},
		`{"type":"unwatch","rooms":null}`:             {Type: TypeUnwatch},
	}
	for in, want := range good {
		got, err := DecodeClientFrame([]byte(in))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeClientFrame(%s) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		`not json`:                              CodeBadRequest,
		`{"type":"join"}`:                       CodeBadRequest,
		`{"room":"42"}`:                         CodeBadRequest,
		`{"type":"join","room":"a\u0000"}`:      CodeBadRequest,
		`{"type":"join","room":42}`:             CodeBadRequest,
		`{"type":"dance","room":"42","id":"x"}`: CodeUnknownType,
		`{"type":"ping","id":"` + strings.Repeat("i", 200) + `"}`: CodeBadRequest,
		`{"type":"watch"}`:                           CodeBadRequest,
		`{"type":"watch","rooms":[]}`:                CodeBadRequest,
		`{"type":"watch","rooms":null}`:              CodeBadRequest,
		`{"type":"watch","rooms":"42"}`:              CodeBadRequest,
		`{"type":"watch","rooms":[42]}`:              CodeBadRequest,
		`{"type":"watch","rooms":[["x"]]}`:           CodeBadRequest,
		`{"type":"unwatch","rooms":[]}`:              CodeBadRequest,
		`{"type":"unwatch","rooms":{}}`:              CodeBadRequest,
		`{"type":"unwatch","room":"42"}`:             CodeBadRequest,
		`{"type":"unwatch","rooms":[""]}`:            CodeBadRequest,
		`{"type":"unwatch","rooms":["a","b\u0000"]}`: CodeBadRequest,
	}
	for in, code := range bad {
		_, err := DecodeClientFrame([]byte(in))
		var fe *FrameError
		if !errors.As(err, &fe) || fe.Code != code {
			t.Errorf("DecodeClientFrame(%s) = %v, want code %s", in, err, code)
		}
	}
	for _, in := range []string{`{"type":"watch","id":"w"}`, `{"type":"watch","rooms":[1],"id":"w"}`, `{"type":"watch","rooms":"x","id":"w"}`, `{"type":"unwatch","rooms":[],"id":"w"}`} {
		_, err := DecodeClientFrame([]byte(in))
		var fe *FrameError
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.Message, "rooms: ") || fe.ID != "w" {
			t.Errorf("DecodeClientFrame(%s) = %+v, want an error naming rooms with the id", in, err)
		}
	}
	_, err := DecodeClientFrame([]byte(`{"type":"dance","id":"x"}`))
	var fe *FrameError
	if errors.As(err, &fe) && fe.ID != "x" {
		t.Errorf("unknown_type error does not echo the id: %+v", fe)
	}
}

func TestServerFramesMatchContract(t *testing.T) {
	cases := []struct {
		v    any
		want string
	}{
		{NewJoined("42", Snapshot{Users: []Typist{{User: "alice", Name: "Alice"}}, Total: 1}, "c1"), `{"type":"joined","room":"42","typing":[{"user":"alice","name":"Alice"}],"total":1,"id":"c1"}`},
		{NewJoined("42", Snapshot{}, ""), `{"type":"joined","room":"42","typing":[],"total":0}`},
		{NewLeft("42", "c2"), `{"type":"left","room":"42","id":"c2"}`},
		{NewTypingSnapshot("42", Snapshot{Users: []Typist{{User: "bob"}}, Total: 1}, "c3"), `{"type":"typing","room":"42","users":[{"user":"bob"}],"total":1,"id":"c3"}`},
		{NewTypingSnapshot("42", Snapshot{}, ""), `{"type":"typing","room":"42","users":[],"total":0}`},
		{NewPong("c4"), `{"type":"pong","id":"c4"}`},
		{NewError(CodeNotJoined, "join room 42 first", "42", "c3"), `{"type":"error","code":"not_joined","message":"join room 42 first","room":"42","id":"c3"}`},
		{NewWatching("w1", []string{"42"}, []Refusal{{Room: "43", Code: CodeForbidden, Message: "no"}}, 1), `{"type":"watching","id":"w1","rooms":["42"],"refused":[{"room":"43","code":"forbidden","message":"no"}],"watched":1}`},
		{NewWatching("", nil, nil, 0), `{"type":"watching","rooms":[],"refused":[],"watched":0}`},
		{NewUnwatched("u1", []string{"42"}, 0), `{"type":"unwatched","id":"u1","rooms":["42"],"watched":0}`},
		{NewUnwatched("", nil, 2), `{"type":"unwatched","rooms":[],"watched":2}`},
		{NewSummary("42", Snapshot{Users: []Typist{{User: "alice", Name: "Alice"}}, Total: 1}), `{"type":"summary","room":"42","typing":[{"user":"alice","name":"Alice"}],"total":1}`},
		{NewSummary("42", Snapshot{}), `{"type":"summary","room":"42","typing":[],"total":0}`},
		{NewSummary("42", Snapshot{Users: []Typist{{User: "a"}, {User: "b"}, {User: "c"}, {User: "d"}}, Total: 9}), `{"type":"summary","room":"42","typing":[{"user":"a"},{"user":"b"},{"user":"c"}],"total":9}`},
	}
	for _, c := range cases {
		b, err := Encode(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("Encode(%T) = %s, %v; want %s", c.v, b, err, c.want)
		}
	}
}

func TestRoomEventPrefix(t *testing.T) {
	p := RoomEventPrefix(RoomEvent{Type: TypeTypingStart, Room: "42", User: "alice", Name: "Alice", TTLMs: 5000})
	full := string(p) + "1764480000000}"
	want := `{"v":1,"type":"typing_start","room":"42","user":"alice","name":"Alice","ttl_ms":5000,"ts_ms":1764480000000}`
	if full != want {
		t.Fatalf("prefix+ts = %s, want %s", full, want)
	}
	ev, err := DecodeRoomEvent([]byte(full))
	if err != nil || ev.User != "alice" || ev.TsMs != 1764480000000 || ev.TTLMs != 5000 {
		t.Fatalf("DecodeRoomEvent = %+v, %v", ev, err)
	}
	stop := string(RoomEventPrefix(RoomEvent{Type: TypeTypingStop, Room: "a\"b", User: "ü", Reason: ReasonExpired})) + "7}"
	ev, err = DecodeRoomEvent([]byte(stop))
	if err != nil || ev.Room != "a\"b" || ev.Reason != ReasonExpired {
		t.Fatalf("DecodeRoomEvent(%s) = %+v, %v", stop, ev, err)
	}
	for _, bad := range []string{`{"v":2,"type":"typing_stop","room":"1","user":"u"}`, `{"v":1,"type":"joined","room":"1","user":"u"}`, `{"v":1,"type":"typing_stop","room":"","user":"u"}`} {
		if _, err := DecodeRoomEvent([]byte(bad)); err == nil {
			t.Errorf("DecodeRoomEvent(%s) accepted", bad)
		}
	}
}

func TestDecodeCommand(t *testing.T) {
	good := []string{
		`{"v":1,"op":"start","room":"42","user":"alice","name":"Alice","conn":"gw-a1b2:17","seq":42,"ts_ms":1764480000000}`,
		`{"v":1,"op":"stop","room":"42","user":"alice"}`,
		`{"v":1,"op":"leave","room":"42","user":"alice","conn":"c","seq":3}`,
		`{"v":1,"op":"disconnect","rooms":["42","{x}"],"user":"alice","conn":"gw:1","seq":9}`,
	}
	for _, in := range good {
		if _, err := DecodeCommand([]byte(in)); err != nil {
			t.Errorf("DecodeCommand(%s) = %v", in, err)
		}
	}
	many := make([]string, MaxRoomsPerCommand+1)
	for i := range many {
		many[i] = "r"
	}
	huge, _ := json.Marshal(Command{V: 1, Op: OpDisconnect, User: "u", Conn: "c", Rooms: many})
	bad := map[string]string{
		`garbage`: "json",
		`{"v":2,"op":"stop","room":"42","user":"a"}`:                                "v",
		`{"v":1,"op":"start","room":"42","user":"a"}`:                               "conn",
		`{"v":1,"op":"start","room":"42","conn":"c"}`:                               "user",
		`{"v":1,"op":"explode","room":"42","user":"a"}`:                             "op",
		`{"v":1,"room":"42","user":"a"}`:                                            "op",
		`{"v":1,"op":"stop","user":"a"}`:                                            "room",
		`{"v":1,"op":"disconnect","user":"a","conn":"c"}`:                           "rooms",
		`{"v":1,"op":"disconnect","user":"a","conn":"c","rooms":["ok",""]}`:         "rooms[1]",
		`{"v":1,"op":"disconnect","room":"x","user":"a","conn":"c","rooms":["ok"]}`: "room",
		`{"v":1,"op":"stop","room":"42","user":"a","seq":-1}`:                       "seq",
		string(huge): "rooms",
	}
	for in, field := range bad {
		_, err := DecodeCommand([]byte(in))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			name := in
			if len(name) > 80 {
				name = name[:80]
			}
			t.Errorf("DecodeCommand(%s) = %v, want field %q", name, err, field)
		}
	}
}

func TestSnapshotMessages(t *testing.T) {
	r, err := DecodeSnapshotRequest([]byte(`{"v":1,"room":"42"}`))
	if err != nil || r.Room != "42" {
		t.Fatalf("DecodeSnapshotRequest = %+v, %v", r, err)
	}
	if _, err := DecodeSnapshotRequest([]byte(`{"v":1,"room":""}`)); err == nil {
		t.Fatal("empty room accepted")
	}
	b, _ := json.Marshal(SnapshotReply{V: 1, Room: "42"})
	if string(b) != `{"v":1,"room":"42","users":[],"total":0}` {
		t.Fatalf("empty reply = %s", b)
	}
	b, _ = json.Marshal(SnapshotReply{V: 1, Error: &ReplyError{Code: "unavailable", Message: "redis down"}})
	if string(b) != `{"v":1,"error":{"code":"unavailable","message":"redis down"}}` {
		t.Fatalf("error reply = %s", b)
	}
	_, err = DecodeSnapshotReply(b)
	var re *ReplyError
	if !errors.As(err, &re) || re.Code != "unavailable" {
		t.Fatalf("DecodeSnapshotReply(error) = %v", err)
	}
}

func TestWrongJSONTypesNameTheField(t *testing.T) {
	_, err := DecodeClientFrame([]byte(`{"type":"ping","id":5}`))
	var fe *FrameError
	if !errors.As(err, &fe) || fe.Code != CodeBadRequest || fe.Message != "id: must be a string, got number" {
		t.Fatalf("got %v", err)
	}
	_, err = DecodeClientFrame([]byte(`{"type":"join","room":42,"id":"c1"}`))
	if !errors.As(err, &fe) || fe.Message != "room: must be a string, got number" || fe.ID != "c1" {
		t.Fatalf("got %+v", fe)
	}
	_, err = DecodeCommand([]byte(`{"v":1,"op":"stop","room":"r","user":"u","seq":-1}`))
	if err == nil || err.Error() != "seq: must be a whole number >= 0, got number -1" {
		t.Fatalf("got %v", err)
	}
	_, err = DecodeCommand([]byte(`{"v":1,"op":"disconnect","rooms":"r","user":"u","conn":"c"}`))
	if err == nil || err.Error() != "rooms: must be an array of strings, got string" {
		t.Fatalf("got %v", err)
	}
}
