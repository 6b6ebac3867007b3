package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// jwksServer is an identity provider's JWKS endpoint whose answer the test
// changes: a body, a status, or no answer at all (hang).
type jwksServer struct {
	*httptest.Server
	fetches     atomic.Int64
	notModified atomic.Int64 // 304 answers (conditional)
	conditional bool         // answer with an ETag and honour If-None-Match

	mu     sync.Mutex
	body   []byte
	status int
	hang   bool
}

func newJWKSServer(t *testing.T, tls bool, body []byte) *jwksServer {
	t.Helper()
	s := &jwksServer{body: body, status: http.StatusOK}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		body, status, hang := s.body, s.status, s.hang
		s.mu.Unlock()
		if hang {
			<-r.Context().Done() // the client gives up
			// Abort: returning would send an empty 200, which a client
			// still reading (its close racing the reply) takes as an
			// empty, invalid JWKS instead of a timeout.
			panic(http.ErrAbortHandler)
		}
		if s.conditional && status == http.StatusOK {
			sum := sha256.Sum256(body)
			etag := `"` + hex.EncodeToString(sum[:8]) + `"`
			w.Header().Set("ETag", etag)
			if r.Header.Get("If-None-Match") == etag {
				s.notModified.Add(1)
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.WriteHeader(status)
		w.Write(body)
	})
	if tls {
		s.Server = httptest.NewTLSServer(h)
	} else {
		s.Server = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) serve(status int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body, s.hang = status, body, false
}

func (s *jwksServer) hangUp() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = true
}

// roots trusts the test server's certificate (what ELLIPSIS_JWKS_CA does).
func (s *jwksServer) roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.Certificate())
	return p
}

