package protocol

import (
	"fmt"
	"strings"
	"testing"
)

func TestDecodeUserIDs(t *testing.T) {
	many := func(n int) string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("%q", fmt.Sprint("u", i))
		}
		return "[" + strings.Join(ids, ",") + "]"
	}
	for _, c := range []struct {
		raw, want string // want: the ids joined by "|", or the error
		n         int
	}{
		{raw: ``, want: ""},
		{raw: `null`, want: ""},
		{raw: `[]`, want: ""},
		{raw: `["bob","café ☕","bob"]`, want: "bob|café ☕|bob"},
		{raw: many(1000), n: 1000},
		{raw: many(1001), want: "hide_typing_from: at most 1000 user ids, got 1001"},
		{raw: `"bob"`, want: `hide_typing_from: must be an array of user ids, got "bob"`},
		{raw: `{"bob":true}`, want: `hide_typing_from: must be an array of user ids, got {"bob":true}`},
		{raw: `["a",7]`, want: `hide_typing_from[1]: must be a user id string, got 7`},
		{raw: `["a",""]`, want: `hide_typing_from[1]: is required`},
		{raw: `["` + strings.Repeat("x", 257) + `"]`, want: `hide_typing_from[0]: must be 1..256 bytes, got 257`},
		{raw: `["a\u0007"]`, want: `hide_typing_from[0]: control character U+0007 at byte 1`},
	} {
		ids, err := DecodeUserIDs(HideTypingFrom, []byte(c.raw))
		got := strings.Join(ids, "|")
		if err != nil {
			got = err.Error()
		}
		if c.n > 0 {
			if err != nil || len(ids) != c.n {
				t.Errorf("%d ids: got %d, %v", c.n, len(ids), err)
			}
			continue
		}
		if got != c.want {
			t.Errorf("DecodeUserIDs(%.40s) = %q, want %q", c.raw, got, c.want)
		}
	}
	if err := ValidateUserIDs(HideTypingFrom, make([]string, 1001)); err == nil || !strings.Contains(err.Error(), "at most 1000") {
		t.Errorf("1001 ids: %v", err)
	}
	if err := ValidateUserIDs(HideTypingFrom, []string{"a", ""}); err == nil || err.Error() != "hide_typing_from[1]: is required" {
		t.Errorf("empty id: %v", err)
	}
}

func TestJoinTypingOption(t *testing.T) {
	for _, c := range []struct {
		frame string
		want  string // "on", "off", "unset" or the error
	}{
		{`{"type":"join","room":"r"}`, "unset"},
		{`{"type":"join","room":"r","typing":null}`, "unset"},
		{`{"type":"join","room":"r","typing":true}`, "on"},
		{`{"type":"join","room":"r","typing": false ,"id":"j"}`, "off"},
		{`{"type":"join","room":"r","typing":"false","id":"j"}`, `bad_request: typing: must be a boolean (true or false), got "false"`},
		{`{"type":"join","room":"r","typing":0}`, `bad_request: typing: must be a boolean (true or false), got 0`},
		// Not a join: ignored, as any unknown field was before.
		{`{"type":"sync","room":"r","typing":"x"}`, "unset"},
		{`{"type":"leave","room":"r","typing":false}`, "unset"},
	} {
		f, err := DecodeClientFrame([]byte(c.frame))
		got := "unset"
		switch {
		case err != nil:
			got = err.Error()
			if fe := err.(*FrameError); strings.Contains(c.frame, `"id":"j"`) && (fe.ID != "j" || fe.Room != "r") {
				t.Errorf("%s: error %+v does not echo room and id", c.frame, fe)
			}
		case f.Typing != nil && *f.Typing:
			got = "on"
		case f.TypingOff():
			got = "off"
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.frame, got, c.want)
		}
	}
}

func TestSnapshotWithout(t *testing.T) {
	s := Snapshot{
		Users: []Typist{{User: "a"}, {User: "b"}, {User: "c"}}, Total: 7,
		Threads: []ThreadSnapshot{
			{Thread: "t1", Users: []Typist{{User: "b"}}, Total: 1},
			{Thread: "t2", Users: []Typist{{User: "b"}, {User: "d"}}, Total: 4},
		},
	}
	got := s.Without(func(u string) bool { return u == "b" || u == "z" })
	if len(got.Users) != 2 || got.Users[0].User != "a" || got.Users[1].User != "c" || got.Total != 6 {
		t.Errorf("room scope: %+v", got)
	}
	// t1 had only b: gone; t2 keeps d, its total drops by the listed b.
	if len(got.Threads) != 1 || got.Threads[0].Thread != "t2" || got.Threads[0].Total != 3 || len(got.Threads[0].Users) != 1 {
		t.Errorf("threads: %+v", got.Threads)
	}
	if e := (Snapshot{}).Without(func(string) bool { return true }); e.Users == nil || e.Total != 0 {
		t.Errorf("empty: %+v", e)
	}
}
