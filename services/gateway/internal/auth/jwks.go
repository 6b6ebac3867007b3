package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
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
	// DefaultJWKSReload is how often the key set is re-read when no
	// interval is given: ELLIPSIS_JWKS_RELOAD's default (shared/config's
	// table; TestPackageDefaultsAreTheTable in services/gateway holds them
	// equal).
	DefaultJWKSReload = 10 * time.Second
	// UnknownKIDReloadEvery is the least time between two re-reads of a
	// JWKS file caused by tokens naming an unknown kid, so random kids
	// cannot turn every handshake into a file read. For a URL the least
	// time is the reload interval itself (see [JWKS]).
	UnknownKIDReloadEvery = time.Second
	// MinRSABits is the smallest RSA modulus accepted from the JWKS;
	// smaller keys are skipped with a warning.
	MinRSABits = 2048
	// MaxJWKSBytes bounds a JWKS document (file or HTTP response body):
	// larger ones are refused. Identity providers publish a handful of
	// keys, a few KiB.
	MaxJWKSBytes = 1 << 20
	// jwksErrLogEvery is the least time between two log lines about failed
	// re-reads (the metric counts every failure).
	jwksErrLogEvery = time.Minute
)

// JWKSOptions configure [NewJWKS]. Exactly one of File and URL is set.
type JWKSOptions struct {
	// File is a JWKS file (ELLIPSIS_JWKS_FILE).
	File string
	// URL is a JWKS endpoint (ELLIPSIS_JWKS_URL), usually the identity
	// provider's jwks_uri: https, or http to a loopback host (127.0.0.1,
	// ::1, localhost) for development and tests (package jwksurl, the rule
	// config.Validate applies to the setting).
	URL string
	// Reload is the re-read interval (ELLIPSIS_JWKS_RELOAD); zero means
	// [DefaultJWKSReload].
	Reload time.Duration
	// Timeout bounds each fetch of URL: connection, TLS handshake, headers
	// and body (ELLIPSIS_JWKS_TIMEOUT); zero means [DefaultJWKSTimeout].
	Timeout time.Duration
	// RootCAs are the CAs trusted for URL's certificate (ELLIPSIS_JWKS_CA);
	// nil means the system's.
	RootCAs *x509.CertPool
	// Log receives key-set changes and failures; nil discards them.
	Log *zap.Logger
	// OnRefreshError, when set, is called once for every failed re-read
	// after the start (the previous keys stay in use); the gateway counts
	// them (ellipsis_gateway_jwks_refresh_failures_total).
	OnRefreshError func(error)
}

// JWKS holds the public keys of a JWK Set (RFC 7517) for RS256, ES256 and
// EdDSA tokens, read from a file (ELLIPSIS_JWKS_FILE) or fetched from a URL
// (ELLIPSIS_JWKS_URL), parsed with github.com/MicahParks/jwkset and looked
// up by kid with github.com/MicahParks/keyfunc/v3.
//
// # Reloading a file
//
// The file is re-read on the request path, without a goroutine: a
// verification that finds the last check older than the reload interval
// re-reads the file first (one caller at a time, the others keep using the
// current keys), and a token naming a kid the set does not hold re-reads it
// at once (at most once per [UnknownKIDReloadEvery]). The content is
// compared by SHA-256, so a rewrite, a rename over the file and a
// Kubernetes ConfigMap symlink swap are all picked up, and an unchanged
// file costs one read. Rotation therefore works without any delay (the new
// kid triggers a read), and a removed key stops verifying within one
// interval.
//
// # Refreshing from a URL
//
// A goroutine fetches the URL every reload interval (±10% jitter, so
// gateways started together do not fetch together) until [JWKS.Close]. A
// token naming an unknown kid fetches at once, at most once per reload
// interval: concurrent verifications wait for that one fetch (at most the
// timeout), later ones within the interval are refused as unknown without
// a fetch, so random kids cannot turn handshakes into requests to the
// identity provider. Fetches are conditional (If-None-Match,
// If-Modified-Since with the validators of the set in use), so an unchanged
// set costs a 304. Every fetch has the timeout, follows at most 3
// redirects (each https, or http to loopback) and reads at most
// [MaxJWKSBytes]. The library's own HTTP storage (jwkset.NewStorageFromHTTP
// with keyfunc) is not used because it replaces the keys with whatever the
// URL serves, an empty set included, waits on its rate limiter inside the
// verification, and reads bodies without a bound.
//
// # Failures
//
// A source that cannot be read or parsed, or holds no usable key, keeps
// the previous keys: a half-written file or an identity provider that is
// down or serving an error page never locks every user out. Failures call
// OnRefreshError and are logged at most once a minute; a recovery is
// logged. At the start ([NewJWKS]) there are no previous keys, and the same
// failures are errors. Connections opened with a token whose key is later
// removed stay open until the token expires.
//
// # Which keys are used
//
// Keys with "use":"enc", symmetric keys (kty oct: HS256 uses
// ELLIPSIS_JWT_SECRET only), RSA keys below [MinRSABits], EC keys not on
// P-256, X25519 keys and keys whose "alg" is not RS256, ES256 or EdDSA are
// skipped with a warning. A key is only ever used for the alg of its type:
// RSA for RS256, P-256 for ES256, Ed25519 for EdDSA. Private key material
// is ignored (only public parts are parsed).
type JWKS struct {
	src        source
	interval   time.Duration
	forceEvery time.Duration // least time between two unknown-kid re-reads
	timeout    time.Duration // per read
	lazy       bool          // periodic re-reads on the request path (file)
	log        *zap.Logger
	onErr      func(error)
	now        func() time.Time

	cur       atomic.Pointer[keySet]
	lastCheck atomic.Int64 // unix ns of the last periodic re-read (lazy)

	ctx    context.Context // ends at Close; parent of every read
	cancel context.CancelFunc
	done   chan struct{} // closed when the refresh goroutine ends (URL)

	mu         sync.Mutex // guards the fields below; never held during a read
	flight     *flight    // the read in progress, if any
	lastForced time.Time
	lastSum    [32]byte // content of the keys in use
	failures   int      // failed re-reads since the last success
	lastErrLog time.Time
	unlogged   int // failures not logged since lastErrLog
}

