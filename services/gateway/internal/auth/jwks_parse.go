package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"go.uber.org/zap"
)

// parseJWKS parses a JWK Set and keeps its usable signature keys; every
// other key is skipped with a warning naming its index and why.
func parseJWKS(data []byte, log *zap.Logger) (*keySet, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a JWK Set (JSON object with \"keys\"): %w", err)
	}
	store := jwkset.NewMemoryStorage()
	set := &keySet{}
	seen := map[string]bool{}
	for i, r := range raw.Keys {
		jwk, kid, why, fields := usableKey(r, seen)
		if why != "" {
			log.Warn("JWKS key skipped: "+why, append(fields, zap.Int("index", i))...)
			continue
		}
		if err := store.KeyWrite(context.Background(), jwk); err != nil {
			return nil, err
		}
		seen[kid] = true
		set.kids = append(set.kids, kid)
	}
	if len(set.kids) == 0 {
		return nil, errors.New("no usable RS256, ES256 or EdDSA key")
	}
	kf, err := keyfunc.New(keyfunc.Options{Storage: store})
	if err != nil {
		return nil, err
	}
	set.kf = kf
	return set, nil
}

// jwkHead is the members of a JWK that decide whether it is used.
type jwkHead struct {
	KTY string `json:"kty"`
	KID string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
}

// usableKey returns the key r holds and its kid, or, when it is no usable
// signature key or its kid is in seen, why (with the fields to log).
func usableKey(r json.RawMessage, seen map[string]bool) (jwk jwkset.JWK, kid, why string, fields []zap.Field) {
	var head jwkHead
	if err := json.Unmarshal(r, &head); err != nil {
		return jwk, "", "not a JSON object", []zap.Field{zap.Error(err)}
	}
	kidField := zap.String("kid", head.KID)
	if why := head.skip(seen); why != "" {
		return jwk, head.KID, why, []zap.Field{kidField}
	}
	jwk, err := jwkset.NewJWKFromRawJSON(r, jwkset.JWKMarshalOptions{Private: false}, jwkset.JWKValidateOptions{})
	if err != nil {
		return jwk, head.KID, "unsupported or invalid key", []zap.Field{kidField, zap.Error(err)}
	}
	if why := keySkip(jwk.Key(), head.Alg); why != "" {
		return jwk, head.KID, why, []zap.Field{kidField}
	}
	return jwk, head.KID, "", nil
}

// skip is why a key with head is not used, read before its key material:
// an encryption key, a symmetric one, an alg other than RS256, ES256 or
// EdDSA, or a kid already kept; "" otherwise.
func (head jwkHead) skip(seen map[string]bool) string {
	switch {
	case head.Use == "enc":
		return "use is enc"
	case head.KTY == "oct":
		return "symmetric key (HS256 uses ELLIPSIS_JWT_SECRET only)"
	case head.Alg != "" && head.Alg != AlgRS256 && head.Alg != AlgES256 && head.Alg != AlgEdDSA:
		return "alg " + strconv.Quote(head.Alg) + " is not RS256, ES256 or EdDSA"
	case head.KID != "" && seen[head.KID]:
		return "duplicate kid"
	}
	return ""
}

// keySkip is why a public key with alg ("" when the JWK names none) is not
// used: an RSA key under MinRSABits or not for RS256, an EC key not on
// P-256 for ES256, an Ed25519 key not for EdDSA, or any other type; ""
// otherwise.
func keySkip(key any, alg string) string {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < MinRSABits {
			return fmt.Sprintf("RSA key of %d bits (at least %d)", k.N.BitLen(), MinRSABits)
		}
		if alg != "" && alg != AlgRS256 {
			return "RSA key with alg " + alg
		}
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() || (alg != "" && alg != AlgES256) {
			return "EC key not on P-256 for ES256"
		}
	case ed25519.PublicKey:
		if alg != "" && alg != AlgEdDSA {
			return "Ed25519 key with alg " + alg
		}
	default:
		return fmt.Sprintf("key type %T is not used for signatures here", k)
	}
	return ""
}
