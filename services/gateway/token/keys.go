package token

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/MicahParks/jwkset"
)

// RSABits is the size of generated RSA keys.
const RSABits = 2048

// Key is a generated signing key.
type Key struct {
	// Alg is RS256, ES256 or EdDSA.
	Alg string
	// KID is the key id: the RFC 7638 JWK thumbprint (SHA-256,
	// base64url), so the same key always gets the same kid.
	KID string
	// Private is the key; PrivatePEM the same as PKCS#8 PEM.
	Private    crypto.Signer
	PrivatePEM []byte
	// JWKS is a JWK Set (RFC 7517) holding the public key with kid, alg
	// and "use":"sig", for ELLIPSIS_JWKS_FILE or a JWKS URL.
	JWKS []byte
}

// GenerateKey makes a new key for alg (RS256, ES256 or EdDSA; case does
// not matter: "rs256" works).
func GenerateKey(alg string) (*Key, error) {
	var priv crypto.Signer
	var err error
	var a jwkset.ALG
	switch strings.ToUpper(alg) {
	case RS256:
		priv, err = rsa.GenerateKey(rand.Reader, RSABits)
		a = jwkset.AlgRS256
	case ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		a = jwkset.AlgES256
	case strings.ToUpper(EdDSA):
		_, priv, err = ed25519.GenerateKey(rand.Reader)
		a = jwkset.AlgEdDSA
	default:
		return nil, fmt.Errorf("token: cannot generate a key for %q (rs256, es256 or eddsa)", alg)
	}
	if err != nil {
		return nil, fmt.Errorf("token: generate %s key: %w", alg, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("token: encode private key: %w", err)
	}
	k := &Key{Alg: string(a), Private: priv, PrivatePEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})}
	if k.KID, err = Thumbprint(priv.Public()); err != nil {
		return nil, err
	}
	if k.JWKS, err = PublicJWKS(priv.Public(), k.Alg, k.KID); err != nil {
		return nil, err
	}
	return k, nil
}

// PublicJWKS returns a JWK Set holding pub with alg, kid and "use":"sig".
func PublicJWKS(pub crypto.PublicKey, alg, kid string) ([]byte, error) {
	jwk, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{
		Metadata: jwkset.JWKMetadataOptions{ALG: jwkset.ALG(alg), KID: kid, USE: jwkset.UseSig},
	})
	if err != nil {
		return nil, fmt.Errorf("token: public JWK: %w", err)
	}
	out, err := json.MarshalIndent(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// Thumbprint returns the RFC 7638 JWK thumbprint of pub (SHA-256 of the
// required members in lexical order, base64url without padding).
func Thumbprint(pub crypto.PublicKey) (string, error) {
	jwk, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{})
	if err != nil {
		return "", fmt.Errorf("token: thumbprint: %w", err)
	}
	m := jwk.Marshal()
	var members string
	switch m.KTY {
	case jwkset.KtyRSA:
		members = fmt.Sprintf(`{"e":%q,"kty":"RSA","n":%q}`, m.E, m.N)
	case jwkset.KtyEC:
		members = fmt.Sprintf(`{"crv":%q,"kty":"EC","x":%q,"y":%q}`, m.CRV, m.X, m.Y)
	case jwkset.KtyOKP:
		members = fmt.Sprintf(`{"crv":%q,"kty":"OKP","x":%q}`, m.CRV, m.X)
	default:
		return "", fmt.Errorf("token: thumbprint of a %s key", m.KTY)
	}
	sum := sha256.Sum256([]byte(members))
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}
