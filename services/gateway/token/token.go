// Package token mints the JSON Web Tokens the gateway accepts with
// ELLIPSIS_AUTH=jwt (docs/security.md) and makes signing keys with their
// JWK Set, for development, tests, demos and the ellipsis-token tool. In
// production the identity provider issues the tokens.
//
// Claims written are the ones the gateway reads (internal/auth): sub, name,
// rooms, share_typing, hide_typing_from, exp, iat, iss and aud; the kid
// header names the key.
// Signing is github.com/golang-jwt/jwt/v5, the JWKs are
// github.com/MicahParks/jwkset, the libraries the gateway verifies with.
package token

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Algorithms: the ones the gateway accepts.
const (
	HS256 = "HS256" // HMAC-SHA256 with ELLIPSIS_JWT_SECRET
	RS256 = "RS256" // RSA PKCS#1 v1.5 with SHA-256, keys of at least 2048 bits
	ES256 = "ES256" // ECDSA P-256 with SHA-256
	EdDSA = "EdDSA" // Ed25519
)

// MinSecretBytes is the shortest HS256 secret accepted: RFC 7518 section
// 3.2 asks for a key at least as long as the hash output (32 bytes).
const MinSecretBytes = 32

// Claims are what a token says. Subject and TTL are required.
type Claims struct {
	// Subject is the user id (sub): 1..256 bytes (protocol.ValidateID).
	Subject string
	// Name is the display name (name), omitted when empty.
	Name string
	// Rooms are the rooms the user may join with ELLIPSIS_AUTHZ=claims
	// (rooms): exact ids or "prefix*" patterns; omitted when nil.
	Rooms []string
	// ShareTyping, when not nil, is written as share_typing; false makes
	// the gateway publish none of the user's typing. Nil omits the claim
	// (the gateway then shares).
	ShareTyping *bool
	// HideTypingFrom is written as hide_typing_from: the users whose typing
	// the user's connections never get, in any room (docs/protocol.md,
	// "Per-viewer filters"): at most protocol.MaxHideTypingFrom (1,000)
	// user ids, each valid by protocol.ValidateID (duplicates count).
	// Omitted when empty.
	HideTypingFrom []string
	// TTL sets exp = Now + TTL (seconds are kept, RFC 7519 NumericDate).
	TTL time.Duration
	// Issuer (iss) and Audience (aud), omitted when empty; they must match
	// ELLIPSIS_JWT_ISSUER and ELLIPSIS_JWT_AUDIENCE when those are set.
	Issuer   string
	Audience []string
	// Now is the issue time (iat); zero means time.Now.
	Now time.Time
}

// claims is the JSON payload.
type claims struct {
	jwt.RegisteredClaims
	Name        string   `json:"name,omitempty"`
	Rooms       []string `json:"rooms,omitempty"`
	ShareTyping *bool    `json:"share_typing,omitempty"`
	// HideTypingFrom is protocol.HideTypingFrom.
	HideTypingFrom []string `json:"hide_typing_from,omitempty"`
}

// Signer signs tokens with one key.
type Signer struct {
	alg    string
	method jwt.SigningMethod
	key    any
	kid    string
}

// NewHS256 returns a signer for HS256 with secret (at least
// [MinSecretBytes]); kid, when not empty, goes into the header. The error
// never shows the secret.
func NewHS256(secret []byte, kid string) (*Signer, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("token: HS256 secret of %d bytes is too short (at least %d)", len(secret), MinSecretBytes)
	}
	return &Signer{alg: HS256, method: jwt.SigningMethodHS256, key: secret, kid: kid}, nil
}

// NewSigner returns a signer for a private key: *rsa.PrivateKey (RS256, at
// least 2048 bits), *ecdsa.PrivateKey on P-256 (ES256) or
// ed25519.PrivateKey (EdDSA); kid, when not empty, goes into the header.
func NewSigner(key crypto.Signer, kid string) (*Signer, error) {
	switch k := key.(type) {
	case *rsa.PrivateKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("token: RSA key of %d bits is too small (the gateway needs at least 2048)", k.N.BitLen())
		}
		return &Signer{alg: RS256, method: jwt.SigningMethodRS256, key: k, kid: kid}, nil
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("token: EC key on %s; ES256 needs P-256", k.Curve.Params().Name)
		}
		return &Signer{alg: ES256, method: jwt.SigningMethodES256, key: k, kid: kid}, nil
	case ed25519.PrivateKey:
		return &Signer{alg: EdDSA, method: jwt.SigningMethodEdDSA, key: k, kid: kid}, nil
	default:
		return nil, fmt.Errorf("token: %T keys are not used by the gateway (RSA, EC P-256 or Ed25519)", key)
	}
}

// ParsePrivateKeyPEM parses the first private key in data: PKCS#8
// ("PRIVATE KEY", as [GenerateKey] writes), PKCS#1 ("RSA PRIVATE KEY") or
// SEC 1 ("EC PRIVATE KEY"). Errors never show key material.
func ParsePrivateKeyPEM(data []byte) (crypto.Signer, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("token: no PEM private key found (want -----BEGIN PRIVATE KEY-----)")
		}
		var key any
		var err error
		switch b.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(b.Bytes)
		default:
			continue // e.g. EC PARAMETERS before the key, or a certificate
		}
		if err != nil {
			return nil, fmt.Errorf("token: PEM block %q: %w", b.Type, err)
		}
		s, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("token: %T is not a signing key", key)
		}
		return s, nil
	}
}

// Alg is the signer's algorithm: HS256, RS256, ES256 or EdDSA.
func (s *Signer) Alg() string { return s.alg }

// Mint returns a signed token for c. It fails, naming the claim, on what
// the gateway would refuse: a sub, name or room outside the protocol's
// limits (protocol.ValidateID, ValidateName), a hide list outside them
// (protocol.ValidateUserIDs, the rules of the gateway's decoder
// protocol.DecodeUserIDs: "token: hide_typing_from: at most 1000 user
// ids, got 1001"), or a TTL that is not positive.
func (s *Signer) Mint(c Claims) (string, error) {
	if err := protocol.ValidateID("sub", c.Subject); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	if err := protocol.ValidateName("name", c.Name); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	if c.TTL <= 0 {
		return "", fmt.Errorf("token: exp: TTL must be positive, got %s", c.TTL)
	}
	for i, r := range c.Rooms {
		if err := protocol.ValidateID("rooms["+strconv.Itoa(i)+"]", r); err != nil {
			return "", fmt.Errorf("token: %w", err)
		}
	}
	if err := protocol.ValidateUserIDs(protocol.HideTypingFrom, c.HideTypingFrom); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	now := c.Now
	if now.IsZero() {
		now = time.Now()
	}
	pl := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   c.Subject,
			Issuer:    c.Issuer,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(c.TTL)),
		},
		Name:           c.Name,
		Rooms:          c.Rooms,
		ShareTyping:    c.ShareTyping,
		HideTypingFrom: c.HideTypingFrom,
	}
	if len(c.Audience) > 0 {
		pl.Audience = jwt.ClaimStrings(c.Audience)
	}
	t := jwt.NewWithClaims(s.method, pl)
	if s.kid != "" {
		t.Header["kid"] = s.kid
	}
	out, err := t.SignedString(s.key)
	if err != nil {
		return "", fmt.Errorf("token: sign %s: %w", s.alg, err)
	}
	return out, nil
}
