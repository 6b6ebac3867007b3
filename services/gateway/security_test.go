package gateway_test

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/services/gateway"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// HS256 and RS256 / ES256 / EdDSA from a JWKS file, over
// real handshakes: valid tokens of every alg connect as their sub, and
// every invalid one gets a 401 JSON body naming the reason, before any
// upgrade.
func TestJWTEveryAlgorithm(t *testing.T) {
	t.Parallel()
	const secret = "every-alg-secret"
	k := testkit.Keys()
	jwks := testkit.TempJWKS(t, testkit.RSAJWK("rsa1", &k.RSA.PublicKey), ecJWK("ec1", k.EC), testkit.EdJWK("ed1", k.Ed.Public().(ed25519.PublicKey)),
		map[string]any{"kty": "oct", "kid": "hmac", "k": testkit.B64([]byte("jwks-hmac"))}) // skipped: HS256 uses the secret only
	e := newEnv(t, func(c *config.Config) {
		c.Auth = config.AuthJWT
		c.JWTSecret = secret
		c.JWKSFile = jwks
		c.JWTIssuer = "https://id.test"
		c.JWTAudience = []string{"ellipsis"}
	})
	e.startWorker("")
	base := "ws://" + e.srv.HTTPAddr() + "/v1/ws"
	exp := time.Now().Add(time.Hour).Unix()
	claims := func(sub string, extra jwt.MapClaims) jwt.MapClaims {
		return testkit.Claims(jwt.MapClaims{"sub": sub, "exp": exp, "iss": "https://id.test", "aud": "ellipsis"}, extra)
	}

	valid := validJWTs(t, k, secret, claims)
	connectAsSub(t, e, base, valid)
	invalid := invalidJWTs(t, k, secret, claims)
	rejectUnauthorized(t, base, invalid)

	// A non-Bearer Authorization header (a browser's Basic credentials
	// for a site behind a password) is ignored beside a valid
	// ?access_token=, and refused, naming the header, alone.
	good := valid[0].tok
	if st, _, msg := handshake(t, base+"?access_token="+good, http.Header{"Authorization": {"Basic " + good}}); st != 101 {
		t.Errorf("Basic header beside ?access_token=: %d %q, want 101", st, msg)
	}
	if st, _, msg := handshake(t, base, http.Header{"Authorization": {"Basic " + good}}); st != 401 || !strings.Contains(msg, "Authorization header") {
		t.Errorf("Basic header alone: %d %q", st, msg)
	}
	// Valid credentials carrying an invalid user id: 400 naming the field.
	bad := testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "ed1", claims(strings.Repeat("u", 257), nil))
	if st, code, msg := handshake(t, base+"?access_token="+bad, nil); st != 400 || code != protocol.CodeBadRequest || !strings.Contains(msg, "user") {
		t.Errorf("257-byte sub: %d %s %q", st, code, msg)
	}
	if n := e.metric(`ellipsis_gateway_handshakes_rejected_total{reason="unauthorized"}`); n != float64(len(invalid)+1) {
		t.Errorf("handshakes_rejected_total{unauthorized} = %v, want %d", n, len(invalid)+1)
	}

	// Opt-out with an EdDSA token: typing is dropped, start and stop alike,
	// while the user still sees others.
	checkTypingOptOut(t, e, base, testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "ed1", claims("quiet", jwt.MapClaims{"share_typing": false})))
}

// jwtClaims builds the claims of a token for sub: the test's exp, iss
// and aud, with extra set over them (nil values delete).
type jwtClaims func(sub string, extra jwt.MapClaims) jwt.MapClaims

// validJWT is a token that connects as sub, sent in the Authorization
// header or the access_token query parameter.
type validJWT struct {
	alg, sub, tok string
	header        bool
}

