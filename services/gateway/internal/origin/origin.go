// Package origin checks the Origin header of WebSocket handshakes against an
// allow-list (docs/protocol.md, "Handshake"; ELLIPSIS_ALLOWED_ORIGINS).
package origin

import (
	"net/http"
	"net/url"
	"strings"
)

// Checker decides whether a request's Origin is allowed. The zero value
// allows only the request's own host.
type Checker struct {
	any      bool
	exact    map[string]bool // "scheme://host[:port]", lower case
	wildcard []wildcard
}

type wildcard struct {
	scheme string // "https"
	suffix string // ".example.com" (the "*" matches one or more labels)
	port   string // "" or "8443"
}

// New builds a checker from allow-list entries, as validated by
// config.Validate: "*" (any origin), exact origins
// ("https://chat.example.com", "http://localhost:8080") and wildcards
// ("https://*.example.com", which matches a.example.com and a.b.example.com
// but not example.com). An empty list means "same host as the request".
func New(allowed []string) *Checker {
	c := &Checker{exact: map[string]bool{}}
	for _, a := range allowed {
		if a == "*" {
			c.any = true
			continue
		}
		u, err := url.Parse(strings.ToLower(strings.TrimSuffix(a, "/")))
		if err != nil || u.Scheme == "" || u.Host == "" {
			continue // config.Validate refuses these
		}
		if strings.HasPrefix(u.Host, "*.") {
			host, port := splitPort(u.Host)
			c.wildcard = append(c.wildcard, wildcard{scheme: u.Scheme, suffix: host[1:], port: port})
			continue
		}
		c.exact[u.Scheme+"://"+u.Host] = true
	}
	return c
}

func splitPort(hostport string) (host, port string) {
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && !strings.Contains(hostport[i:], "]") {
		return hostport[:i], hostport[i+1:]
	}
	return hostport, ""
}

// Allowed reports whether r may open a WebSocket. A request without an
// Origin header (not a browser) is allowed: Origin protects browsers from
// cross-site WebSockets, and other clients can forge it anyway.
func (c *Checker) Allowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	if c.any {
		return true
	}
	u, err := url.Parse(strings.ToLower(o))
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		// Browsers send exactly scheme://host[:port] ("null" for opaque
		// origins); anything else is refused.
		return false
	}
	if len(c.exact) == 0 && len(c.wildcard) == 0 {
		return strings.EqualFold(u.Host, r.Host)
	}
	if c.exact[u.Scheme+"://"+u.Host] {
		return true
	}
	host, port := splitPort(u.Host)
	for _, w := range c.wildcard {
		if u.Scheme == w.scheme && port == w.port && len(host) > len(w.suffix) && strings.HasSuffix(host, w.suffix) {
			return true
		}
	}
	return false
}
