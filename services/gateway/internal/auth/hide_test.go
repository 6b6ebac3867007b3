package auth

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint("u", i)
	}
	return out
}

// The hide_typing_from claim: an array of at most 1000 user ids; anything
// else is a 400 naming the claim (a signed token with a bad claim, as an
// invalid rooms entry is).
func TestHideTypingFromClaim(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	a, err := NewJWT(JWTOptions{Secret: "s", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(hide any) string {
		c := jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix()}
		if hide != nil {
			c["hide_typing_from"] = hide
		}
		return testkit.SignJWT(t, jwt.SigningMethodHS256, []byte("s"), "", c)
	}
	id, err := a.Verify(sign([]string{"bob", "carol", "bob"}))
	if err != nil || id.HideTypingFrom.Len() != 2 || !id.HideTypingFrom.Has("bob") || !id.HideTypingFrom.Has("carol") || id.HideTypingFrom.Has("alice") {
		t.Fatalf("%+v %v", id, err)
	}
	if id, err := a.Verify(sign(nil)); err != nil || id.HideTypingFrom.Len() != 0 {
		t.Fatalf("no claim: %+v %v", id, err)
	}
	if id, err := a.Verify(sign(ids(protocol.MaxHideTypingFrom))); err != nil || id.HideTypingFrom.Len() != protocol.MaxHideTypingFrom {
		t.Fatalf("1000 ids: %v", err)
	}
	for name, tc := range map[string]struct {
		hide any
		want string
	}{
		"too many":   {ids(protocol.MaxHideTypingFrom + 1), "hide_typing_from: at most 1000 user ids, got 1001"},
		"a string":   {"bob", `hide_typing_from: must be an array of user ids, got "bob"`},
		"an object":  {map[string]bool{"bob": true}, "hide_typing_from: must be an array of user ids"},
		"a number":   {[]any{"bob", 7}, "hide_typing_from[1]: must be a user id string, got 7"},
		"empty id":   {[]string{""}, "hide_typing_from[0]: is required"},
		"long id":    {[]string{strings.Repeat("x", 257)}, "hide_typing_from[0]: must be 1..256 bytes, got 257"},
		"control id": {[]string{"b\x01"}, "hide_typing_from[0]: control character U+0001"},
	} {
		_, err := a.Verify(sign(tc.hide))
		var fe *protocol.FieldError
		if !errors.As(err, &fe) || errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a 400 naming %q", name, err, tc.want)
		}
	}
}

// Development mode: ?hide_typing_from=<id>, repeated, by the same rules.
func TestNoneHideTypingFrom(t *testing.T) {
	id, err := None{}.Authenticate(httptest.NewRequest("GET", "/v1/ws?user=alice&hide_typing_from=bob&hide_typing_from=a%2Cb", nil))
	if err != nil || !id.HideTypingFrom.Has("bob") || !id.HideTypingFrom.Has("a,b") || id.HideTypingFrom.Len() != 2 {
		t.Fatalf("%+v %v", id, err)
	}
	q := url.Values{"user": {"alice"}, "hide_typing_from": ids(1001)}
	var fe *protocol.FieldError
	if _, err := (None{}).Authenticate(httptest.NewRequest("GET", "/v1/ws?"+q.Encode(), nil)); !errors.As(err, &fe) || fe.Field != "hide_typing_from" {
		t.Fatalf("1001 ids: %v", err)
	}
	if _, err := (None{}).Authenticate(httptest.NewRequest("GET", "/v1/ws?user=alice&hide_typing_from=", nil)); !errors.As(err, &fe) || fe.Field != "hide_typing_from[0]" {
		t.Fatalf("empty id: %v", err)
	}
}
