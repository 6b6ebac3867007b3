package origin

import (
	"net/http/httptest"
	"testing"
)

func TestAllowed(t *testing.T) {
	cases := []struct {
		allowed []string
		host    string
		origin  string
		want    bool
	}{
		{nil, "chat.example.com", "", true},
		{nil, "chat.example.com", "https://chat.example.com", true},
		{nil, "chat.example.com", "https://CHAT.example.com", true},
		{nil, "chat.example.com:8080", "http://chat.example.com:8080", true},
		{nil, "chat.example.com", "https://evil.com", false},
		{nil, "chat.example.com", "null", false},
		{[]string{"*"}, "a", "https://anything.io", true},
		{[]string{"https://chat.example.com"}, "gw", "https://chat.example.com", true},
		{[]string{"https://chat.example.com/"}, "gw", "https://chat.example.com", true},
		{[]string{"https://chat.example.com"}, "gw", "http://chat.example.com", false},
		{[]string{"https://chat.example.com"}, "gw", "https://chat.example.com:444", false},
		{[]string{"https://*.example.com"}, "gw", "https://a.example.com", true},
		{[]string{"https://*.example.com"}, "gw", "https://a.b.example.com", true},
		{[]string{"https://*.example.com"}, "gw", "https://example.com", false},
		{[]string{"https://*.example.com"}, "gw", "https://badexample.com", false},
		{[]string{"https://*.example.com"}, "gw", "https://a.example.com:8443", false},
		{[]string{"https://*.example.com:8443"}, "gw", "https://a.example.com:8443", true},
		{[]string{"http://localhost:8080"}, "gw", "http://localhost:8080", true},
		{nil, "chat.example.com", "https://evil.com@chat.example.com", false},
		{nil, "chat.example.com", "https://chat.example.com/path", false},
		{nil, "chat.example.com", "https://chat.example.com?x", false},
		{[]string{"https://*.example.com"}, "gw", "https://evil.com/.example.com", false},
		{[]string{"https://*.example.com"}, "gw", "https://x@a.example.com", false},
		{[]string{"https://chat.example.com"}, "gw", "https://chat.example.com.evil.com", false},
		{nil, "[::1]:8080", "http://[::1]:8080", true},
		{[]string{"https://*.example.com"}, "gw", "null", false},
	}
	for _, tc := range cases {
		r := httptest.NewRequest("GET", "http://"+tc.host+"/v1/ws", nil)
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if got := New(tc.allowed).Allowed(r); got != tc.want {
			t.Errorf("allowed %v, host %s, origin %q: %v, want %v", tc.allowed, tc.host, tc.origin, got, tc.want)
		}
	}
}