// validJWTs are the tokens of every accepted alg (HS256 with secret, the
// others from the JWKS keys of k).
func validJWTs(t *testing.T, k testkit.JWTKeys, secret string, claims jwtClaims) []validJWT {
	return []validJWT{
		{"HS256", "u-hs256", testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(secret), "", claims("u-hs256", nil)), true},
		{"RS256", "u-rs256", testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "rsa1", claims("u-rs256", nil)), false},
		{"ES256", "u-es256", testkit.SignJWT(t, jwt.SigningMethodES256, k.EC, "ec1", claims("u-es256", nil)), true},
		{"EdDSA", "u-eddsa", testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "ed1", claims("u-eddsa", nil)), false},
		{"ES256 without kid", "u-es256-nokid", testkit.SignJWT(t, jwt.SigningMethodES256, k.EC, "", claims("u-es256-nokid", nil)), false},
		{"EdDSA with two audiences", "u-aud", testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "ed1", claims("u-aud", jwt.MapClaims{"aud": []string{"other", "ellipsis"}})), true},
	}
}

// connectAsSub dials with each token, joins room r and checks that a
// typing_start reaches the worker as the token's sub.
func connectAsSub(t *testing.T, e *env, base string, valid []validJWT) {
	t.Helper()
	for _, v := range valid {
		var c *client
		if v.header {
			c = e.dialURL(base, http.Header{"Authorization": {"Bearer " + v.tok}})
		} else {
			c = e.dialURL(base+"?access_token="+v.tok, nil)
		}
		c.join("r")
		c.send(`{"type":"typing_start","room":"r"}`)
		if cmd := e.nextCommand(); cmd.User != v.sub || cmd.Op != protocol.OpStart {
			t.Fatalf("%s: command %+v, want user %s", v.alg, cmd, v.sub)
		}
	}
}

// invalidJWT is a token the handshake rejects with a 401 naming want.
type invalidJWT struct {
	name, tok, want string
}

// invalidJWTs are the rejected tokens: expired, wrongly signed, of an
// unaccepted alg, with a bad or missing claim, malformed or missing.
func invalidJWTs(t *testing.T, k testkit.JWTKeys, secret string, claims jwtClaims) []invalidJWT {
	der, _ := x509.MarshalPKIXPublicKey(&k.RSA.PublicKey)
	return []invalidJWT{
		{"HS256 expired", testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(secret), "", claims("u", jwt.MapClaims{"exp": time.Now().Add(-time.Minute).Unix()})), "expired"},
		{"RS256 expired", testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "rsa1", claims("u", jwt.MapClaims{"exp": time.Now().Add(-time.Minute).Unix()})), "expired"},
		{"ES256 expired", testkit.SignJWT(t, jwt.SigningMethodES256, k.EC, "ec1", claims("u", jwt.MapClaims{"exp": time.Now().Add(-time.Minute).Unix()})), "expired"},
		{"EdDSA expired", testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "ed1", claims("u", jwt.MapClaims{"exp": time.Now().Add(-time.Minute).Unix()})), "expired"},
		{"HS256 wrong secret", testkit.SignJWT(t, jwt.SigningMethodHS256, []byte("other"), "", claims("u", nil)), "signature"},
		{"RS256 wrong key", testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA2, "rsa1", claims("u", nil)), "signature"},
		{"ES256 wrong key", testkit.SignJWT(t, jwt.SigningMethodES256, k.EC2, "ec1", claims("u", nil)), "signature"},
		{"EdDSA wrong key", testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed2, "ed1", claims("u", nil)), "signature"},
		{"RS256 unknown kid", testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "rsa9", claims("u", nil)), `"rsa9" is unknown`},
		{"RS256 naming the EC key", testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "ec1", claims("u", nil)), "no usable key"},
		{"HS256 keyed with the RSA public key", testkit.SignJWT(t, jwt.SigningMethodHS256, der, "rsa1", claims("u", nil)), "signature"},
		{"HS256 keyed with the skipped JWKS oct key", testkit.SignJWT(t, jwt.SigningMethodHS256, []byte("jwks-hmac"), "hmac", claims("u", nil)), "signature"},
		{"alg none", testkit.SignJWT(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", claims("u", nil)), "algorithm \"none\" is not accepted"},
		{"HS512", testkit.SignJWT(t, jwt.SigningMethodHS512, []byte(secret), "", claims("u", nil)), "not accepted"},
		{"RS512", testkit.SignJWT(t, jwt.SigningMethodRS512, k.RSA, "rsa1", claims("u", nil)), "not accepted"},
		{"PS256", testkit.SignJWT(t, jwt.SigningMethodPS256, k.RSA, "rsa1", claims("u", nil)), "not accepted"},
		{"no exp", testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "ed1", claims("u", jwt.MapClaims{"exp": nil})), "no exp"},
		{"nbf ahead", testkit.SignJWT(t, jwt.SigningMethodES256, k.EC, "ec1", claims("u", jwt.MapClaims{"nbf": time.Now().Add(time.Hour).Unix()})), "nbf"},
		{"wrong iss", testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "rsa1", claims("u", jwt.MapClaims{"iss": "https://evil.test"})), "issuer"},
		{"no iss", testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(secret), "", claims("u", jwt.MapClaims{"iss": nil})), "no iss"},
		{"wrong aud", testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "ed1", claims("u", jwt.MapClaims{"aud": []string{"other"}})), "audience"},
		{"no aud", testkit.SignJWT(t, jwt.SigningMethodES256, k.EC, "ec1", claims("u", jwt.MapClaims{"aud": nil})), "no aud"},
		{"no sub", testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "rsa1", claims("u", jwt.MapClaims{"sub": nil})), "no sub"},
		{"garbage", "abc.def.ghi", "malformed"},
		{"too long", strings.Repeat("a", 20000), "too long"},
		{"missing", "", "missing token"},
	}
}