// flight is one read of the source; waiters share its outcome.
type flight struct {
	done    chan struct{}
	changed bool // set before done is closed
}

// source is where a JWK Set comes from: a file or a URL.
type source interface {
	// read returns the document, at most MaxJWKSBytes; ctx bounds it. It
	// returns errNotModified when the source says the document is the one
	// last accepted.
	read(ctx context.Context) ([]byte, error)
	// accepted tells the source that the document of its last read is the
	// one in use (a URL then sends its validators on the next read).
	accepted()
	// setting names the source for errors and logs, e.g.
	// "ELLIPSIS_JWKS_URL https://idp.example/jwks" (no credentials).
	setting() string
}

// keySet is one parsed version of the source.
type keySet struct {
	kf   keyfunc.Keyfunc
	kids []string
}

// LoadJWKS reads and parses the JWKS file at path; it is NewJWKS with
// only File, Reload and Log set.
func LoadJWKS(path string, reload time.Duration, log *zap.Logger) (*JWKS, error) {
	return NewJWKS(context.Background(), JWKSOptions{File: path, Reload: reload, Log: log})
}

// NewJWKS reads the key set of o.File or o.URL once and, for a URL, starts
// the refresh goroutine (stop it with [JWKS.Close]). ctx bounds that first
// read besides o.Timeout. It fails, closed, when the options are invalid
// (both or neither source, a URL that is not https or loopback http), when
// the source cannot be read within the timeout, answers other than HTTP
// 200, is larger than [MaxJWKSBytes], is not a JWK Set, or holds no usable
// key; the error names the source.
func NewJWKS(ctx context.Context, o JWKSOptions) (*JWKS, error) {
	if o.Reload <= 0 {
		o.Reload = DefaultJWKSReload
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultJWKSTimeout
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.OnRefreshError == nil {
		o.OnRefreshError = func(error) {}
	}
	j := &JWKS{interval: o.Reload, timeout: o.Timeout, log: o.Log, onErr: o.OnRefreshError, now: time.Now}
	switch {
	case o.File != "" && o.URL != "":
		return nil, errors.New("auth: JWKS: set a file or a URL, not both")
	case o.File != "":
		j.src = fileSource(o.File)
		j.forceEvery = UnknownKIDReloadEvery
		j.lazy = true
	case o.URL != "":
		src, err := newURLSource(o.URL, o.Timeout, o.RootCAs)
		if err != nil {
			return nil, err
		}
		j.src = src
		j.forceEvery = o.Reload
	default:
		return nil, errors.New("auth: JWKS: no file or URL")
	}
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	data, err := j.src.read(rctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", j.src.setting(), err)
	}
	set, err := parseJWKS(data, j.log)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", j.src.setting(), err)
	}
	j.cur.Store(set)
	j.src.accepted()
	j.lastSum = sha256.Sum256(data)
	j.lastCheck.Store(j.now().UnixNano())
	j.ctx, j.cancel = context.WithCancel(context.Background())
	j.done = make(chan struct{})
	if j.lazy {
		close(j.done)
	} else {
		go j.loop()
	}
	j.log.Info("JWKS loaded", zap.String("source", j.src.setting()), zap.Strings("kids", set.kids))
	return j, nil
}

// Close stops the refresh goroutine (URL) and cancels a read in progress;
// the keys in use stay usable. Safe to call more than once.
func (j *JWKS) Close() {
	j.cancel()
	<-j.done
}

// KeyIDs lists the kids of the keys in use (empty strings for keys
// without a kid).
func (j *JWKS) KeyIDs() []string { return append([]string(nil), j.cur.Load().kids...) }

