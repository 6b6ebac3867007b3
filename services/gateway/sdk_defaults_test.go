package gateway_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/ellipsis-chat/ellipsis/shared/config"
)

// The JS SDK's timing defaults (clients/js/src/typing.js, as the gateway
// serves it) are what GET /v1/config answers with the default settings:
// a client that has not read the config yet times typing as the server
// does.
func TestSDKDefaultsAreTheServedConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := config.Default()
	if e.cfg.TypingTTL != d.TypingTTL || e.cfg.TypingRefresh != d.TypingRefresh || e.cfg.TypingIdleStop != d.TypingIdleStop {
		t.Fatalf("the test gateway's timing %s/%s/%s is not the default", e.cfg.TypingTTL, e.cfg.TypingRefresh, e.cfg.TypingIdleStop)
	}
	st, served := httpGet(t, e.httpURL("/v1/config"), nil)
	if st != http.StatusOK {
		t.Fatalf("GET /v1/config: %d %v", st, served)
	}
	resp, err := http.Get(e.httpURL("/src/typing.js"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /src/typing.js: %d %v", resp.StatusCode, err)
	}
	for name, field := range map[string]string{
		"DEFAULT_TTL_MS":       "ttl_ms",
		"DEFAULT_REFRESH_MS":   "refresh_ms",
		"DEFAULT_IDLE_STOP_MS": "idle_stop_ms",
	} {
		m := regexp.MustCompile(`(?m)^export const ` + name + ` = (\d+);`).FindSubmatch(src)
		if m == nil {
			t.Errorf("typing.js has no `export const %s = <ms>;`", name)
			continue
		}
		ms, _ := strconv.Atoi(string(m[1]))
		if want, ok := served[field].(float64); !ok || float64(ms) != want {
			t.Errorf("typing.js %s = %d, GET /v1/config %s = %v", name, ms, field, served[field])
		}
	}
}