// rejectUnauthorized checks that each token's handshake gets a 401
// unauthorized naming its reason, with a WWW-Authenticate header.
func rejectUnauthorized(t *testing.T, base string, invalid []invalidJWT) {
	t.Helper()
	for _, tc := range invalid {
		u := base
		if tc.tok != "" {
			u += "?access_token=" + tc.tok
		}
		st, code, msg, resp := handshakeResp(t, u, nil)
		if st != http.StatusUnauthorized || code != "unauthorized" || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: HTTP %d %s %q, want 401 unauthorized naming %q", tc.name, st, code, msg, tc.want)
		} else if resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", tc.name)
		}
	}
}

// checkTypingOptOut connects with tok (share_typing false): its typing is
// dropped, start and stop alike, while the user still sees others.
func checkTypingOptOut(t *testing.T, e *env, base, tok string) {
	t.Helper()
	opt := e.dialURL(base+"?access_token="+tok, nil)
	opt.join("r")
	opt.send(`{"type":"typing_start","room":"r"}`)
	opt.send(`{"type":"typing_stop","room":"r"}`)
	ev := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "u-rs256", TTLMs: 5000})
	if got := string(opt.readRaw()); got != ev {
		t.Fatalf("opted-out user got %s, want %s", got, ev)
	}
	e.noCommand(300 * time.Millisecond)
}

