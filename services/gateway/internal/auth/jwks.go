package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
)

// JWKS reload behaviour.
const (
	// DefaultJWKSReload is how often the file is re-read when no interval
	// is given (config.DefaultJWKSReload).
	DefaultJWKSReload = 10 * time.Second
	// UnknownKIDReloadEvery is the least time between two re-reads caused
	// by tokens naming an unknown kid, so random kids cannot turn every
	// handshake into a file read.
	UnknownKIDReloadEvery = time.Second
	// MinRSABits is the smallest RSA modulus accepted from the JWKS file;
	// smaller keys are skipped with a warning.
	MinRSABits = 2048
)

// JWKS holds the public keys of a JWKS file (ELLIPSIS_JWKS_FILE) for
// RS256, ES256 and EdDSA tokens, parsed with github.com/MicahParks/jwkset
// and looked up by kid with github.com/MicahParks/keyfunc/v3.
//
// # Reloading
//
// keyfunc and jwkset refresh remote (HTTP) JWK sets but have no file
// source, so the file is re-read here, on the request path and without a
// goroutine: a verification that finds the last check older than the
// reload interval re-reads the file first (one caller at a time, the others
// keep using the current keys), and a token naming a kid the set does not
// hold re-reads it at once (at most once per [UnknownKIDReloadEvery]). The
// content is compared by SHA-256, so a rewrite, a rename over the file and
// a Kubernetes ConfigMap symlink swap are all picked up, and an unchanged
// file costs one read. Rotation therefore works without any delay (the new
// kid triggers a read), and a removed key stops verifying within one
// interval.
//
// A file that cannot be read or parsed, or holds no usable key, keeps the
// previous keys (an error is logged once per distinct content): a
// half-written file never locks every user out. Connections opened with a
// token whose key is later removed stay open until the token expires.
//
// # Which keys are used
//
// Keys with "use":"enc", symmetric keys (kty oct: HS256 uses
// ELLIPSIS_JWT_SECRET only), RSA keys below [MinRSABits], EC keys not on
// P-256, X25519 keys and keys whose "alg" is not RS256, ES256 or EdDSA are
// skipped with a warning. A key is only ever used for the alg of its type:
// RSA for RS256, P-256 for ES256, Ed25519 for EdDSA. Private key material
// in the file is ignored (only public parts are parsed).
type JWKS struct {
	path     string
	interval time.Duration
	log      *zap.Logger
	now      func() time.Time

	cur       atomic.Pointer[keySet]
	lastCheck atomic.Int64 // unix ns of the last periodic check

	mu         sync.Mutex // serialises reads of the file
	lastForced time.Time
	lastSum    [32]byte // content of the last read, usable or not
}

// keySet is one parsed version of the file.
type keySet struct {
	kf   keyfunc.Keyfunc
	kids []string
}

// LoadJWKS reads and parses the JWKS file at path. It fails when the file
// cannot be read, is not a JWK Set, or holds no usable key. reload is the
// re-read interval (zero: [DefaultJWKSReload]); log may be nil.
func LoadJWKS(path string, reload time.Duration, log *zap.Logger) (*JWKS, error) {
	if reload <= 0 {
		reload = DefaultJWKSReload
	}
	if log == nil {
		log = zap.NewNop()
	}
	j := &JWKS{path: path, interval: reload, log: log, now: time.Now}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: JWKS file: %w", err)
	}
	set, err := parseJWKS(data, log)
	if err != nil {
		return nil, fmt.Errorf("auth: JWKS file %s: %w", path, err)
	}
	j.cur.Store(set)
	j.lastSum = sha256.Sum256(data)
	j.lastCheck.Store(j.now().UnixNano())
	log.Info("JWKS loaded", zap.String("path", path), zap.Strings("kids", set.kids))
	return j, nil
}

// KeyIDs lists the kids of the keys in use (empty strings for keys
// without a kid).
func (j *JWKS) KeyIDs() []string { return append([]string(nil), j.cur.Load().kids...) }

// unknownKeyError: the token names a kid the file does not hold.
type unknownKeyError struct{ kid string }

func (e *unknownKeyError) Error() string {
	return "token signing key " + quoteShort(e.kid) + " is unknown (not in the JWKS)"
}

// Key returns the key that verifies t (a jwt.Keyfunc): the key named by its
// kid, or, without a kid, every key of the type its alg needs.
func (j *JWKS) Key(t *jwt.Token) (any, error) {
	j.reload(false)
	key, err := j.lookup(t)
	if errors.Is(err, jwkset.ErrKeyNotFound) && j.reload(true) {
		key, err = j.lookup(t)
	}
	if errors.Is(err, jwkset.ErrKeyNotFound) {
		kid, _ := t.Header["kid"].(string)
		return nil, &unknownKeyError{kid: kid}
	}
	return key, err
}

func (j *JWKS) lookup(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	key, err := j.cur.Load().kf.Keyfunc(t)
	if err != nil {
		return nil, err
	}
	if set, ok := key.(jwt.VerificationKeySet); ok {
		var keep []jwt.VerificationKey
		for _, k := range set.Keys {
			if keyFits(alg, k) {
				keep = append(keep, k)
			}
		}
		if len(keep) == 0 {
			return nil, fmt.Errorf("auth: no %s key in the JWKS", alg)
		}
		return jwt.VerificationKeySet{Keys: keep}, nil
	}
	if !keyFits(alg, key) {
		return nil, fmt.Errorf("auth: JWKS key %T does not fit alg %s", key, alg)
	}
	return key, nil
}

// keyFits reports whether key is the kind of public key alg verifies with.
func keyFits(alg string, key any) bool {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return alg == AlgRS256
	case *ecdsa.PublicKey:
		return alg == AlgES256 && k.Curve == elliptic.P256()
	case ed25519.PublicKey:
		return alg == AlgEdDSA
	}
	return false
}

// reload re-reads the file when a periodic check is due or, with force,
// when no forced read happened in the last UnknownKIDReloadEvery. It
// reports whether the keys changed.
func (j *JWKS) reload(force bool) bool {
	now := j.now()
	if !force && now.UnixNano()-j.lastCheck.Load() < int64(j.interval) {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case force && now.Sub(j.lastForced) >= UnknownKIDReloadEvery:
		j.lastForced = now
	case now.UnixNano()-j.lastCheck.Load() >= int64(j.interval):
	default:
		return false // another caller just read it, or forced reads are spent
	}
	j.lastCheck.Store(now.UnixNano())
	data, err := os.ReadFile(j.path)
	if err != nil {
		j.log.Error("JWKS file unreadable; keeping the previous keys", zap.String("path", j.path), zap.Error(err))
		return false
	}
	sum := sha256.Sum256(data)
	if sum == j.lastSum {
		return false
	}
	j.lastSum = sum
	set, err := parseJWKS(data, j.log)
	if err != nil {
		j.log.Error("JWKS file changed but is not usable; keeping the previous keys", zap.String("path", j.path), zap.Error(err))
		return false
	}
	j.cur.Store(set)
	j.log.Info("JWKS reloaded", zap.String("path", j.path), zap.Strings("kids", set.kids))
	return true
}

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
