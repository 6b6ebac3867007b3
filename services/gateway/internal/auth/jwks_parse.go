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

// parseJWKS parses a JWK Set and keeps its usable signature keys.
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
		skip := func(why string, fields ...zap.Field) {
			log.Warn("JWKS key skipped: "+why, append(fields, zap.Int("index", i))...)
		}
		var head struct {
			KTY string `json:"kty"`
			KID string `json:"kid"`
			Use string `json:"use"`
			Alg string `json:"alg"`
		}
		if err := json.Unmarshal(r, &head); err != nil {
			skip("not a JSON object", zap.Error(err))
			continue
		}
		kid := zap.String("kid", head.KID)
		switch {
		case head.Use == "enc":
			skip("use is enc", kid)
			continue
		case head.KTY == "oct":
			skip("symmetric key (HS256 uses ELLIPSIS_JWT_SECRET only)", kid)
			continue
		case head.Alg != "" && head.Alg != AlgRS256 && head.Alg != AlgES256 && head.Alg != AlgEdDSA:
			skip("alg "+strconv.Quote(head.Alg)+" is not RS256, ES256 or EdDSA", kid)
			continue
		case head.KID != "" && seen[head.KID]:
			skip("duplicate kid", kid)
			continue
		}
		jwk, err := jwkset.NewJWKFromRawJSON(r, jwkset.JWKMarshalOptions{Private: false}, jwkset.JWKValidateOptions{})
		if err != nil {
			skip("unsupported or invalid key", kid, zap.Error(err))
			continue
		}
		switch k := jwk.Key().(type) {
		case *rsa.PublicKey:
			if k.N.BitLen() < MinRSABits {
				skip(fmt.Sprintf("RSA key of %d bits (at least %d)", k.N.BitLen(), MinRSABits), kid)
				continue
			}
			if head.Alg != "" && head.Alg != AlgRS256 {
				skip("RSA key with alg "+head.Alg, kid)
				continue
			}
		case *ecdsa.PublicKey:
			if k.Curve != elliptic.P256() || (head.Alg != "" && head.Alg != AlgES256) {
				skip("EC key not on P-256 for ES256", kid)
				continue
			}
		case ed25519.PublicKey:
			if head.Alg != "" && head.Alg != AlgEdDSA {
				skip("Ed25519 key with alg "+head.Alg, kid)
				continue
			}
		default:
			skip(fmt.Sprintf("key type %T is not used for signatures here", k), kid)
			continue
		}
		if err := store.KeyWrite(context.Background(), jwk); err != nil {
			return nil, err
		}
		seen[head.KID] = true
		set.kids = append(set.kids, head.KID)
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