// Item 1: the JWKS file is reloaded when it changes; a rotated-in key works
// at once, a removed one stops working, a broken file keeps the old keys.
func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	k := testkit.Keys()
	path := filepath.Join(t.TempDir(), "jwks.json")
	testkit.WriteJWKS(t, path, testkit.RSAJWK("a", &k.RSA.PublicKey))
	e := newEnv(t, func(c *config.Config) {
		c.Auth = config.AuthJWT
		c.JWKSFile = path
		c.JWKSReload = 200 * time.Millisecond
	})
	base := "ws://" + e.srv.HTTPAddr() + "/v1/ws?access_token="
	exp := time.Now().Add(time.Hour).Unix()
	tokA := testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "a", jwt.MapClaims{"sub": "alice", "exp": exp})
	tokB := testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "b", jwt.MapClaims{"sub": "bob", "exp": exp})
	tokB2 := testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed2, "b", jwt.MapClaims{"sub": "bob", "exp": exp})
	status := func(tok string) (int, string) { st, _, msg := handshake(t, base+tok, nil); return st, msg }

	if st, msg := status(tokA); st != 101 {
		t.Fatalf("key a: %d %s", st, msg)
	}
	if st, msg := status(tokB); st != 401 || !strings.Contains(msg, "unknown") {
		t.Fatalf("key b before rotation: %d %s", st, msg)
	}
	// HS256 is not accepted without a secret.
	if st, msg := status(testkit.SignJWT(t, jwt.SigningMethodHS256, []byte("x"), "", jwt.MapClaims{"sub": "alice", "exp": exp})); st != 401 || !strings.Contains(msg, "not accepted") {
		t.Fatalf("HS256 with JWKS only: %d %s", st, msg)
	}
	open := e.dialURL(base+tokA, nil) // opened before the rotation

	// Rotate: b replaces a. The new kid triggers a reload at once (after
	// the forced-reload pause that the "key b before rotation" probe used).
	testkit.WriteJWKS(t, path, testkit.EdJWK("b", k.Ed.Public().(ed25519.PublicKey)))
	testkit.WaitFor(t, 5*time.Second, "the rotated-in key to be accepted", func() bool { st, _ := status(tokB); return st == 101 })
	if st, msg := status(tokA); st != 401 || !strings.Contains(msg, `"a" is unknown`) {
		t.Fatalf("removed key a: %d %s", st, msg)
	}
	// A connection opened with a removed key stays until its token expires.
	open.send(`{"type":"ping","id":"p"}`)
	open.expect(protocol.TypePong)

	// A key replaced under the same kid: picked up by the periodic check.
	testkit.WriteJWKS(t, path, testkit.EdJWK("b", k.Ed2.Public().(ed25519.PublicKey)))
	testkit.WaitFor(t, 5*time.Second, "the replaced key to be accepted", func() bool { st, _ := status(tokB2); return st == 101 })
	if st, msg := status(tokB); st != 401 || !strings.Contains(msg, "signature") {
		t.Fatalf("replaced key: %d %s", st, msg)
	}
	// A broken file keeps the keys in use.
	testkit.WriteFileAtomic(t, path, []byte(`{"keys":[{"kty":`))
	time.Sleep(400 * time.Millisecond)
	if st, msg := status(tokB2); st != 101 {
		t.Fatalf("after a broken rewrite: %d %s", st, msg)
	}
}

