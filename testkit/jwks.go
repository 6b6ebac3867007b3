package testkit

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// JWT signing keys for the JWKS tests: two of each kind the gateway accepts
// (RS256, ES256 on P-256, EdDSA on Ed25519), so a test can rotate one out.
type JWTKeys struct {
	RSA, RSA2 *rsa.PrivateKey
	EC, EC2   *ecdsa.PrivateKey
	Ed, Ed2   ed25519.PrivateKey
}

// Keys returns the test binary's [JWTKeys], generated on the first call
// (RSA 2048 takes a while; every later call returns the same keys).
var Keys = sync.OnceValue(func() JWTKeys {
	var k JWTKeys
	k.RSA, _ = rsa.GenerateKey(rand.Reader, 2048)
	k.RSA2, _ = rsa.GenerateKey(rand.Reader, 2048)
	k.EC, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k.EC2, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, k.Ed, _ = ed25519.GenerateKey(rand.Reader)
	_, k.Ed2, _ = ed25519.GenerateKey(rand.Reader)
	return k
})

// B64 is the base64url encoding without padding of JWK members (RFC 7518).
var B64 = base64.RawURLEncoding.EncodeToString

// JWK is one JSON Web Key (RFC 7517) as a JSON object.
type JWK = map[string]any

// RSAJWK is pub as a JWK with kid, "use": "sig" and "alg": "RS256".
func RSAJWK(kid string, pub *rsa.PublicKey) JWK {
	return JWK{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
		"n": B64(pub.N.Bytes()), "e": B64(big.NewInt(int64(pub.E)).Bytes())}
}

// ECJWK is pub as a JWK with kid and its curve (P-256, P-384 or P-521),
// with no "use" or "alg" member.
func ECJWK(kid string, pub *ecdsa.PublicKey) JWK {
	e, err := pub.ECDH()
	if err != nil {
		panic(err)
	}
	raw := e.Bytes() // 0x04 || X || Y
	n := (len(raw) - 1) / 2
	crv := map[int]string{32: "P-256", 48: "P-384", 66: "P-521"}[n]
	return JWK{"kty": "EC", "kid": kid, "crv": crv, "x": B64(raw[1 : 1+n]), "y": B64(raw[1+n:])}
}

// EdJWK is pub as an Ed25519 JWK (kty OKP) with kid.
func EdJWK(kid string, pub ed25519.PublicKey) JWK {
	return JWK{"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": B64(pub)}
}

// JWKSJSON is the JWK Set {"keys": [...]} of keys.
func JWKSJSON(keys ...JWK) []byte {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

// WriteFileAtomic writes data to path the way deployments replace mounted
// files: a temporary file next to it, renamed over the old one.
func WriteFileAtomic(tb testing.TB, path string, data []byte) {
	tb.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

// WriteJWKS writes the JWK Set of keys to path with [WriteFileAtomic].
func WriteJWKS(tb testing.TB, path string, keys ...JWK) {
	tb.Helper()
	WriteFileAtomic(tb, path, JWKSJSON(keys...))
}

// TempJWKS writes the JWK Set of keys to jwks.json in a new temporary
// directory of the test and returns its path.
func TempJWKS(tb testing.TB, keys ...JWK) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "jwks.json")
	WriteJWKS(tb, p, keys...)
	return p
}

// SignJWT signs claims with m and key, naming kid in the header when it is
// not "".
func SignJWT(tb testing.TB, m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	tb.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Claims returns base with extra merged in; a nil value in extra deletes
// that claim (a token without "exp", say). base is modified and returned.
func Claims(base, extra jwt.MapClaims) jwt.MapClaims {
	for k, v := range extra {
		if v == nil {
			delete(base, k)
		} else {
			base[k] = v
		}
	}
	return base
}