// loop re-reads the URL every interval ±10% until Close.
func (j *JWKS) loop() {
	defer close(j.done)
	for {
		d := j.interval - j.interval/10 + rand.N(j.interval/5+1)
		t := time.NewTimer(d)
		select {
		case <-j.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		j.refresh(refreshTimer)
	}
}

// Kinds of refresh.
const (
	refreshLazy   = iota // file: on the request path when the interval passed
	refreshForced        // a token names an unknown kid
	refreshTimer         // URL: the refresh goroutine
)

// refresh re-reads the source when kind allows it and reports whether the
// keys changed. At most one read runs at a time: a forced refresh that
// finds one running waits for it and shares its outcome, the others return
// false at once.
func (j *JWKS) refresh(kind int) bool {
	now := j.now()
	if kind == refreshLazy && now.UnixNano()-j.lastCheck.Load() < int64(j.interval) {
		return false
	}
	j.mu.Lock()
	if f := j.flight; f != nil {
		j.mu.Unlock()
		if kind != refreshForced {
			return false
		}
		<-f.done
		return f.changed
	}
	switch kind {
	case refreshLazy:
		if now.UnixNano()-j.lastCheck.Load() < int64(j.interval) {
			j.mu.Unlock()
			return false // another caller just read it
		}
		j.lastCheck.Store(now.UnixNano())
	case refreshForced:
		if !j.lastForced.IsZero() && now.Sub(j.lastForced) < j.forceEvery {
			j.mu.Unlock()
			return false // forced reads are spent for this interval
		}
		j.lastForced = now
	}
	f := &flight{done: make(chan struct{})}
	j.flight = f
	j.mu.Unlock()

	f.changed = j.reread()

	j.mu.Lock()
	j.flight = nil
	j.mu.Unlock()
	close(f.done)
	return f.changed
}

// reread reads and parses the source once (the caller holds the flight)
// and swaps the keys in when the content changed and is usable.
func (j *JWKS) reread() bool {
	ctx, cancel := context.WithTimeout(j.ctx, j.timeout)
	data, err := j.src.read(ctx)
	cancel()
	if errors.Is(err, errNotModified) {
		j.succeeded()
		return false
	}
	if err != nil {
		if j.ctx.Err() == nil { // not a read cut short by Close
			j.failed(fmt.Errorf("read: %w", err))
		}
		return false
	}
	sum := sha256.Sum256(data)
	j.mu.Lock()
	same := sum == j.lastSum
	j.mu.Unlock()
	if same {
		j.src.accepted()
		j.succeeded()
		return false
	}
	set, err := parseJWKS(data, j.log)
	if err != nil {
		j.failed(fmt.Errorf("changed but not usable: %w", err))
		return false
	}
	j.mu.Lock()
	j.lastSum = sum
	j.mu.Unlock()
	j.cur.Store(set)
	j.src.accepted()
	j.succeeded()
	j.log.Info("JWKS reloaded", zap.String("source", j.src.setting()), zap.Strings("kids", set.kids))
	return true
}

// failed counts and logs (rate-limited) a failed re-read.
func (j *JWKS) failed(err error) {
	j.onErr(err)
	now := j.now()
	j.mu.Lock()
	j.failures++
	log := j.lastErrLog.IsZero() || now.Sub(j.lastErrLog) >= jwksErrLogEvery
	suppressed := j.unlogged
	if log {
		j.lastErrLog, j.unlogged = now, 0
	} else {
		j.unlogged++
	}
	failures := j.failures
	j.mu.Unlock()
	if log {
		j.log.Error("JWKS re-read failed; keeping the previous keys", zap.String("source", j.src.setting()),
			zap.Error(err), zap.Int("failures_in_a_row", failures), zap.Int("failures_not_logged", suppressed))
	}
}

// succeeded ends a run of failures (logging the recovery).
func (j *JWKS) succeeded() {
	j.mu.Lock()
	failures := j.failures
	j.failures, j.unlogged, j.lastErrLog = 0, 0, time.Time{}
	j.mu.Unlock()
	if failures > 0 {
		j.log.Info("JWKS re-read works again", zap.String("source", j.src.setting()), zap.Int("failures_in_a_row", failures))
	}
}

// fileSource is a JWKS file.
type fileSource string

func (f fileSource) setting() string { return "ELLIPSIS_JWKS_FILE " + string(f) }

func (fileSource) accepted() {}

func (f fileSource) read(context.Context) ([]byte, error) {
	fh, err := os.Open(string(f))
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return readAtMost(fh, MaxJWKSBytes)
}

// readAtMost reads r to the end, failing when it holds more than max bytes.
func readAtMost(r io.Reader, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("larger than %d bytes (MaxJWKSBytes)", max)
	}
	return data, nil
}

// unknownKeyError: the token names a kid the key set does not hold.
type unknownKeyError struct{ kid string }

func (e *unknownKeyError) Error() string {
	return "token signing key " + quoteShort(e.kid) + " is unknown (not in the JWKS)"
}

// Key returns the key that verifies t (a jwt.Keyfunc): the key named by its
// kid, or, without a kid, every key of the type its alg needs.
func (j *JWKS) Key(t *jwt.Token) (any, error) {
	if j.lazy {
		j.refresh(refreshLazy)
	}
	key, err := j.lookup(t)
	if errors.Is(err, jwkset.ErrKeyNotFound) {
		// Looked up again whatever refresh reports: another caller's read
		// may have brought the key in between the miss and this refresh
		// (which then finds the forced reads spent and reads nothing).
		j.refresh(refreshForced)
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