// A gateway does not start with a JWKS file it cannot use.
func TestJWKSFileMustBeUsable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, data := range map[string]string{"missing": "", "garbage": "{", "no usable key": `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		if data != "" {
			if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cfg := config.Default()
		cfg.JWKSFile = p
		if _, err := gateway.New(gateway.Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "ELLIPSIS_JWKS_FILE") {
			t.Errorf("%s: New = %v, want an error naming ELLIPSIS_JWKS_FILE", name, err)
		}
	}
}

// Item 1: a connection is closed with 1008 when its token expires, at that
// time.
func TestTokenExpiryClosesAtExp(t *testing.T) {
	t.Parallel()
	k := testkit.Keys()
	e := newEnv(t, func(c *config.Config) {
		c.Auth = config.AuthJWT
		c.JWKSFile = testkit.TempJWKS(t, ecJWK("ec", k.EC))
	})
	e.startWorker("")
	expAt := time.Unix(time.Now().Add(2*time.Second).Unix(), 0)
	c := e.dialURL("ws://"+e.srv.HTTPAddr()+"/v1/ws?access_token="+testkit.SignJWT(t, jwt.SigningMethodES256, k.EC, "ec", jwt.MapClaims{"sub": "alice", "exp": expAt.Unix()}), nil)
	c.join("r")
	c.expectClose(websocket.ClosePolicyViolation)
	if d := time.Since(expAt); d < -50*time.Millisecond || d > time.Second {
		t.Fatalf("closed %v after exp, want at exp", d)
	}
	if cmd := e.nextCommand(); cmd.Op != protocol.OpDisconnect || cmd.User != "alice" {
		t.Fatalf("no disconnect after expiry: %+v", cmd)
	}
}

// Item 2: Origin allow-list, 403 with a JSON body before the upgrade (and
// before authentication).
func TestOriginBeforeUpgrade(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.Auth = config.AuthJWT; c.JWTSecret = "origin-secret" })
	tok := signHS256(t, "origin-secret", jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	u := "ws://" + e.srv.HTTPAddr() + "/v1/ws?access_token=" + tok
	_, port, _ := strings.Cut(e.srv.HTTPAddr(), ":")
	for origin, want := range map[string]int{
		"":                                 101, // not a browser
		"http://" + e.srv.HTTPAddr():       101, // same host (default)
		"http://localhost:" + port:         403, // same port, other host name
		"http://127.0.0.1:1":               403,
		"null":                             403,
		"https://evil.example":             403,
		"http://" + e.srv.HTTPAddr() + ".": 403,
	} {
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		st, code, msg := handshake(t, u, h)
		if st != want || (want == 403 && (code != protocol.CodeForbidden || !strings.Contains(msg, "origin"))) {
			t.Errorf("origin %q: %d %s %q, want %d", origin, st, code, msg, want)
		}
	}
	// The Origin is checked before the credentials: no token, bad origin: 403.
	if st, _, _ := handshake(t, "ws://"+e.srv.HTTPAddr()+"/v1/ws", http.Header{"Origin": {"https://evil.example"}}); st != 403 {
		t.Errorf("bad origin without token: %d, want 403", st)
	}

	e2 := newEnv(t, func(c *config.Config) {
		c.AllowedOrigins = []string{"https://chat.example.com", "https://*.example.org:8443", "http://localhost:3000"}
	})
	u2 := "ws://" + e2.srv.HTTPAddr() + "/v1/ws?user=alice"
	for origin, want := range map[string]int{
		"https://chat.example.com":      101,
		"https://CHAT.example.com":      101,
		"https://a.example.org:8443":    101,
		"https://a.b.example.org:8443":  101,
		"https://a.example.org":         403,
		"https://example.org:8443":      403,
		"https://evil.com/.example.org": 403,
		"http://localhost:3000":         101,
		"http://localhost:3001":         403,
		"http://" + e2.srv.HTTPAddr():   403, // an allow-list replaces "same host"
	} {
		if st, _, _ := handshake(t, u2, http.Header{"Origin": {origin}}); st != want {
			t.Errorf("allow-list, origin %q: %d, want %d", origin, st, want)
		}
	}
	if n := e2.metric(`ellipsis_gateway_handshakes_rejected_total{reason="origin"}`); n != 5 {
		t.Errorf("handshakes_rejected_total{origin} = %v, want 5", n)
	}
}

// Item 3, mode claims: exact ids and prefix* patterns from the token;
// denied joins get forbidden and nothing reaches NATS or Redis; the HTTP
// snapshot answers 403.
func TestAuthzClaims(t *testing.T) {
	t.Parallel()
	const secret = "claims-secret"
	e := newEnv(t, func(c *config.Config) { c.Auth = config.AuthJWT; c.JWTSecret = secret; c.Authz = config.AuthzClaims })
	e.startWorker("")
	spy := e.spyNATS()
	tok := func(rooms any) string {
		c := jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}
		if rooms != nil {
			c["rooms"] = rooms
		}
		return signHS256(t, secret, c)
	}
	base := "ws://" + e.srv.HTTPAddr() + "/v1/ws?access_token="
	granted := tok([]string{"42", "team-7/*", "{x}"})
	c := e.dialURL(base+granted, nil)
	c.join("42")
	c.join("team-7/general")
	c.join("{x}")

	for _, room := range []string{"team-8/general", "4", "421", "team-7", "x", "team-7*"} {
		c.send(map[string]string{"type": "join", "room": room, "id": "j"})
		if f := c.expectError(protocol.CodeForbidden); f.str("room") != room || f.str("id") != "j" {
			t.Fatalf("denied %q: %v", room, f)
		}
		c.send(map[string]string{"type": "typing_start", "room": room})
		c.expectError(protocol.CodeNotJoined)
	}
	bearer := http.Header{"Authorization": {"Bearer " + granted}}
	if st, body := httpGet(t, e.httpURL("/v1/rooms/team-8%2Fgeneral/typing"), bearer); st != 403 {
		t.Fatalf("HTTP snapshot of a denied room: %d %v", st, body)
	}
	time.Sleep(200 * time.Millisecond)
	if len(spy.mentioning(`"team-7/general"`)) == 0 {
		t.Fatal("the NATS spy saw nothing of the granted join's snapshot")
	}
	for _, room := range []string{"team-8/general", `"4"`, "421", `"team-7"`, `"x"`, "team-7*"} {
		if msgs := spy.mentioning(room); len(msgs) > 0 {
			t.Fatalf("a denied room reached NATS: %q", msgs)
		}
	}
	for _, ch := range pubsubChannels(t, e) {
		if strings.Contains(ch, "team-8") || strings.HasSuffix(ch, "{x}") || strings.HasSuffix(ch, "{4}") {
			t.Fatalf("a denied room reached Redis: %s", ch)
		}
	}
	if st, _ := httpGet(t, e.httpURL("/v1/rooms/team-7%2Fa/typing"), bearer); st != 200 {
		t.Fatalf("HTTP snapshot of a granted room: %d", st)
	}

	// No rooms claim: no room. "*": every room.
	none := e.dialURL(base+tok(nil), nil)
	none.send(`{"type":"join","room":"42"}`)
	none.expectError(protocol.CodeForbidden)
	all := e.dialURL(base+tok([]string{"*"}), nil)
	all.join("anything at all")
	if n := e.metric(`ellipsis_gateway_authz_total{result="deny"}`); n != 8 {
		t.Errorf("authz_total{deny} = %v, want 8", n)
	}
}

// Item 3, mode nats: no answer means deny, allowed answers are cached for
// ELLIPSIS_AUTHZ_CACHE_TTL, denials for ELLIPSIS_AUTHZ_DENY_CACHE_TTL.
func TestAuthzNATSCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.Authz = config.AuthzNATS
		c.AuthzTimeout = 300 * time.Millisecond
		c.AuthzCacheTTL = time.Hour
		c.AuthzDenyCacheTTL = 600 * time.Millisecond
	})
	e.startWorker("")
	times := answerAuthz(t, e)
	spy := e.spyNATS()

	a1, a2 := e.dial("alice", ""), e.dial("alice", "")
	a1.join("open")
	a2.join("open")
	if st, _ := httpGet(t, e.httpURL("/v1/rooms/open/typing?user=alice"), nil); st != 200 {
		t.Fatalf("HTTP snapshot of open: %d", st)
	}
	if n := times("open"); n != 1 {
		t.Fatalf("open asked %d times, want 1 (allow cached)", n)
	}
	e.dial("bob", "").join("open")
	if n := times("open"); n != 2 {
		t.Fatalf("open asked %d times, want 2 (cache is per user)", n)
	}

	for i := 0; i < 2; i++ {
		a1.send(`{"type":"join","room":"closed","id":"c"}`)
		a1.expectError(protocol.CodeForbidden)
	}
	if st, _ := httpGet(t, e.httpURL("/v1/rooms/closed/typing?user=alice"), nil); st != 403 {
		t.Fatalf("HTTP snapshot of closed: %d", st)
	}
	if n := times("closed"); n != 1 {
		t.Fatalf("closed asked %d times, want 1 (denial cached)", n)
	}
	time.Sleep(700 * time.Millisecond)
	a1.send(`{"type":"join","room":"closed"}`)
	a1.expectError(protocol.CodeForbidden)
	if n := times("closed"); n != 2 {
		t.Fatalf("closed asked %d times, want 2 (denial expired)", n)
	}

	// No answer within ELLIPSIS_AUTHZ_TIMEOUT: forbidden, and asked again
	// next time.
	for i := 0; i < 2; i++ {
		start := time.Now()
		a1.send(`{"type":"join","room":"silent"}`)
		a1.expectError(protocol.CodeForbidden)
		if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
			t.Fatalf("no answer took %s, want about the 300ms timeout", d)
		}
	}
	if n := times("silent"); n != 2 {
		t.Fatalf("silent asked %d times, want 2 (no answer is not cached)", n)
	}
	a1.send(`{"type":"join","room":"odd"}`)
	a1.expectError(protocol.CodeForbidden)
	time.Sleep(100 * time.Millisecond)
	for _, room := range []string{`"closed"`, `"silent"`, `"odd"`} {
		for _, m := range spy.mentioning(room) {
			if !strings.HasPrefix(m, e.names.AuthzJoinSubject()+" ") {
				t.Fatalf("a denied room reached NATS beyond the authz hook: %s", m)
			}
		}
	}
	if n := e.metric(`ellipsis_gateway_authz_total{result="no_answer"}`); n != 2 {
		t.Errorf("authz_total{no_answer} = %v, want 2", n)
	}
}

// answerAuthz answers the gateway's authz requests on e's NATS: room
// "open" allowed, "closed" denied, "silent" never answered, any other a
// garbage reply. It returns how often a room was asked about.
func answerAuthz(t *testing.T, e *env) func(room string) int {
	t.Helper()
	var mu sync.Mutex
	asked := map[string]int{}
	if _, err := e.nc.Subscribe(e.names.AuthzJoinSubject(), func(m *nats.Msg) {
		var req struct {
			V          int
			User, Room string
		}
		_ = json.Unmarshal(m.Data, &req)
		mu.Lock()
		asked[req.Room]++
		mu.Unlock()
		switch req.Room {
		case "open":
			_ = m.Respond([]byte(`{"allow":true}`))
		case "closed":
			_ = m.Respond([]byte(`{"allow":false}`))
		case "silent": // no answer
		default:
			_ = m.Respond([]byte(`garbage`))
		}
	}); err != nil {
		t.Fatal(err)
	}
	_ = e.nc.Flush()
	return func(room string) int { mu.Lock(); defer mu.Unlock(); return asked[room] }
}

// Item 5: the user id comes only from authentication; user (and conn, seq)
// fields in frames and a ?user= next to a token are ignored.
func TestUserComesOnlyFromAuth(t *testing.T) {
	t.Parallel()
	const secret = "spoof-secret"
	e := newEnv(t, func(c *config.Config) { c.Auth = config.AuthJWT; c.JWTSecret = secret })
	e.startWorker("")
	tok := signHS256(t, secret, jwt.MapClaims{"sub": "alice", "name": "Alice", "exp": time.Now().Add(time.Hour).Unix()})
	c := e.dialURL("ws://"+e.srv.HTTPAddr()+"/v1/ws?user=mallory&name=Mallory&access_token="+url.QueryEscape(tok), nil)
	c.join("r")
	c.send(`{"type":"typing_start","room":"r","user":"mallory","name":"Mallory","conn":"gw-x:1","seq":999999,"v":1,"op":"stop"}`)
	cmd := e.nextCommand()
	if cmd.User != "alice" || cmd.Name != "Alice" || cmd.Op != protocol.OpStart || !strings.HasPrefix(cmd.Conn, e.srv.GatewayID()+":") || cmd.Seq != 1 {
		t.Fatalf("command %+v: identity not from the token", cmd)
	}
	// The self filter uses the authenticated user too.
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "alice", TTLMs: 5000})
	ev := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "mallory", TTLMs: 5000})
	if got := string(c.readRaw()); got != ev {
		t.Fatalf("got %s, want only mallory's event %s", got, ev)
	}
}
