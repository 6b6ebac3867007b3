package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/jwksurl"
)

// DefaultJWKSTimeout bounds each fetch of a JWKS URL when no timeout is
// given: ELLIPSIS_JWKS_TIMEOUT's default (shared/config's table;
// TestPackageDefaultsAreTheTable in services/gateway holds them equal).
const DefaultJWKSTimeout = 5 * time.Second

// maxJWKSRedirects is how many redirects a JWKS fetch follows.
const maxJWKSRedirects = 3

// errNotModified: the URL answered 304 to the validators of the document
// in use.
var errNotModified = errors.New("not modified")

// urlSource fetches a JWKS with GET, conditional on the ETag and
// Last-Modified of the document in use (RFC 9110 section 13.1), so an
// unchanged set costs a 304 without a body.
type urlSource struct {
	url    string // as configured
	shown  string // for errors and logs: without user:password
	client *http.Client

	// Only touched by read and accepted, which JWKS never runs
	// concurrently (one flight at a time).
	inUse, last validators
}

// validators are a response's ETag and Last-Modified.
type validators struct{ etag, lastModified string }

// newURLSource checks raw (package jwksurl) and builds its HTTP client:
// proxy from the environment, TLS 1.2 or later verified against roots
// (nil: the system's), timeout on the whole exchange, redirects checked
// like the URL itself.
func newURLSource(raw string, timeout time.Duration, roots *x509.CertPool) (*urlSource, error) {
	if err := jwksurl.Check(raw); err != nil {
		return nil, fmt.Errorf("auth: ELLIPSIS_JWKS_URL: %w", err)
	}
	u, _ := url.Parse(raw) // Check parsed it
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	tr.ResponseHeaderTimeout = timeout
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1, 1
	return &urlSource{
		url:   raw,
		shown: u.Redacted(),
		client: &http.Client{
			Transport: tr,
			Timeout:   timeout,
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if len(via) > maxJWKSRedirects {
					return fmt.Errorf("more than %d redirects", maxJWKSRedirects)
				}
				return jwksurl.Check(req.URL.String())
			},
		},
	}, nil
}

func (s *urlSource) setting() string { return "ELLIPSIS_JWKS_URL " + s.shown }

func (s *urlSource) accepted() { s.inUse = s.last }

func (s *urlSource) read(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	if s.inUse.etag != "" {
		req.Header.Set("If-None-Match", s.inUse.etag)
	}
	if s.inUse.lastModified != "" {
		req.Header.Set("If-Modified-Since", s.inUse.lastModified)
	}
	s.last = validators{}
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the setting already
		}
		if errors.Is(err, context.DeadlineExceeded) || (ue != nil && ue.Timeout()) {
			return nil, fmt.Errorf("no answer within the timeout (ELLIPSIS_JWKS_TIMEOUT): %w", err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified && s.inUse != (validators{}) {
		return nil, errNotModified
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d (want 200)", resp.StatusCode)
	}
	if resp.ContentLength > MaxJWKSBytes {
		return nil, fmt.Errorf("response of %d bytes is larger than %d bytes (MaxJWKSBytes)", resp.ContentLength, MaxJWKSBytes)
	}
	data, err := readAtMost(resp.Body, MaxJWKSBytes)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("response body not read within the timeout (ELLIPSIS_JWKS_TIMEOUT): %w", err)
		}
		return nil, fmt.Errorf("response body: %w", err)
	}
	s.last = validators{etag: resp.Header.Get("ETag"), lastModified: resp.Header.Get("Last-Modified")}
	return data, nil
}
