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
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

func TestJWKSSkipsUnusableKeys(t *testing.T) {
	k := testkit.Keys()
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	x, _ := ecdh.X25519().GenerateKey(rand.Reader)
	rs512 := testkit.RSAJWK("rs512", &k.RSA2.PublicKey)
	rs512["alg"] = "RS512"
	enc := testkit.RSAJWK("enc", &k.RSA2.PublicKey)
	enc["use"] = "enc"
	ecAsRSA := testkit.ECJWK("ec-as-rs", &k.EC2.PublicKey)
	ecAsRSA["alg"] = "RS256"
	path := filepath.Join(t.TempDir(), "jwks.json")
	testkit.WriteFileAtomic(t, path, testkit.JWKSJSON(
		testkit.RSAJWK("rsa", &k.RSA.PublicKey), testkit.ECJWK("ec", &k.EC.PublicKey), testkit.EdJWK("ed", k.Ed.Public().(ed25519.PublicKey)),
		testkit.RSAJWK("small", &small.PublicKey), testkit.ECJWK("p384", &p384.PublicKey), rs512, enc, ecAsRSA,
		map[string]any{"kty": "oct", "kid": "hmac", "k": testkit.B64([]byte("secret"))},
		map[string]any{"kty": "OKP", "kid": "x25519", "crv": "X25519", "x": testkit.B64(x.PublicKey().Bytes())},
		map[string]any{"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
		map[string]any{"kty": "weird", "kid": "weird"},
		testkit.RSAJWK("rsa", &k.RSA2.PublicKey), // duplicate kid: the first wins
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
		testkit.WriteFileAtomic(t, p, []byte(data))
		if _, err := LoadJWKS(p, 0, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Each asymmetric alg verifies only with a key of its own type, and HS256
// only with the secret, whatever the kid says.
func TestJWTAlgorithmConfusion(t *testing.T) {
	k := testkit.Keys()
	path := filepath.Join(t.TempDir(), "jwks.json")
	testkit.WriteFileAtomic(t, path, testkit.JWKSJSON(testkit.RSAJWK("rsa", &k.RSA.PublicKey), testkit.ECJWK("ec", &k.EC.PublicKey), testkit.EdJWK("ed", k.Ed.Public().(ed25519.PublicKey))))
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
		"HS256":             testkit.SignJWT(t, jwt.SigningMethodHS256, []byte("s3cret"), "", c()),
		"RS256":             testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "rsa", c()),
		"ES256":             testkit.SignJWT(t, jwt.SigningMethodES256, k.EC, "ec", c()),
		"EdDSA":             testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "ed", c()),
		"ES256 without kid": testkit.SignJWT(t, jwt.SigningMethodES256, k.EC, "", c()),
		"EdDSA without kid": testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "", c()),
	} {
		if id, err := a.Verify(tok); err != nil || id.User != "u" {
			t.Errorf("%s: %+v %v", name, id, err)
		}
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.RSA.PublicKey)
	for name, tc := range map[string]struct{ tok, want string }{
		// The classic confusion: an HMAC over the RSA public key.
		"HS256 keyed with the RSA public key": {testkit.SignJWT(t, jwt.SigningMethodHS256, der, "rsa", c()), "signature"},
		"RS256 naming the EC kid":             {testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "ec", c()), "no usable key"},
		"ES256 naming the RSA kid":            {testkit.SignJWT(t, jwt.SigningMethodES256, k.EC, "rsa", c()), "no usable key"},
		"EdDSA by another key":                {testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed2, "ed", c()), "signature"},
		"ES256 by another key without kid":    {testkit.SignJWT(t, jwt.SigningMethodES256, k.EC2, "", c()), "signature"},
		"unknown kid":                         {testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "nope", c()), `"nope" is unknown`},
		"alg none":                            {testkit.SignJWT(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", c()), "not accepted"},
		"RS512":                               {testkit.SignJWT(t, jwt.SigningMethodRS512, k.RSA, "rsa", c()), "not accepted"},
		"PS256":                               {testkit.SignJWT(t, jwt.SigningMethodPS256, k.RSA, "rsa", c()), "not accepted"},
	} {
		_, err := a.Verify(tc.tok)
		if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 401 naming %q", name, err, tc.want)
		}
	}
	// JWKS only: HS256 is not accepted at all.
	only, _ := NewJWT(JWTOptions{JWKS: j})
	if _, err := only.Verify(testkit.SignJWT(t, jwt.SigningMethodHS256, []byte("s3cret"), "", c())); err == nil || !strings.Contains(err.Error(), "HS256") {
		t.Errorf("HS256 without a secret: %v", err)
	}
	if _, err := NewJWT(JWTOptions{}); err == nil {
		t.Error("JWT without secret or JWKS accepted")
	}
}

