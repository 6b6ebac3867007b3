package protocol

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestSnapshotWithoutUser(t *testing.T) {
	got := Snapshot{Users: []Typist{{User: "a"}, {User: "b"}}, Total: 2}.WithoutUser("a")
	if len(got.Users) != 1 || got.Users[0].User != "b" || got.Total != 1 {
		t.Fatalf("%+v", got)
	}
	if got := (Snapshot{}).WithoutUser("a"); got.Users == nil || got.Total != 0 {
		t.Fatalf("%+v", got)
	}
	// Cut list without the user: Total cannot tell, so it stays.
	got = Snapshot{Users: []Typist{{User: "b"}}, Total: 150}.WithoutUser("a")
	if got.Total != 150 || !got.Cut() {
		t.Fatalf("%+v", got)
	}
	// Cut list with the user.
	got = Snapshot{Users: []Typist{{User: "a"}, {User: "b"}}, Total: 150}.WithoutUser("a")
	if got.Total != 149 || len(got.Users) != 1 {
		t.Fatalf("%+v", got)
	}
}

func TestDecodeSnapshotReplyTotal(t *testing.T) {
	r, err := DecodeSnapshotReply([]byte(`{"v":1,"room":"r","users":[{"user":"a"},{"user":"b"}]}`))
	if err != nil || r.Total != 2 {
		t.Fatalf("reply without total: %+v %v", r, err)
	}
	r, err = DecodeSnapshotReply([]byte(`{"v":1,"room":"r","users":[{"user":"a"}],"total":300}`))
	if err != nil || r.Total != 300 || !r.Snapshot().Cut() {
		t.Fatalf("cut reply: %+v %v", r, err)
	}
	if _, err := DecodeSnapshotReply([]byte(`{"v":1,"room":"r","users":[],"total":-1}`)); err == nil {
		t.Fatal("negative total accepted")
	}
}

// A reply with threads and activities: the new reader gets every scope,
// and an old reader (the fields before issue 24) still gets the room's
// own typists and total, right.
func TestSnapshotReplyScopes(t *testing.T) {
	r := SnapshotReply{V: 1, Room: "42", Users: []Typist{{User: "alice", Name: "Alice"}, {User: "bot"}}, Total: 2,
		Activities: map[string]string{"bot": ActivityThinking},
		Threads:    []ThreadSnapshot{{Thread: "t1", Users: []Typist{{User: "bob"}}, Total: 3, Activities: map[string]string{"bob": ActivityUploading}}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"room":"42","users":[{"user":"alice","name":"Alice"},{"user":"bot","activity":"thinking"}],"total":2,"threads":[{"thread":"t1","users":[{"user":"bob","activity":"uploading"}],"total":3}]}`
	if string(b) != want {
		t.Fatalf("encoded %s\nwant    %s", b, want)
	}
	got, err := DecodeSnapshotReply(b)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, r)
	}
	var old struct {
		V     int      `json:"v"`
		Room  string   `json:"room"`
		Users []Typist `json:"users"`
		Total int      `json:"total"`
	}
	if err := json.Unmarshal(b, &old); err != nil || old.Total != 2 || len(old.Users) != 2 || old.Users[1].User != "bot" {
		t.Fatalf("old reader: %+v, %v", old, err)
	}
	// The self filter applies to every scope; a thread left empty goes.
	s := got.Snapshot().WithoutUser("bob")
	if len(s.Threads) != 1 || s.Threads[0].Total != 2 || len(s.Threads[0].Users) != 0 || s.Activities["bot"] != ActivityThinking {
		t.Fatalf("without bob: %+v", s)
	}
}

func TestCommandThreadFields(t *testing.T) {
	for in, field := range map[string]string{
		`{"v":1,"op":"leave","room":"r","thread":"t","user":"u","conn":"c"}`:                                "thread",
		`{"v":1,"op":"start","room":"r","thread":"","user":"u","conn":"c","activity":"Bad"}`:                "activity",
		`{"v":1,"op":"stop","room":"r","user":"u","activity":"thinking"}`:                                   "activity",
		`{"v":1,"op":"start","room":"r","user":"u","conn":"c","ttl_ms":86400001}`:                           "ttl_ms",
		`{"v":1,"op":"stop","room":"r","user":"u","ttl_ms":1000}`:                                           "ttl_ms",
		`{"v":1,"op":"start","room":"r","thread":"` + strings.Repeat("x", 257) + `","user":"u","conn":"c"}`: "thread",
	} {
		_, err := DecodeCommand([]byte(in))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: %v, want an error on %s", in, err, field)
		}
	}
	c, err := DecodeCommand([]byte(`{"v":1,"op":"start","room":"r","thread":"t:1","user":"bot","activity":"thinking","conn":"bot-7:1","ttl_ms":60000}`))
	if err != nil || c.Thread != "t:1" || c.Activity != ActivityThinking || c.TTLMs != 60000 {
		t.Fatalf("%+v, %v", c, err)
	}
	b, _ := AppendCommand(nil, &c)
	if want, _ := json.Marshal(c); string(b) != string(want) {
		t.Fatalf("AppendCommand %s, json %s", b, want)
	}
}

// A typist's ttl_ms (a service's own ttl) survives the NATS reply, the
// self filter and every gateway frame; without it the bytes are as
// before; a negative one is refused naming the field.
func TestSnapshotTypistTTL(t *testing.T) {
	r := SnapshotReply{V: 1, Room: "42", Users: []Typist{{User: "alice"}, {User: "bot", Name: "Assistant", TTLMs: 30000}}, Total: 2,
		Activities: map[string]string{"bot": ActivityThinking},
		Threads:    []ThreadSnapshot{{Thread: "t1", Users: []Typist{{User: "alice"}, {User: "bot", TTLMs: 30000}}, Total: 2}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"room":"42","users":[{"user":"alice"},{"user":"bot","name":"Assistant","activity":"thinking","ttl_ms":30000}],"total":2,` +
		`"threads":[{"thread":"t1","users":[{"user":"alice"},{"user":"bot","ttl_ms":30000}],"total":2}]}`
	if string(b) != want {
		t.Fatalf("encoded %s\nwant    %s", b, want)
	}
	got, err := DecodeSnapshotReply(b)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, r)
	}
	s := got.Snapshot().WithoutUser("alice")
	frames := map[string]any{
		"joined":  NewJoined("42", s, "j"),
		"typing":  NewTypingSnapshot("42", s, ""),
		"summary": NewSummary("42", s),
	}
	for name, f := range frames {
		b, _ := Encode(f)
		if strings.Count(string(b), `"ttl_ms":30000`) < 1 || name != "summary" && strings.Count(string(b), `"ttl_ms":30000`) != 2 {
			t.Errorf("%s: %s, want the bot's ttl_ms in each scope", name, b)
		}
	}
	for _, bad := range []string{
		`{"v":1,"room":"42","users":[{"user":"bot","ttl_ms":-1}],"total":1}`,
		`{"v":1,"room":"42","users":[],"total":0,"threads":[{"thread":"t","users":[{"user":"bot","ttl_ms":-1}],"total":1}]}`,
	} {
		var fe *FieldError
		if _, err := DecodeSnapshotReply([]byte(bad)); !errors.As(err, &fe) || !strings.Contains(fe.Error(), "ttl_ms") {
			t.Errorf("%s: %v, want a field error naming ttl_ms", bad, err)
		}
	}
}
