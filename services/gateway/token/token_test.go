package token_test

import (
	"crypto/rsa"
	"encoding/base64"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/token"
)

const secret = "0123456789abcdef0123456789abcdef-dev"

// Tokens minted for every algorithm are accepted by the gateway's own
// authenticator (internal/auth, with the JWKS written by GenerateKey), and
// carry every claim it reads.
func TestMintedTokensVerifyWithTheGateway(t *testing.T) {
	no := false
	now := time.Now()
	claims := token.Claims{
		Subject: "alice", Name: "Alice", Rooms: []string{"lobby", "team-7/*"}, ShareTyping: &no,
		HideTypingFrom: []string{"bob", "carol"},
		TTL:            time.Hour, Issuer: "https://id.example", Audience: []string{"ellipsis"}, Now: now,
	}
	hs, err := token.NewHS256([]byte(secret), "")
	if err != nil {
		t.Fatal(err)
	}
	signers := map[string]*token.Signer{token.HS256: hs}
	var jwks [][]byte
	for _, alg := range []string{"rs256", "es256", "eddsa"} {
		k, err := token.GenerateKey(alg)
		if err != nil {
			t.Fatal(err)
		}
		// The PEM written by GenerateKey is what the tool reads back.
		priv, err := token.ParsePrivateKeyPEM(k.PrivatePEM)
		if err != nil {
			t.Fatal(err)
		}
		s, err := token.NewSigner(priv, k.KID)
		if err != nil {
			t.Fatal(err)
		}
		if s.Alg() != k.Alg {
			t.Fatalf("%s: signer alg %s, key alg %s", alg, s.Alg(), k.Alg)
		}
		signers[k.Alg] = s
		jwks = append(jwks, k.JWKS)
	}
	if len(signers) != 4 {
		t.Fatalf("signers %v", signers)
	}
	for alg, s := range signers {
		var a *auth.JWT
		if alg == token.HS256 {
			a, err = auth.NewJWT(auth.JWTOptions{Secret: secret, Issuer: "https://id.example", Audience: []string{"ellipsis"}})
		} else {
			// One JWKS per key, as -gen-key writes it.
			path := filepath.Join(t.TempDir(), "jwks.json")
			os.WriteFile(path, jwks[slices.Index([]string{token.RS256, token.ES256, token.EdDSA}, alg)], 0o600)
			j, jerr := auth.LoadJWKS(path, time.Minute, nil)
			if jerr != nil {
				t.Fatal(jerr)
			}
			a, err = auth.NewJWT(auth.JWTOptions{JWKS: j, Issuer: "https://id.example", Audience: []string{"ellipsis"}})
		}
		if err != nil {
			t.Fatal(err)
		}
		tok, err := s.Mint(claims)
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		id, err := a.Verify(tok)
		if err != nil {
			t.Fatalf("%s: the gateway refuses the token: %v", alg, err)
		}
		if id.User != "alice" || id.Name != "Alice" || id.ShareTyping || !slices.Equal(id.Rooms, claims.Rooms) ||
			id.HideTypingFrom.Len() != 2 || !id.HideTypingFrom.Has("bob") || !id.HideTypingFrom.Has("carol") ||
			id.Expires.Unix() != now.Add(time.Hour).Unix() {
			t.Errorf("%s: identity %+v", alg, id)
		}
		// Without share_typing the gateway shares; a wrong audience is refused.
		tok, _ = s.Mint(token.Claims{Subject: "bob", TTL: time.Minute, Issuer: "https://id.example", Audience: []string{"ellipsis"}})
		if id, err := a.Verify(tok); err != nil || !id.ShareTyping || id.Rooms != nil || id.HideTypingFrom.Len() != 0 {
			t.Errorf("%s: minimal token: %+v %v", alg, id, err)
		}
		tok, _ = s.Mint(token.Claims{Subject: "bob", TTL: time.Minute, Issuer: "https://id.example", Audience: []string{"other"}})
		if _, err := a.Verify(tok); err == nil || !strings.Contains(err.Error(), "audience") {
			t.Errorf("%s: wrong audience: %v", alg, err)
		}
		tok, _ = s.Mint(token.Claims{Subject: "bob", TTL: time.Minute, Issuer: "https://id.example", Audience: []string{"ellipsis"}, Now: now.Add(-time.Hour)})
		if _, err := a.Verify(tok); err == nil || !strings.Contains(err.Error(), "expired") {
			t.Errorf("%s: expired token: %v", alg, err)
		}
	}
}

func TestRefusals(t *testing.T) {
	if _, err := token.NewHS256([]byte("tiny1"), ""); err == nil || strings.Contains(err.Error(), "tiny1") {
		t.Errorf("short secret: %v (must fail without showing it)", err)
	}
	hs, _ := token.NewHS256([]byte(secret), "")
	for name, c := range map[string]token.Claims{
		"no sub":      {TTL: time.Hour},
		"no ttl":      {Subject: "a"},
		"empty room":  {Subject: "a", TTL: time.Hour, Rooms: []string{"x", ""}},
		"control sub": {Subject: "a\x01", TTL: time.Hour},
		"long name":   {Subject: "a", Name: strings.Repeat("n", 10000), TTL: time.Hour},
	} {
		if _, err := hs.Mint(c); err == nil {
			t.Errorf("%s: minted", name)
		}
	}
	// A hide list the gateway would refuse is refused with its rule.
	for want, hide := range map[string][]string{
		"token: hide_typing_from: at most 1000 user ids, got 1001":  slices.Repeat([]string{"b"}, 1001),
		"token: hide_typing_from[1]: is required":                   {"bob", ""},
		"token: hide_typing_from[0]: must be 1..256 bytes, got 257": {strings.Repeat("x", 257)},
	} {
		if _, err := hs.Mint(token.Claims{Subject: "a", TTL: time.Hour, HideTypingFrom: hide}); err == nil || err.Error() != want {
			t.Errorf("hide list: %v, want %s", err, want)
		}
	}
	if _, err := hs.Mint(token.Claims{Subject: "a", TTL: time.Hour, HideTypingFrom: slices.Repeat([]string{"b"}, 1000)}); err != nil {
		t.Errorf("1000 hidden ids (the limit): %v", err)
	}
	if _, err := token.GenerateKey("hs256"); err == nil {
		t.Error("generated an hs256 key")
	}
	if _, err := token.ParsePrivateKeyPEM([]byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")); err == nil {
		t.Error("public key parsed as private")
	}
}

// RFC 7638 section 3.1's example: the thumbprint of its RSA key.
func TestThumbprintRFC7638(t *testing.T) {
	n, _ := base64.RawURLEncoding.DecodeString("0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw")
	got, err := token.Thumbprint(&rsa.PublicKey{N: new(big.Int).SetBytes(n), E: 65537})
	if err != nil || got != "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs" {
		t.Fatalf("thumbprint %q %v", got, err)
	}
}
