package jwksurl

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, u := range []string{
		"https://idp.example/.well-known/jwks.json",
		"HTTPS://idp.example/jwks",
		"http://127.0.0.1:8080/jwks",
		"http://127.9.9.9/jwks",
		"http://[::1]/jwks",
		"http://localhost/jwks",
		"http://LocalHost:8080/jwks",
	} {
		if err := Check(u); err != nil {
			t.Errorf("%q refused: %v", u, err)
		}
	}
	for u, want := range map[string]string{
		"http://idp.example/jwks":         `"http://idp.example/jwks" must use https`,
		"http://localhost.idp.example/x":  "must use https",
		"http://10.0.0.1/jwks":            "must use https",
		"ftp://127.0.0.1/jwks":            "must use https",
		"https:///jwks":                   `"https:///jwks" has no host`,
		"/jwks":                           "has no host",
		"://":                             "is not a URL",
		"https://u:S3CRET@h:x/jwks":       "is not a URL",
		"http://u:S3CRET@idp.example/jwk": "must use https",
		"http://S3CRET@idp.example/jwks":  "must use https",
	} {
		err := Check(u)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", u, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "S3CRET") {
			t.Errorf("%q: the error shows the user info: %v", u, err)
		}
	}
}
