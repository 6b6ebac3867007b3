package protocol

import "testing"

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