// urlJWKS starts a JWKS on srv; failures counts OnRefreshError calls.
func urlJWKS(t *testing.T, srv *jwksServer, reload, timeout time.Duration, failures *atomic.Int64) *JWKS {
	t.Helper()
	j, err := NewJWKS(context.Background(), JWKSOptions{
		URL: srv.URL + "/.well-known/jwks.json", Reload: reload, Timeout: timeout, RootCAs: srv.roots(),
		OnRefreshError: func(error) {
			if failures != nil {
				failures.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Close)
	return j
}

type urlTokens struct{ a, b, c string }

func newURLTokens(t *testing.T) urlTokens {
	k := testkit.Keys()
	c := jwt.MapClaims{"sub": "u", "exp": time.Now().Add(time.Hour).Unix()}
	return urlTokens{
		a: testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "a", c),
		b: testkit.SignJWT(t, jwt.SigningMethodEdDSA, k.Ed, "b", c),
		c: testkit.SignJWT(t, jwt.SigningMethodES256, k.EC, "c", c),
	}
}

func jwkA() map[string]any { return testkit.RSAJWK("a", &testkit.Keys().RSA.PublicKey) }
func jwkB() map[string]any { return testkit.EdJWK("b", testkit.Keys().Ed.Public().(ed25519.PublicKey)) }
func jwkC() map[string]any { return testkit.ECJWK("c", &testkit.Keys().EC.PublicKey) }

// A token naming an unknown kid fetches the URL at once, one fetch for
// all the verifications waiting on it, and at most once per interval.
func TestJWKSURLUnknownKID(t *testing.T) {
	srv := newJWKSServer(t, true, testkit.JWKSJSON(jwkA()))
	j := urlJWKS(t, srv, time.Hour, 10*time.Second, nil)
	now := time.Now()
	var clock sync.Mutex
	j.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	a, _ := NewJWT(JWTOptions{JWKS: j})
	tok := newURLTokens(t)
	verify := func(tok string) error { _, err := a.Verify(tok); return err }
	if err := verify(tok.a); err != nil {
		t.Fatal(err)
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches after start, want 1", n)
	}

	// Rotation: b replaces a. Many handshakes with the new kid at once
	// cause one fetch; a is gone afterwards.
	srv.serve(200, testkit.JWKSJSON(jwkB()))
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() { errs <- verify(tok.b) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("new kid after rotation: %v", err)
		}
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after 20 verifications of a new kid, want 2", n)
	}
	if err := verify(tok.a); err == nil || !strings.Contains(err.Error(), `"a" is unknown`) {
		t.Fatalf("removed key: %v", err)
	}
	if !slices.Equal(j.KeyIDs(), []string{"b"}) {
		t.Fatalf("kids %v, want [b]", j.KeyIDs())
	}

	// Within the interval, unknown kids fetch nothing and are refused.
	srv.serve(200, testkit.JWKSJSON(jwkB(), jwkC()))
	for range 5 {
		if err := verify(tok.c); err == nil {
			t.Fatal("unknown-kid fetch not rate limited")
		}
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want still 2 within the interval", n)
	}
	clock.Lock()
	now = now.Add(time.Hour)
	clock.Unlock()
	if err := verify(tok.c); err != nil {
		t.Fatalf("unknown kid after the interval: %v", err)
	}
	if n := srv.fetches.Load(); n != 3 {
		t.Fatalf("%d fetches, want 3", n)
	}
}

// The refresh goroutine picks up a rotation and drops removed keys.
func TestJWKSURLPeriodicRefresh(t *testing.T) {
	srv := newJWKSServer(t, true, testkit.JWKSJSON(jwkA()))
	j := urlJWKS(t, srv, 100*time.Millisecond, 10*time.Second, nil)
	a, _ := NewJWT(JWTOptions{JWKS: j})
	tok := newURLTokens(t)
	srv.serve(200, testkit.JWKSJSON(jwkB()))
	testkit.WaitFor(t, 20*time.Second, "the refresh to pick up kid b", func() bool { return slices.Equal(j.KeyIDs(), []string{"b"}) })
	before := srv.fetches.Load()
	if _, err := a.Verify(tok.b); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Verify(tok.a); err == nil {
		t.Fatal("removed key still verifies")
	}
	// Close stops the goroutine: no fetch afterwards.
	j.Close()
	n := srv.fetches.Load()
	time.Sleep(300 * time.Millisecond)
	if got := srv.fetches.Load(); got != n || n < before {
		t.Fatalf("fetches went from %d to %d after Close", n, got)
	}
}

// A server that does not answer: the start fails after the timeout; after
// the start, refreshes time out, the old keys keep working and failures
// are counted.
func TestJWKSURLHangingServer(t *testing.T) {
	srv := newJWKSServer(t, true, nil)
	srv.hangUp()
	start := time.Now()
	_, err := NewJWKS(context.Background(), JWKSOptions{URL: srv.URL, Timeout: 300 * time.Millisecond, RootCAs: srv.roots()})
	if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_JWKS_URL") || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("start against a hanging server: %v", err)
	}
	t.Logf("start against a hanging server: %v", err)
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("start took %s with a 300ms timeout", d)
	}

	srv.serve(200, testkit.JWKSJSON(jwkA()))
	var failures atomic.Int64
	j := urlJWKS(t, srv, 100*time.Millisecond, 2*time.Second, &failures)
	a, _ := NewJWT(JWTOptions{JWKS: j})
	tok := newURLTokens(t)
	srv.hangUp()
	testkit.WaitFor(t, 20*time.Second, "two failed refreshes", func() bool { return failures.Load() >= 2 })
	if _, err := a.Verify(tok.a); err != nil {
		t.Fatalf("old key while the URL hangs: %v", err)
	}
	// An unknown kid waits for at most one timed-out fetch.
	if _, err := a.Verify(tok.b); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("unknown kid while the URL hangs: %v", err)
	}
	// Recovery.
	srv.serve(200, testkit.JWKSJSON(jwkA(), jwkB()))
	testkit.WaitFor(t, 20*time.Second, "recovery", func() bool { return slices.Equal(j.KeyIDs(), []string{"a", "b"}) })
}

