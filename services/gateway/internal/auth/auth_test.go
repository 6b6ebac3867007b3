package auth

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
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
