package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ellipsis-chat/ellipsis/examples/go/joinauthz"
)

func TestParseHide(t *testing.T) {
	got, err := ParseHide("alice=bob,carol;;dave=eve,;alice=mallory")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"alice": {"bob", "carol", "mallory"}, "dave": {"eve"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseHide: %v, want %v", got, want)
	}
	if got, err := ParseHide(""); err != nil || len(got) != 0 {
		t.Fatalf(`ParseHide(""): %v, %v; want none`, got, err)
	}
}

func TestParseHideErrors(t *testing.T) {
	for in, want := range map[string]string{
		"alice":                               `-hide "alice": no "=" between the user and the hidden users`,
		"=bob":                                `-hide "=bob": user: is required`,
		"alice=":                              `-hide "alice=": no hidden users after "="`,
		"alice=,":                             `-hide "alice=,": no hidden users after "="`,
		"alice=bob,c\x07":                     `-hide "alice": hide_typing_from[1]: control character U+0007 at byte 1`,
		"alice=" + strings.Repeat("x", 257):   `-hide "alice": hide_typing_from[0]: must be 1..256 bytes, got 257`,
		"alice=" + strings.Repeat("b,", 1001): `-hide "alice": hide_typing_from: at most 1000 user ids, got 1001`,
	} {
		_, err := ParseHide(in)
		if err == nil || err.Error() != want {
			t.Errorf("ParseHide(%.20q): %v, want %s", in, err, want)
		}
	}
	// 1000 ids, duplicates counted, are the limit and pass.
	if _, err := ParseHide("alice=" + strings.Repeat("b,", 1000)); err != nil {
		t.Errorf("1000 ids: %v", err)
	}
}

func TestPolicy(t *testing.T) {
	hide, err := ParseHide("alice=bob,carol")
	if err != nil {
		t.Fatal(err)
	}
	p := Policy(ParseAllow("alice=42;bob=42"), hide)
	for _, c := range []struct {
		user, room string
		want       joinauthz.Decision
	}{
		{"alice", "42", joinauthz.Allow("bob", "carol")},
		{"alice", "public-hall", joinauthz.Allow("bob", "carol")},
		{"alice", "7", joinauthz.Deny},
		{"bob", "42", joinauthz.Allow()},
		{"carol", "42", joinauthz.Deny},
	} {
		if got := p(c.user, c.room); got.Allow != c.want.Allow || !reflect.DeepEqual(got.HideTypingFrom, c.want.HideTypingFrom) {
			t.Errorf("%s in %s: %+v, want %+v", c.user, c.room, got, c.want)
		}
	}
}
