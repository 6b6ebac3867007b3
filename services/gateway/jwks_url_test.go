package gateway_test

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ellipsis-chat/ellipsis/services/gateway"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// idp is an identity provider's JWKS endpoint over TLS whose answer the
// test changes; hang makes it never answer.
type idp struct {
	srv  *httptest.Server
	ca   string // PEM file trusting srv (ELLIPSIS_JWKS_CA)
	mu   sync.Mutex
	body []byte
	hang bool
}

func newIDP(t *testing.T, keys ...map[string]any) *idp {
	t.Helper()
	p := &idp{}
	p.set(keys...)
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		body, hang := p.body, p.hang
		p.mu.Unlock()
		if hang {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(body)
	}))
	t.Cleanup(p.srv.Close)
	p.ca = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p.ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *idp) set(keys ...map[string]any) {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	p.setRaw(b)
}

func (p *idp) setRaw(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.body, p.hang = b, false
}

func (p *idp) setHang() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hang = true
}

// Keys from ELLIPSIS_JWKS_URL over TLS with a custom
// CA; a rotated-in kid works at once, and while the URL serves garbage
// or hangs the last good keys keep working and failures are counted.
func TestJWKSURL(t *testing.T) {
	t.Parallel()
	k := testkit.Keys()
	p := newIDP(t, testkit.RSAJWK("a", &k.RSA.PublicKey))
	e := newEnv(t, func(c *config.Config) {
		c.Auth = config.AuthJWT
		c.JWKSURL = p.srv.URL + "/.well-known/jwks.json"
		c.JWKSCA = p.ca
		c.JWKSReload = time.Second
		c.JWKSTimeout = 2 * time.Second
	})
	base := "ws://" + e.srv.HTTPAddr() + "/v1/ws?access_token="
	exp := time.Now().Add(time.Hour).Unix()
	tokA := testkit.SignJWT(t, jwt.SigningMethodRS256, k.RSA, "a", jwt.MapClaims{"sub": "alice", "exp": exp})
	tokB := testkit.SignJWT(t, jwt.SigningMethodES256, k.EC, "b", jwt.MapClaims{"sub": "bob", "exp": exp})
	status := func(tok string) (int, string) { st, _, msg := handshake(t, base+tok, nil); return st, msg }

	if st, msg := status(tokA); st != 101 {
		t.Fatalf("key a: %d %s", st, msg)
	}
	p.set(ecJWK("b", k.EC))
	testkit.WaitFor(t, 5*time.Second, "the rotated-in key to be accepted", func() bool { st, _ := status(tokB); return st == 101 })
	testkit.WaitFor(t, 5*time.Second, "the removed key to be refused", func() bool {
		st, msg := status(tokA)
		return st == 401 && strings.Contains(msg, `"a" is unknown`)
	})

	const failures = `ellipsis_gateway_jwks_refresh_failures_total`
	p.setRaw([]byte("<html>maintenance</html>"))
	testkit.WaitFor(t, 5*time.Second, "a failed refresh to be counted", func() bool { return e.metric(failures) >= 1 })
	if st, msg := status(tokB); st != 101 {
		t.Fatalf("while the URL serves garbage: %d %s", st, msg)
	}
	p.setHang()
	n := e.metric(failures)
	testkit.WaitFor(t, 5*time.Second, "a timed-out refresh to be counted", func() bool { return e.metric(failures) > n })
	if st, msg := status(tokB); st != 101 {
		t.Fatalf("while the URL hangs: %d %s", st, msg)
	}
}

// The gateway does not start when the JWKS URL cannot give a usable key,
// or its CA file is unusable; the error names the setting.
func TestJWKSURLMustBeUsable(t *testing.T) {
	t.Parallel()
	k := testkit.Keys()
	good := newIDP(t, testkit.RSAJWK("a", &k.RSA.PublicKey))
	garbage := newIDP(t)
	garbage.setRaw([]byte("not json"))
	hung := newIDP(t)
	hung.setHang()
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	for name, tc := range map[string]struct {
		url, ca, want string
	}{
		"garbage":              {garbage.srv.URL, garbage.ca, "not a JWK Set"},
		"hangs":                {hung.srv.URL, hung.ca, "timeout"},
		"untrusted":            {good.srv.URL, "", "certificate"},
		"CA file missing":      {good.srv.URL, filepath.Join(t.TempDir(), "nope.pem"), "ELLIPSIS_JWKS_CA"},
		"CA file not PEM":      {good.srv.URL, notPEM, "ELLIPSIS_JWKS_CA"},
		"plain http elsewhere": {"http://idp.example/jwks", "", "must use https"},
	} {
		cfg := config.Default()
		cfg.JWKSURL, cfg.JWKSCA, cfg.JWKSTimeout = tc.url, tc.ca, 5*time.Second
		if name == "hangs" {
			cfg.JWKSTimeout = 300 * time.Millisecond
		}
		start := time.Now()
		_, err := gateway.New(gateway.Options{Config: cfg})
		if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_JWKS_") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error naming ELLIPSIS_JWKS_URL/CA and %q", name, err, tc.want)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("%s: New took %s with a %s timeout", name, d, cfg.JWKSTimeout)
		}
	}
	cfg := config.Default()
	cfg.JWKSURL, cfg.JWKSCA = good.srv.URL, good.ca
	s, err := gateway.New(gateway.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown(t.Context()) // stops the refresh without a Start
}