// A server that answers garbage: the start fails naming the problem; after
// the start the old keys are kept and failures counted.
func TestJWKSURLGarbage(t *testing.T) {
	big := append([]byte(`{"keys":[`), make([]byte, MaxJWKSBytes)...)
	cases := []struct {
		name   string
		status int
		body   []byte
		want   string
	}{
		{"html", 200, []byte("<html>login</html>"), "not a JWK Set"},
		{"empty set", 200, []byte(`{"keys":[]}`), "no usable"},
		{"no keys", 200, []byte(`{}`), "no usable"},
		{"only symmetric", 200, []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`), "no usable"},
		{"server error", 500, testkit.JWKSJSON(jwkA()), "HTTP 500"},
		{"too large", 200, big, "larger than"},
	}
	for _, c := range cases {
		srv := newJWKSServer(t, true, c.body)
		srv.serve(c.status, c.body)
		_, err := NewJWKS(context.Background(), JWKSOptions{URL: srv.URL, RootCAs: srv.roots()})
		t.Logf("start with %s: %v", c.name, err)
		if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_JWKS_URL") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("start with %s: %v, want an error naming ELLIPSIS_JWKS_URL and %q", c.name, err, c.want)
		}
	}

	srv := newJWKSServer(t, true, testkit.JWKSJSON(jwkA()))
	var failures atomic.Int64
	j := urlJWKS(t, srv, 100*time.Millisecond, 5*time.Second, &failures)
	a, _ := NewJWT(JWTOptions{JWKS: j})
	tok := newURLTokens(t)
	for _, c := range cases {
		srv.serve(c.status, c.body)
		n := failures.Load()
		testkit.WaitFor(t, 20*time.Second, "a failed refresh with "+c.name, func() bool { return failures.Load() > n })
		if _, err := a.Verify(tok.a); err != nil {
			t.Fatalf("old key after %s: %v", c.name, err)
		}
	}
}

// The start fails without trusting the server's certificate, and on a
// URL that is neither https nor loopback http.
func TestJWKSURLRefusals(t *testing.T) {
	srv := newJWKSServer(t, true, testkit.JWKSJSON(jwkA()))
	if _, err := NewJWKS(context.Background(), JWKSOptions{URL: srv.URL}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted certificate: %v", err)
	}
	for _, u := range []string{"http://idp.example/jwks", "ftp://127.0.0.1/jwks", "https:///jwks", "/jwks", "://"} {
		if _, err := NewJWKS(context.Background(), JWKSOptions{URL: u}); err == nil || !strings.Contains(err.Error(), "ELLIPSIS_JWKS_URL") {
			t.Errorf("%q: %v", u, err)
		}
	}
	if _, err := NewJWKS(context.Background(), JWKSOptions{URL: srv.URL, File: "x"}); err == nil {
		t.Error("file and URL accepted together")
	}
	// A redirect may not leave https for plain http elsewhere.
	redir := httptest.NewTLSServer(http.RedirectHandler("http://idp.example/jwks", http.StatusFound))
	defer redir.Close()
	p := x509.NewCertPool()
	p.AddCert(redir.Certificate())
	if _, err := NewJWKS(context.Background(), JWKSOptions{URL: redir.URL, RootCAs: p}); err == nil || !strings.Contains(err.Error(), "https") {
		t.Errorf("redirect to http: %v", err)
	}
	// Plain http to loopback works (development).
	plain := newJWKSServer(t, false, testkit.JWKSJSON(jwkA()))
	j, err := NewJWKS(context.Background(), JWKSOptions{URL: plain.URL})
	if err != nil {
		t.Fatalf("loopback http: %v", err)
	}
	j.Close()
	j.Close() // twice is fine
	// A cancelled start context fails the start.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewJWKS(ctx, JWKSOptions{URL: plain.URL}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled start: %v", err)
	}
}

// Refreshes are conditional: an unchanged set costs a 304, and the
// validators sent are those of the set in use, never of garbage that was
// refused (else the garbage would look "not modified" and its failures
// would stop being counted).
func TestJWKSURLConditional(t *testing.T) {
	srv := newJWKSServer(t, true, nil)
	srv.conditional = true
	srv.serve(200, testkit.JWKSJSON(jwkA()))
	var failures atomic.Int64
	j := urlJWKS(t, srv, 100*time.Millisecond, 5*time.Second, &failures)
	a, _ := NewJWT(JWTOptions{JWKS: j})
	tok := newURLTokens(t)
	testkit.WaitFor(t, 20*time.Second, "304 answers", func() bool { return srv.notModified.Load() >= 3 })
	if _, err := a.Verify(tok.a); err != nil || failures.Load() != 0 {
		t.Fatalf("after 304s: %v, %d failures", err, failures.Load())
	}
	srv.serve(200, []byte("<html>oops</html>"))
	testkit.WaitFor(t, 20*time.Second, "failures to keep being counted", func() bool { return failures.Load() >= 3 })
	srv.serve(200, testkit.JWKSJSON(jwkA())) // back to the set in use: 304 again
	n := srv.notModified.Load()
	testkit.WaitFor(t, 20*time.Second, "304 for the set in use", func() bool { return srv.notModified.Load() > n })
	if _, err := a.Verify(tok.a); err != nil {
		t.Fatal(err)
	}
	srv.serve(200, testkit.JWKSJSON(jwkA(), jwkB()))
	testkit.WaitFor(t, 20*time.Second, "the changed set", func() bool { return slices.Equal(j.KeyIDs(), []string{"a", "b"}) })
}
