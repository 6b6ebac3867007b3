package filter

import (
	"testing"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

func TestNilViewCostsNothing(t *testing.T) {
	if v := New(Set{}, NewSet(nil), true); v != nil {
		t.Fatalf("no hide list, typing on: %+v, want nil", v)
	}
	var v *View
	if v.Off() || v.Hides("a") || v.Hiding() {
		t.Fatal("a nil view filters")
	}
	s := protocol.Snapshot{Users: []protocol.Typist{{User: "a"}}, Total: 1}
	if got, changed := v.Snapshot(s); changed || len(got.Users) != 1 {
		t.Fatalf("nil view changed the snapshot: %+v", got)
	}
}

func TestViewUnionAndOff(t *testing.T) {
	v := New(NewSet([]string{"bob", "bob"}), NewSet([]string{"carol"}), true)
	if !v.Hides("bob") || !v.Hides("carol") || v.Hides("dave") || v.Off() {
		t.Fatalf("union: %+v", v)
	}
	if !v.Drops("carol") || v.Drops("dave") {
		t.Fatal("Drops")
	}
	off := New(Set{}, Set{}, false)
	if off == nil || !off.Off() || !off.Drops("anyone") || off.Hiding() {
		t.Fatalf("typing:false: %+v", off)
	}
}

func TestViewSnapshot(t *testing.T) {
	v := New(NewSet([]string{"bob"}), NewSet([]string{"carol"}), true)
	s := protocol.Snapshot{
		Users: []protocol.Typist{{User: "alice"}, {User: "bob"}}, Total: 5,
		Threads: []protocol.ThreadSnapshot{{Thread: "t", Users: []protocol.Typist{{User: "carol"}}, Total: 1}},
	}
	got, changed := v.Snapshot(s)
	if !changed || len(got.Users) != 1 || got.Users[0].User != "alice" || got.Total != 4 || len(got.Threads) != 0 {
		t.Fatalf("filtered: %+v", got)
	}
	// Nobody hidden is listed: the same snapshot, unchanged (hidden users
	// beyond the cut may be counted in Total).
	s2 := protocol.Snapshot{Users: []protocol.Typist{{User: "alice"}}, Total: 9}
	if got, changed := v.Snapshot(s2); changed || got.Total != 9 {
		t.Fatalf("unlisted: %+v %v", got, changed)
	}
	// A hidden user listed only in a thread changes it too.
	s3 := protocol.Snapshot{Users: []protocol.Typist{}, Threads: []protocol.ThreadSnapshot{{Thread: "t", Users: []protocol.Typist{{User: "bob"}, {User: "x"}}, Total: 2}}}
	if got, changed := v.Snapshot(s3); !changed || len(got.Threads) != 1 || got.Threads[0].Total != 1 {
		t.Fatalf("thread: %+v", got)
	}
}
