package auth

import (
	"context"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

var b64 = base64.RawURLEncoding.EncodeToString

type testKeys struct {
	rsa, rsa2 *rsa.PrivateKey
	ec, ec2   *ecdsa.PrivateKey
	ed, ed2   ed25519.PrivateKey
}

var keysOnce = sync.OnceValue(func() testKeys {
	var k testKeys
	k.rsa, _ = rsa.GenerateKey(rand.Reader, 2048)
	k.rsa2, _ = rsa.GenerateKey(rand.Reader, 2048)
	k.ec, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k.ec2, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, k.ed, _ = ed25519.GenerateKey(rand.Reader)
	_, k.ed2, _ = ed25519.GenerateKey(rand.Reader)
	return k
})

func rsaJWK(kid string, pub *rsa.PublicKey) map[string]any {
	return map[string]any{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
		"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes())}
}

func ecJWK(kid string, pub *ecdsa.PublicKey) map[string]any {
	e, err := pub.ECDH()
	if err != nil {
		panic(err)
	}
	raw := e.Bytes() // 0x04 || X || Y
	n := (len(raw) - 1) / 2
	crv := map[int]string{32: "P-256", 48: "P-384", 66: "P-521"}[n]
	return map[string]any{"kty": "EC", "kid": kid, "crv": crv, "x": b64(raw[1 : 1+n]), "y": b64(raw[1+n:])}
}

func edJWK(kid string, pub ed25519.PublicKey) map[string]any {
	return map[string]any{"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": b64(pub)}
}

func jwksJSON(keys ...map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

// writeAtomic replaces path as a deployment would (write, then rename).
func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func signWith(t *testing.T, m jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWKSSkipsUnusableKeys(t *testing.T) {
	k := keysOnce()
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	x, _ := ecdh.X25519().GenerateKey(rand.Reader)
	rs512 := rsaJWK("rs512", &k.rsa2.PublicKey)
	rs512["alg"] = "RS512"
	enc := rsaJWK("enc", &k.rsa2.PublicKey)
	enc["use"] = "enc"
	ecAsRSA := ecJWK("ec-as-rs", &k.ec2.PublicKey)
	ecAsRSA["alg"] = "RS256"
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeAtomic(t, path, jwksJSON(
		rsaJWK("rsa", &k.rsa.PublicKey), ecJWK("ec", &k.ec.PublicKey), edJWK("ed", k.ed.Public().(ed25519.PublicKey)),
		rsaJWK("small", &small.PublicKey), ecJWK("p384", &p384.PublicKey), rs512, enc, ecAsRSA,
		map[string]any{"kty": "oct", "kid": "hmac", "k": b64([]byte("secret"))},
		map[string]any{"kty": "OKP", "kid": "x25519", "crv": "X25519", "x": b64(x.PublicKey().Bytes())},
		map[string]any{"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
		map[string]any{"kty": "weird", "kid": "weird"},
		rsaJWK("rsa", &k.rsa2.PublicKey), // duplicate kid: the first wins
	))
	j, err := LoadJWKS(path, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := j.KeyIDs(); !slices.Equal(got, []string{"rsa", "ec", "ed"}) {
		t.Fatalf("usable kids %v, want [rsa ec ed]", got)
	}
}

func TestLoadJWKSErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadJWKS(filepath.Join(dir, "missing.json"), 0, nil); err == nil {
		t.Fatal("missing file accepted")
	}
	for name, data := range map[string]string{
		"garbage":   "not json",
		"empty set": `{"keys":[]}`,
		"only oct":  `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`,
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		writeAtomic(t, p, []byte(data))
		if _, err := LoadJWKS(p, 0, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Each asymmetric alg verifies only with a key of its own type, and HS256
// only with the secret, whatever the kid says.
func TestJWTAlgorithmConfusion(t *testing.T) {
	k := keysOnce()
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeAtomic(t, path, jwksJSON(rsaJWK("rsa", &k.rsa.PublicKey), ecJWK("ec", &k.ec.PublicKey), edJWK("ed", k.ed.Public().(ed25519.PublicKey))))
	j, err := LoadJWKS(path, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewJWT(JWTOptions{Secret: "s3cret", JWKS: j})
	if err != nil {
		t.Fatal(err)
	}
	c := func() jwt.MapClaims { return jwt.MapClaims{"sub": "u", "exp": time.Now().Add(time.Hour).Unix()} }
	for name, tok := range map[string]string{
		"HS256":             signWith(t, jwt.SigningMethodHS256, []byte("s3cret"), "", c()),
		"RS256":             signWith(t, jwt.SigningMethodRS256, k.rsa, "rsa", c()),
		"ES256":             signWith(t, jwt.SigningMethodES256, k.ec, "ec", c()),
		"EdDSA":             signWith(t, jwt.SigningMethodEdDSA, k.ed, "ed", c()),
		"ES256 without kid": signWith(t, jwt.SigningMethodES256, k.ec, "", c()),
		"EdDSA without kid": signWith(t, jwt.SigningMethodEdDSA, k.ed, "", c()),
	} {
		if id, err := a.Verify(tok); err != nil || id.User != "u" {
			t.Errorf("%s: %+v %v", name, id, err)
		}
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	for name, tc := range map[string]struct{ tok, want string }{
		// The classic confusion: an HMAC over the RSA public key.
		"HS256 keyed with the RSA public key": {signWith(t, jwt.SigningMethodHS256, der, "rsa", c()), "signature"},
		"RS256 naming the EC kid":             {signWith(t, jwt.SigningMethodRS256, k.rsa, "ec", c()), "no usable key"},
		"ES256 naming the RSA kid":            {signWith(t, jwt.SigningMethodES256, k.ec, "rsa", c()), "no usable key"},
		"EdDSA by another key":                {signWith(t, jwt.SigningMethodEdDSA, k.ed2, "ed", c()), "signature"},
		"ES256 by another key without kid":    {signWith(t, jwt.SigningMethodES256, k.ec2, "", c()), "signature"},
		"unknown kid":                         {signWith(t, jwt.SigningMethodRS256, k.rsa, "nope", c()), `"nope" is unknown`},
		"alg none":                            {signWith(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", c()), "not accepted"},
		"RS512":                               {signWith(t, jwt.SigningMethodRS512, k.rsa, "rsa", c()), "not accepted"},
		"PS256":                               {signWith(t, jwt.SigningMethodPS256, k.rsa, "rsa", c()), "not accepted"},
	} {
		_, err := a.Verify(tc.tok)
		if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 401 naming %q", name, err, tc.want)
		}
	}
	// JWKS only: HS256 is not accepted at all.
	only, _ := NewJWT(JWTOptions{JWKS: j})
	if _, err := only.Verify(signWith(t, jwt.SigningMethodHS256, []byte("s3cret"), "", c())); err == nil || !strings.Contains(err.Error(), "HS256") {
		t.Errorf("HS256 without a secret: %v", err)
	}
	if _, err := NewJWT(JWTOptions{}); err == nil {
		t.Error("JWT without secret or JWKS accepted")
	}
}

// The file is re-read when a token names an unknown kid (at most once a
// second), and every reload interval; a broken file keeps the old keys.
func TestJWKSReload(t *testing.T) {
	k := keysOnce()
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeAtomic(t, path, jwksJSON(rsaJWK("a", &k.rsa.PublicKey)))
	j, err := LoadJWKS(path, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	j.now = func() time.Time { return now }
	a, _ := NewJWT(JWTOptions{JWKS: j, Now: func() time.Time { return now }})
	c := func() jwt.MapClaims { return jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix()} }
	tokA := signWith(t, jwt.SigningMethodRS256, k.rsa, "a", c())
	tokB := signWith(t, jwt.SigningMethodEdDSA, k.ed, "b", c())
	tokB2 := signWith(t, jwt.SigningMethodEdDSA, k.ed2, "b", c())
	verify := func(tok string) error { _, err := a.Verify(tok); return err }

	if err := verify(tokA); err != nil {
		t.Fatal(err)
	}
	// Rotation: b replaces a. The unknown kid b triggers a read at once.
	writeAtomic(t, path, jwksJSON(edJWK("b", k.ed.Public().(ed25519.PublicKey))))
	if err := verify(tokB); err != nil {
		t.Fatalf("new key right after rotation: %v", err)
	}
	if err := verify(tokA); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("removed key: %v", err)
	}
	// Forced reads are limited to one a second: a kid added now is not
	// seen until a second has passed.
	writeAtomic(t, path, jwksJSON(edJWK("b", k.ed.Public().(ed25519.PublicKey)), rsaJWK("a", &k.rsa.PublicKey)))
	if err := verify(tokA); err == nil {
		t.Fatal("forced reload not rate limited")
	}
	now = now.Add(UnknownKIDReloadEvery)
	if err := verify(tokA); err != nil {
		t.Fatalf("after a second: %v", err)
	}
	// A key replaced under the same kid is picked up by the periodic check.
	writeAtomic(t, path, jwksJSON(edJWK("b", k.ed2.Public().(ed25519.PublicKey))))
	if err := verify(tokB2); err == nil {
		t.Fatal("replaced key used before the reload interval")
	}
	now = now.Add(10 * time.Second)
	if err := verify(tokB2); err != nil {
		t.Fatalf("replaced key after the interval: %v", err)
	}
	if err := verify(tokB); err == nil {
		t.Fatal("old key still verifies")
	}
	// A broken or emptied file keeps the previous keys.
	for _, bad := range []string{`{"keys":[`, `{"keys":[]}`} {
		writeAtomic(t, path, []byte(bad))
		now = now.Add(10 * time.Second)
		if err := verify(tokB2); err != nil {
			t.Fatalf("after writing %q: %v", bad, err)
		}
	}
	// A deleted file too.
	os.Remove(path)
	now = now.Add(10 * time.Second)
	if err := verify(tokB2); err != nil {
		t.Fatalf("after deleting the file: %v", err)
	}
}

// Failed re-reads are all counted but logged at most once a minute, and a
// recovery is logged.
func TestJWKSFailuresLoggedRateLimited(t *testing.T) {
	k := keysOnce()
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeAtomic(t, path, jwksJSON(rsaJWK("a", &k.rsa.PublicKey)))
	core, logs := observer.New(zap.InfoLevel)
	var failures int
	j, err := NewJWKS(context.Background(), JWKSOptions{File: path, Reload: time.Second, Log: zap.New(core), OnRefreshError: func(error) { failures++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	now := time.Now()
	j.now = func() time.Time { return now }
	a, _ := NewJWT(JWTOptions{JWKS: j, Now: func() time.Time { return now }})
	tok := signWith(t, jwt.SigningMethodRS256, k.rsa, "a", jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix()})
	errorLines := func() int { return logs.FilterMessage("JWKS re-read failed; keeping the previous keys").Len() }

	writeAtomic(t, path, []byte("garbage"))
	for range 30 { // 30 s of failed re-reads, one a second
		now = now.Add(time.Second)
		if _, err := a.Verify(tok); err != nil {
			t.Fatalf("old key while the file is broken: %v", err)
		}
	}
	if failures != 30 || errorLines() != 1 {
		t.Fatalf("%d failures counted, %d logged; want 30 and 1", failures, errorLines())
	}
	now = now.Add(time.Minute)
	a.Verify(tok)
	if failures != 31 || errorLines() != 2 {
		t.Fatalf("after a minute: %d failures counted, %d logged; want 31 and 2", failures, errorLines())
	}
	writeAtomic(t, path, jwksJSON(rsaJWK("a", &k.rsa.PublicKey), edJWK("b", k.ed.Public().(ed25519.PublicKey))))
	now = now.Add(time.Second)
	a.Verify(tok)
	if logs.FilterMessage("JWKS re-read works again").Len() != 1 || !slices.Equal(j.KeyIDs(), []string{"a", "b"}) {
		t.Fatalf("recovery: kids %v, logs %v", j.KeyIDs(), logs.All())
	}
}
