package auth

import (
	"errors"
	"net/http"
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

func TestBearerTokenSources(t *testing.T) {
	req := func(query string, h map[string]string) *http.Request {
		r := httptest.NewRequest("GET", "/v1/ws"+query, nil)
		for k, v := range h {
			r.Header.Set(k, v)
		}
		if _, ok := h["Sec-WebSocket-Protocol"]; ok {
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
		}
		return r
	}
	plainGET := httptest.NewRequest("GET", "/v1/rooms/r/typing", nil)
	plainGET.Header.Set("Sec-WebSocket-Protocol", "ellipsis.v1, ellipsis.bearer.p.t.s")
	const proto = "Sec-WebSocket-Protocol"
	long := strings.Repeat("a", MaxTokenBytes+1)
	cases := []struct {
		name    string
		r       *http.Request
		want    string
		errPart string // "" means no error
		field   bool   // a *protocol.FieldError (400), not ErrUnauthorized
	}{
		{"none", req("", nil), "", "", false},
		{"header", req("", map[string]string{"Authorization": "Bearer h.t.s"}), "h.t.s", "", false},
		{"header scheme any case", req("", map[string]string{"Authorization": "bearer h.t.s"}), "h.t.s", "", false},
		{"subprotocol", req("", map[string]string{proto: "ellipsis.v1, ellipsis.bearer.p.t.s"}), "p.t.s", "", false},
		{"subprotocol first", req("", map[string]string{proto: "ellipsis.bearer.p.t.s,ellipsis.v1"}), "p.t.s", "", false},
		{"query", req("?access_token=q.t.s", nil), "q.t.s", "", false},
		{"other protocols ignored", req("?access_token=q.t.s", map[string]string{proto: "chat, superchat"}), "q.t.s", "", false},
		{"same token everywhere", req("?access_token=x.y.z", map[string]string{"Authorization": "Bearer x.y.z", proto: "ellipsis.v1, ellipsis.bearer.x.y.z"}), "x.y.z", "", false},
		{"header vs subprotocol", req("", map[string]string{"Authorization": "Bearer a.a.a", proto: "ellipsis.v1, ellipsis.bearer.b.b.b"}), "", "conflicting tokens in Authorization header and Sec-WebSocket-Protocol", false},
		{"subprotocol vs query", req("?access_token=a.a.a", map[string]string{proto: "ellipsis.v1, ellipsis.bearer.b.b.b"}), "", "conflicting tokens in Sec-WebSocket-Protocol ellipsis.bearer.<JWT> and ?access_token=", false},
		{"header vs query", req("?access_token=a.a.a", map[string]string{"Authorization": "Bearer b.b.b"}), "", "conflicting tokens in Authorization header and ?access_token=", false},
		{"bad scheme", req("", map[string]string{"Authorization": "Basic abc"}), "", "Authorization header", false},
		{"basic ignored beside a subprotocol token", req("", map[string]string{"Authorization": "Basic abc", proto: "ellipsis.v1, ellipsis.bearer.p.t.s"}), "p.t.s", "", false},
		{"basic ignored beside a query token", req("?access_token=q.t.s", map[string]string{"Authorization": "Basic abc"}), "q.t.s", "", false},
		{"subprotocol only on a WebSocket handshake", plainGET, "", "", false},
		{"two bearer entries", req("", map[string]string{proto: "ellipsis.v1, ellipsis.bearer.a.a.a, ellipsis.bearer.a.a.a"}), "", "more than one", false},
		{"empty subprotocol token", req("", map[string]string{proto: "ellipsis.v1, ellipsis.bearer."}), "", "Sec-WebSocket-Protocol ellipsis.bearer.<JWT>: empty token", false},
		{"empty query token", req("?access_token=", nil), "", "?access_token=: empty token", false},
		{"oversized subprotocol token", req("", map[string]string{proto: "ellipsis.v1, ellipsis.bearer." + long}), "", "too long", false},
		{"oversized query token", req("?access_token="+long, nil), "", "too long", false},
		{"bearer without v1", req("", map[string]string{proto: "ellipsis.bearer.p.t.s"}), "", "Sec-WebSocket-Protocol: offer ellipsis.v1", true},
	}
	for _, tc := range cases {
		got, err := BearerToken(tc.r)
		if tc.errPart == "" {
			if err != nil || got != tc.want {
				t.Errorf("%s: %q %v, want %q", tc.name, got, err, tc.want)
			}
			continue
		}
		var fe *protocol.FieldError
		switch {
		case err == nil:
			t.Errorf("%s: no error, token %q", tc.name, got)
		case !strings.Contains(err.Error(), tc.errPart):
			t.Errorf("%s: %q, want it to name %q", tc.name, err, tc.errPart)
		case tc.field && !errors.As(err, &fe):
			t.Errorf("%s: %v is not a FieldError", tc.name, err)
		case !tc.field && !errors.Is(err, ErrUnauthorized):
			t.Errorf("%s: %v does not wrap ErrUnauthorized", tc.name, err)
		}
		if err != nil && (strings.Contains(err.Error(), "a.a.a") || strings.Contains(err.Error(), "b.b.b") || strings.Contains(err.Error(), long)) {
			t.Errorf("%s: message %q echoes a token", tc.name, err)
		}
	}
}
