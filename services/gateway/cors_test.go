package gateway_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/shared/config"
)

const (
	appOrigin   = "http://app.example:8099"
	otherOrigin = "http://evil.example:8099"
)

func withOrigins(origins ...string) envOpt {
	return func(c *config.Config) { c.AllowedOrigins = origins }
}

// do sends method u with headers h (pairs) and returns the answer, body read.
func do(t *testing.T, method, u string, h ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// corsHeaders lists the Access-Control-* headers of an answer.
func corsHeaders(resp *http.Response) []string {
	var out []string
	for k := range resp.Header {
		if strings.HasPrefix(k, "Access-Control-") {
			out = append(out, k)
		}
	}
	return out
}

// TestCORSAllowedOrigin: the endpoints a browser page calls answer an
// allowed origin with its own origin echoed and Vary: Origin.
func TestCORSAllowedOrigin(t *testing.T) {
	e := newEnv(t, withOrigins(appOrigin))
	e.startWorker("")
	for _, p := range []string{"/v1/config", "/v1/rooms/r1/typing?user=alice", "/sdk/v1/ellipsis.js"} {
		resp, body := do(t, http.MethodGet, e.httpURL(p), "Origin", appOrigin)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != appOrigin {
			t.Errorf("GET %s: Access-Control-Allow-Origin = %q, want %q", p, got, appOrigin)
		}
		if !strings.Contains(strings.Join(resp.Header.Values("Vary"), ","), "Origin") {
			t.Errorf("GET %s: Vary = %q, want Origin in it", p, resp.Header.Values("Vary"))
		}
		if got := resp.Header.Get("Access-Control-Allow-Credentials"); got != "" {
			t.Errorf("GET %s: Access-Control-Allow-Credentials = %q, want none", p, got)
		}
	}
}

// TestCORSPreflight: OPTIONS for a GET with an Authorization header is
// answered for an allowed origin, with a bounded max age.
func TestCORSPreflight(t *testing.T) {
	e := newEnv(t, withOrigins(appOrigin))
	resp, _ := do(t, http.MethodOptions, e.httpURL("/v1/rooms/r1/typing"),
		"Origin", appOrigin, "Access-Control-Request-Method", "GET",
		"Access-Control-Request-Headers", "authorization")
	if resp.StatusCode/100 != 2 {
		t.Fatalf("preflight: status %d, want 2xx", resp.StatusCode)
	}
	want := map[string]string{
		"Access-Control-Allow-Origin":  appOrigin,
		"Access-Control-Allow-Headers": "authorization",
		"Access-Control-Max-Age":       "600",
	}
	for k, v := range want {
		if got := resp.Header.Get(k); !strings.EqualFold(got, v) {
			t.Errorf("preflight: %s = %q, want %q", k, got, v)
		}
	}
	if got := resp.Header.Get("Access-Control-Allow-Methods"); !strings.Contains(got, "GET") {
		t.Errorf("preflight: Access-Control-Allow-Methods = %q, want GET in it", got)
	}
}

// TestCORSDisallowedOrigin: an origin outside ELLIPSIS_ALLOWED_ORIGINS gets
// no Access-Control-* header on a GET or a preflight, and no WebSocket.
func TestCORSDisallowedOrigin(t *testing.T) {
	e := newEnv(t, withOrigins(appOrigin))
	resp, _ := do(t, http.MethodGet, e.httpURL("/v1/config"), "Origin", otherOrigin)
	if h := corsHeaders(resp); len(h) != 0 {
		t.Errorf("GET from %s: CORS headers %v, want none", otherOrigin, h)
	}
	resp, _ = do(t, http.MethodOptions, e.httpURL("/v1/config"),
		"Origin", otherOrigin, "Access-Control-Request-Method", "GET",
		"Access-Control-Request-Headers", "authorization")
	if h := corsHeaders(resp); len(h) != 0 {
		t.Errorf("preflight from %s: CORS headers %v, want none", otherOrigin, h)
	}
	ws, wsResp, err := websocket.DefaultDialer.Dial(e.wsURL(url.Values{"user": {"alice"}}),
		http.Header{"Origin": {otherOrigin}})
	if err == nil {
		ws.Close()
		t.Fatalf("WebSocket from %s: upgraded, want 403", otherOrigin)
	}
	if wsResp == nil || wsResp.StatusCode != http.StatusForbidden {
		t.Fatalf("WebSocket from %s: %v (%v), want HTTP 403", otherOrigin, err, wsResp)
	}
}

// TestSDKServed: the SDK's modules are served at /sdk/v1/ and
// /sdk/{version}/ with the demo page off, with a strong ETag that a
// revalidation answers with 304, and a JavaScript content type.
func TestSDKServed(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.DemoPage = false })
	resp, body := do(t, http.MethodGet, e.httpURL("/sdk/v1/ellipsis.js"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "export") {
		t.Fatalf("GET /sdk/v1/ellipsis.js: %d %.200s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("Content-Type = %q, want text/javascript", ct)
	}
	etag := resp.Header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || len(etag) < 20 {
		t.Fatalf("ETag = %q, want a strong ETag", etag)
	}
	if cc := resp.Header.Get("Cache-Control"); strings.Contains(cc, "immutable") {
		t.Errorf("/sdk/v1/ Cache-Control = %q: the line changes on upgrade, want no immutable", cc)
	}
	resp, _ = do(t, http.MethodGet, e.httpURL("/sdk/v1/ellipsis.js"), "If-None-Match", etag)
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation: %d, want 304", resp.StatusCode)
	}
	// A module the entry imports is served too (relative imports resolve).
	if resp, _ = do(t, http.MethodGet, e.httpURL("/sdk/v1/client.js")); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /sdk/v1/client.js: %d", resp.StatusCode)
	}
	resp, _ = do(t, http.MethodGet, e.httpURL("/sdk/v1/nope.js"))
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /sdk/v1/nope.js: %d, want 404", resp.StatusCode)
	}
	if resp, _ = do(t, http.MethodGet, e.httpURL("/src/ellipsis.js")); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /src/ellipsis.js with the demo page off: %d, want 404", resp.StatusCode)
	}
}

// TestSDKVersionedPathIsImmutable: /sdk/{version}/ (package.json's version)
// carries a one-year immutable cache.
func TestSDKVersionedPathIsImmutable(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.DemoPage = false })
	v := sdkVersion(t)
	resp, _ := do(t, http.MethodGet, e.httpURL("/sdk/"+v+"/ellipsis.js"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /sdk/%s/ellipsis.js: %d", v, resp.StatusCode)
	}
	if cc := resp.Header.Get("Cache-Control"); !strings.Contains(cc, "immutable") || !strings.Contains(cc, "max-age=31536000") {
		t.Errorf("Cache-Control = %q, want max-age=31536000, immutable", cc)
	}
}
