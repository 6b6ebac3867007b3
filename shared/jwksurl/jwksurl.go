// Package jwksurl is the rule for where a JSON Web Key Set may be fetched
// from: an https URL, or plain http only to a loopback host (127.0.0.0/8,
// ::1, localhost) for development and tests. Keys fetched over plain http
// from elsewhere could be replaced by anyone on the path, who could then
// sign any token. shared/config checks ELLIPSIS_JWKS_URL with it, and the
// gateway's JWKS client checks every redirect of a fetch with it.
package jwksurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
)

// Check returns nil when raw may be fetched for keys, else why not. The
// error quotes the URL without its user info (natsconn.RedactURL: a
// URL's user info is sent as basic auth) and does not name the setting.
func Check(raw string) error {
	shown := natsconn.RedactURL(raw)
	u, err := url.Parse(raw)
	switch {
	case err != nil: // url.Error holds the whole URL: only its cause is shown
		return fmt.Errorf("%q is not a URL: %v", shown, errors.Unwrap(err))
	case u.Host == "":
		return fmt.Errorf("%q has no host (want https://host/path)", shown)
	case u.Scheme == "https": // url.Parse lowercases the scheme
		return nil
	case u.Scheme == "http" && isLoopback(u.Hostname()):
		return nil
	}
	return fmt.Errorf("%q must use https (plain http only to a loopback host such as 127.0.0.1)", shown)
}

// isLoopback reports whether host is localhost (any case) or a loopback IP.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
