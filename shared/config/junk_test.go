package config

import (
	"strings"
	"testing"
)

// TestJunkValuesRefused: values that parse but that no setting can mean are
// refused, naming the setting: a NaN or infinite rate (NaN passes "> 0";
// +Inf turns the limiter off), and a gateway id that would make every
// connection id invalid (control characters, invalid UTF-8: the worker's
// protocol.ValidateID refuses each command carrying one).
func TestJunkValuesRefused(t *testing.T) {
	for _, kv := range [][2]string{
		{"ELLIPSIS_INBOUND_RATE", "NaN"},
		{"ELLIPSIS_INBOUND_RATE", "+Inf"},
		{"ELLIPSIS_INBOUND_RATE", "-inf"},
		{"ELLIPSIS_GATEWAY_ID", "gw\x00a"},
		{"ELLIPSIS_GATEWAY_ID", "gw\x7f"},
		{"ELLIPSIS_GATEWAY_ID", "gw\xff"},
		{"ELLIPSIS_GATEWAY_ID", "gw\u0085"},
	} {
		_, err := load(t, map[string]string{kv[0]: kv[1]})
		if err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%s=%q: got %v, want an error naming %s", kv[0], kv[1], err, kv[0])
		}
	}
	if c, err := load(t, map[string]string{"ELLIPSIS_GATEWAY_ID": "gw-é_1", "ELLIPSIS_INBOUND_RATE": "2.5"}); err != nil || c.GatewayID != "gw-é_1" || c.InboundRate != 2.5 {
		t.Fatalf("good values: %+v, %v", c.GatewayID, err)
	}
}

// ELLIPSIS_JWKS_URL may carry basic-auth credentials (net/http sends a
// URL's user info as Authorization): neither -h nor a configuration error
// shows them, in any form of the URL.
func TestJWKSURLCredentialsNeverShown(t *testing.T) {
	for _, u := range []string{
		"https://u:S3CRET@idp.example.com/jwks",
		"https://S3CRET@idp.example.com/jwks",
		"http://S3CRET@example.com/jwks",
		"https://u:S3CRET@h:x/jwks",
		"https://u:S3CRET@/jwks",
		"ftp://u:S3CRET@h/jwks",
	} {
		if s := Shown("ELLIPSIS_JWKS_URL", u); strings.Contains(s, "S3CRET") {
			t.Errorf("Shown(%q) = %q", u, s)
		}
		_, err := load(t, map[string]string{"ELLIPSIS_AUTH": "jwt", "ELLIPSIS_JWKS_URL": u})
		if err != nil && strings.Contains(err.Error(), "S3CRET") {
			t.Errorf("%s: error shows the credentials: %v", u, err)
		}
	}
	if _, err := load(t, map[string]string{"ELLIPSIS_AUTH": "jwt", "ELLIPSIS_JWKS_URL": "https://u:S3CRET@h:x/jwks"}); err == nil || !strings.Contains(err.Error(), "ELLIPSIS_JWKS_URL") {
		t.Fatalf("a malformed URL: %v, want an error naming ELLIPSIS_JWKS_URL", err)
	}
}
