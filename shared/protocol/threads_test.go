package protocol

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// typing_start and typing_stop take thread and activity (docs/protocol.md,
// "Threads and activities"); other frames drop them; bad values are
// bad_request naming the field, with the frame's room and id.
func TestDecodeClientFrameThreadAndActivity(t *testing.T) {
	good := map[string]ClientFrame{
		`{"type":"typing_start","room":"42","thread":"t-9","activity":"thinking","id":"a"}`: {Type: TypeTypingStart, Room: "42", Thread: "t-9", Activity: "thinking", ID: "a"},
		`{"type":"typing_stop","room":"42","thread":"café ☕"}`:                              {Type: TypeTypingStop, Room: "42", Thread: "café ☕"},
		`{"type":"typing_stop","room":"42","thread":"t","activity":"thinking"}`:             {Type: TypeTypingStop, Room: "42", Thread: "t"},
		`{"type":"join","room":"42","thread":"t","activity":"x"}`:                           {Type: TypeJoin, Room: "42"},
		`{"type":"sync","room":"42","thread":""}`:                                           {Type: TypeSync, Room: "42"},
		`{"type":"typing_start","room":"42","thread":null,"activity":null}`:                 {Type: TypeTypingStart, Room: "42"},
		`{"type":"typing_start","room":"42","activity":"custom_thing"}`:                     {Type: TypeTypingStart, Room: "42", Activity: "custom_thing"},
	}
	for in, want := range good {
		got, err := DecodeClientFrame([]byte(in))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeClientFrame(%s) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		`{"type":"typing_start","room":"42","thread":"","id":"b"}`:                         "thread: must be 1..256 bytes, got 0",
		`{"type":"typing_start","room":"42","thread":"` + strings.Repeat("t", 257) + `"}`:  "thread: must be 1..256 bytes, got 257",
		`{"type":"typing_stop","room":"42","thread":"a\u0001"}`:                            "thread: control character",
		`{"type":"typing_start","room":"42","thread":7}`:                                   "thread: must be a string",
		`{"type":"typing_start","room":"42","activity":"Typing"}`:                          "activity: must be 1..32 bytes of a-z and _",
		`{"type":"typing_start","room":"42","activity":""}`:                                "activity: must be 1..32 bytes",
		`{"type":"typing_start","room":"42","activity":"` + strings.Repeat("a", 33) + `"}`: "activity: must be 1..32 bytes",
	}
	for in, msg := range bad {
		_, err := DecodeClientFrame([]byte(in))
		var fe *FrameError
		if !errors.As(err, &fe) || fe.Code != CodeBadRequest || !strings.Contains(fe.Message, msg) {
			t.Errorf("DecodeClientFrame(%s) = %v; want bad_request %q", in, err, msg)
			continue
		}
		if !strings.Contains(in, `"thread":7`) && fe.Room != "42" {
			t.Errorf("DecodeClientFrame(%s): room %q not echoed", in, fe.Room)
		}
	}
}

// The gateway's snapshot frames list the room scope as before, each
// typist with its activity, and threads only when one has a typist; a
// snapshot without threads and activities encodes exactly as before.
func TestSnapshotFramesCarryThreadsAndActivities(t *testing.T) {
	plain := Snapshot{Users: []Typist{{User: "alice", Name: "Alice"}}, Total: 1}
	b, _ := Encode(NewJoined("42", plain, "c1"))
	if want := `{"type":"joined","room":"42","typing":[{"user":"alice","name":"Alice"}],"total":1,"id":"c1"}`; string(b) != want {
		t.Fatalf("joined without threads = %s, want %s", b, want)
	}
	b, _ = Encode(NewTypingSnapshot("42", Snapshot{}, ""))
	if want := `{"type":"typing","room":"42","users":[],"total":0}`; string(b) != want {
		t.Fatalf("empty typing = %s, want %s", b, want)
	}
	s := Snapshot{
		Users: []Typist{{User: "alice"}, {User: "bot", Name: "Assistant"}}, Total: 2,
		Activities: map[string]string{"bot": ActivityThinking},
		Threads: []ThreadSnapshot{
			{Thread: "t-1", Users: []Typist{{User: "bob"}}, Total: 3, Activities: map[string]string{"bob": ActivityUploading}},
			{Thread: "t-2", Users: []Typist{}, Total: 0},
		},
	}
	b, _ = Encode(NewTypingSnapshot("42", s, "s1"))
	want := `{"type":"typing","room":"42","users":[{"user":"alice"},{"user":"bot","name":"Assistant","activity":"thinking"}],"total":2,` +
		`"threads":[{"thread":"t-1","users":[{"user":"bob","activity":"uploading"}],"total":3}],"id":"s1"}`
	if string(b) != want {
		t.Fatalf("typing = %s\nwant     %s", b, want)
	}
	if s.Users[1].Activity != "" {
		t.Fatal("the snapshot's shared list was changed")
	}
	var sf ServerFrame
	if err := json.Unmarshal(b, &sf); err != nil || len(sf.Threads) != 1 || sf.Threads[0].Users[0].Activity != ActivityUploading || sf.Users[1].Activity != ActivityThinking {
		t.Fatalf("ServerFrame of %s = %+v, %v", b, sf, err)
	}
	sum, _ := Encode(NewSummary("42", s))
	if want := `{"type":"summary","room":"42","typing":[{"user":"alice"},{"user":"bot","name":"Assistant","activity":"thinking"}],"total":2}`; string(sum) != want {
		t.Fatalf("summary = %s, want %s", sum, want)
	}
}
