package gateway_test

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Label values from outside: clients close with every kind of code
// (application codes, reserved and invalid ones, the largest uint16) and
// send frames of made-up types; every label value on /metrics stays in
// the fixed sets of internal/metrics/labels.go.
func TestHostileLabelValuesBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	codes := []int{1000, 1004, 1005, 1016, 2999, 3000, 3999, 4000, 4321, 4999, 5000, 65535, 999, 0}
	for i, code := range codes {
		c := e.dial("u"+strconv.Itoa(i), "")
		c.send(`{"type":"x` + strconv.Itoa(code) + `","room":"r"}`)
		c.send(`{"type":"` + strings.Repeat("z", 200) + `"}`)
		// A raw close frame, so that invalid codes are sent as they are.
		payload := []byte{byte(code >> 8), byte(code)}
		if code == 0 {
			payload = nil // an empty close: no status code (1005)
		}
		_ = c.ws.WriteControl(websocket.CloseMessage, payload, time.Now().Add(time.Second))
		_ = c.ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			if _, _, err := c.ws.ReadMessage(); err != nil {
				break
			}
		}
		c.ws.Close()
	}
	// A client that vanishes without a close frame.
	raw, err := net.Dial("tcp", e.srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	raw.Close()
	testkit.WaitFor(t, 5*time.Second, "every connection to end", func() bool { return e.metric("ellipsis_gateway_connections") == 0 })

	allowed := map[string]map[string]bool{
		"ellipsis_gateway_closes_total":             set("1000", "1001", "1002", "1003", "1005", "1006", "1007", "1008", "1009", "1010", "1011", "1012", "1013", "1014", "1015", "other"),
		"ellipsis_gateway_frames_in_total":          set("join", "leave", "typing_start", "typing_stop", "sync", "ping", "watch", "unwatch", "invalid", "binary", "other"),
		"ellipsis_gateway_frames_out_total":         set("joined", "left", "typing_start", "typing_stop", "typing", "pong", "error", "watching", "unwatched", "summary", "other"),
		"ellipsis_gateway_errors_total":             set("bad_request", "unknown_type", "not_joined", "forbidden", "room_limit", "rate_limited", "unavailable", "internal", "watch_limit", "too_many_threads", "other"),
		"ellipsis_gateway_commands_published_total": set("start", "stop", "leave", "disconnect", "other"),
	}
	resp, err := http.Get("http://" + e.srv.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	series := regexp.MustCompile(`(?m)^(ellipsis_gateway_\w+)\{(\w+)="([^"]*)"`)
	seen := 0
	for _, m := range series.FindAllStringSubmatch(string(b), -1) {
		set, ok := allowed[m[1]]
		if !ok {
			continue
		}
		seen++
		if !set[m[3]] {
			t.Errorf("%s{%s=%q}: a label value outside the fixed set", m[1], m[2], m[3])
		}
	}
	if seen == 0 || e.metric(`ellipsis_gateway_closes_total{code="other"}`) == 0 {
		t.Fatalf("no hostile close counted as other; metrics:\n%s", b)
	}
}

func set(vs ...string) map[string]bool {
	m := map[string]bool{}
	for _, v := range vs {
		m[v] = true
	}
	return m
}