// The file is re-read when a token names an unknown kid (at most once a
// second), and every reload interval; a broken file keeps the old keys.
func TestJWKSReload(t *testing.T) {
	k := testkit.Keys()
	path := filepath.Join(t.TempDir(), "jwks.json")
	testkit.WriteFileAtomic(t, path, testkit.JWKSJSON(testkit.RSAJWK("a", &k.RSA.PublicKey)))
	j, err := LoadJWKS(path, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	j.now = func() time.Time { return now }
	a, _ := NewJWT(JWTOptions{JWKS: j, Now: func() time.Time { return now }})
	c := func() jwt.MapClaims { return jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix()} }
	tokA := testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "a", c())
	tokB := testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "b", c())
	tokB2 := testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed2, "b", c())
	verify := func(tok string) error { _, err := a.Verify(tok); return err }

	if err := verify(tokA); err != nil {
		t.Fatal(err)
	}
	// Rotation: b replaces a. The unknown kid b triggers a read at once.
	testkit.WriteFileAtomic(t, path, testkit.JWKSJSON(testkit.EdJWK("b", k.Ed.Public().(ed25519.PublicKey))))
	if err := verify(tokB); err != nil {
		t.Fatalf("new key right after rotation: %v", err)
	}
	if err := verify(tokA); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("removed key: %v", err)
	}
	// Forced reads are limited to one a second: a kid added now is not
	// seen until a second has passed.
	testkit.WriteFileAtomic(t, path, testkit.JWKSJSON(testkit.EdJWK("b", k.Ed.Public().(ed25519.PublicKey)), testkit.RSAJWK("a", &k.RSA.PublicKey)))
	if err := verify(tokA); err == nil {
		t.Fatal("forced reload not rate limited")
	}
	now = now.Add(UnknownKIDReloadEvery)
	if err := verify(tokA); err != nil {
		t.Fatalf("after a second: %v", err)
	}
	// A key replaced under the same kid is picked up by the periodic check.
	testkit.WriteFileAtomic(t, path, testkit.JWKSJSON(testkit.EdJWK("b", k.Ed2.Public().(ed25519.PublicKey))))
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
		testkit.WriteFileAtomic(t, path, []byte(bad))
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
	k := testkit.Keys()
	path := filepath.Join(t.TempDir(), "jwks.json")
	testkit.WriteFileAtomic(t, path, testkit.JWKSJSON(testkit.RSAJWK("a", &k.RSA.PublicKey)))
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
	tok := testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "a", jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix()})
	errorLines := func() int { return logs.FilterMessage("JWKS re-read failed; keeping the previous keys").Len() }

	testkit.WriteFileAtomic(t, path, []byte("garbage"))
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
	testkit.WriteFileAtomic(t, path, testkit.JWKSJSON(testkit.RSAJWK("a", &k.RSA.PublicKey), testkit.EdJWK("b", k.Ed.Public().(ed25519.PublicKey))))
	now = now.Add(time.Second)
	a.Verify(tok)
	if logs.FilterMessage("JWKS re-read works again").Len() != 1 || !slices.Equal(j.KeyIDs(), []string{"a", "b"}) {
		t.Fatalf("recovery: kids %v, logs %v", j.KeyIDs(), logs.All())
	}
}
