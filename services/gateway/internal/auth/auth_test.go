package auth

import (
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

func TestNone(t *testing.T) {
	id, err := None{}.Authenticate(httptest.NewRequest("GET", "/v1/ws?user=alice&name=Alice", nil))
	if err != nil || id.User != "alice" || id.Name != "Alice" || !id.ShareTyping || !id.Expires.IsZero() {
		t.Fatalf("%+v %v", id, err)
	}
	if _, err := (None{}).Authenticate(httptest.NewRequest("GET", "/v1/ws", nil)); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("no user: %v", err)
	}
	var fe *protocol.FieldError
	if _, err := (None{}).Authenticate(httptest.NewRequest("GET", "/v1/ws?user=", nil)); !errors.As(err, &fe) {
		t.Fatalf("empty user: %v", err)
	}
}

func TestHS256(t *testing.T) {
	a, err := NewHS256("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tok := sign(jwt.SigningMethodHS256, []byte("s3cret"), jwt.MapClaims{"sub": "bob", "name": "Bob", "share_typing": false, "exp": exp.Unix()})
	r := httptest.NewRequest("GET", "/v1/ws", nil)
	r.Header.Set("Authorization", "bearer "+tok)
	id, err := a.Authenticate(r)
	if err != nil || id.User != "bob" || id.Name != "Bob" || id.ShareTyping || !id.Expires.Equal(exp) {
		t.Fatalf("%+v %v", id, err)
	}
	// Another HMAC alg with the same secret is refused, as is alg none.
	hs512 := sign(jwt.SigningMethodHS512, []byte("s3cret"), jwt.MapClaims{"sub": "bob", "exp": exp.Unix()})
	none := sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "bob", "exp": exp.Unix()})
	for _, bad := range []string{hs512, none} {
		if _, err := a.Verify(bad); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("accepted %s: %v", bad, err)
		}
	}
	if _, err := NewHS256(""); err == nil {
		t.Fatal("empty secret accepted")
	}
}

func TestJWTClaimChecks(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	a, err := NewJWT(JWTOptions{Secret: "s", Issuer: "https://id.test", Audience: []string{"ellipsis", "chat"}, Leeway: 5 * time.Second,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	claims := func(extra jwt.MapClaims) jwt.MapClaims {
		return testkit.Claims(jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix(), "iss": "https://id.test", "aud": "chat"}, extra)
	}
	sign := func(c jwt.MapClaims) string { return testkit.SignJWT(t, jwt.SigningMethodHS256, []byte("s"), "", c) }

	id, err := a.Verify(sign(claims(jwt.MapClaims{"rooms": []string{"42", "team/*"}})))
	if err != nil || !slices.Equal(id.Rooms, []string{"42", "team/*"}) || !id.Expires.Equal(now.Add(time.Hour+5*time.Second)) {
		t.Fatalf("%+v %v", id, err)
	}
	// Within the leeway: an exp 3 s ago and an nbf 3 s ahead still pass.
	if _, err := a.Verify(sign(claims(jwt.MapClaims{"exp": now.Add(-3 * time.Second).Unix(), "nbf": now.Add(3 * time.Second).Unix()}))); err != nil {
		t.Fatalf("leeway: %v", err)
	}
	if _, err := a.Verify(sign(claims(jwt.MapClaims{"aud": []string{"other", "ellipsis"}}))); err != nil {
		t.Fatalf("one of several audiences: %v", err)
	}
	for name, tc := range map[string]struct {
		c    jwt.MapClaims
		want string
	}{
		"expired":     {claims(jwt.MapClaims{"exp": now.Add(-6 * time.Second).Unix()}), "expired"},
		"nbf":         {claims(jwt.MapClaims{"nbf": now.Add(6 * time.Second).Unix()}), "nbf"},
		"no exp":      {claims(jwt.MapClaims{"exp": nil}), "no exp"},
		"no iss":      {claims(jwt.MapClaims{"iss": nil}), "no iss"},
		"wrong iss":   {claims(jwt.MapClaims{"iss": "https://evil.test"}), `issuer "https://evil.test"`},
		"no aud":      {claims(jwt.MapClaims{"aud": nil}), "no aud"},
		"wrong aud":   {claims(jwt.MapClaims{"aud": "other"}), "audience"},
		"no sub":      {claims(jwt.MapClaims{"sub": nil}), "no sub"},
		"rooms type":  {claims(jwt.MapClaims{"rooms": "42"}), "malformed"},
		"share type":  {claims(jwt.MapClaims{"share_typing": "no"}), "malformed"},
		"exp as text": {claims(jwt.MapClaims{"exp": "tomorrow"}), "malformed"},
	} {
		_, err := a.Verify(sign(tc.c))
		if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 401 naming %q", name, err, tc.want)
		}
	}
	if _, err := a.Verify(strings.Repeat("x", MaxTokenBytes+1)); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("long token: %v", err)
	}
	// Valid credentials with an invalid rooms entry or sub: a FieldError (400).
	var fe *protocol.FieldError
	if _, err := a.Verify(sign(claims(jwt.MapClaims{"rooms": []string{"ok", "bad\x01"}}))); !errors.As(err, &fe) || fe.Field != "rooms[1]" {
		t.Errorf("bad rooms entry: %v", err)
	}
}
