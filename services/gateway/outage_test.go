package gateway_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

func TestRedisUnreachable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.RedisURL = "redis://127.0.0.1:1" })
	e.startWorker("")
	c := e.dial("alice", "")
	start := time.Now()
	c.send(`{"type":"join","room":"42","id":"j"}`)
	if f := c.expectError(protocol.CodeUnavailable); f.str("id") != "j" {
		t.Fatalf("unavailable %v", f)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("unavailable took %s", d)
	}
	c.send(`{"type":"typing_start","room":"42"}`)
	c.expectError(protocol.CodeNotJoined)
	// NATS is up: once its cached status (read every 100 ms) says so,
	// /readyz names redis only.
	var st int
	var body map[string]any
	testkit.WaitFor(t, 5*time.Second, "readyz down [redis]", func() bool {
		st, body = httpGet(t, "http://"+e.srv.AdminAddr()+"/readyz", nil)
		down, _ := body["down"].([]any)
		return st == 503 && slices.Equal(down, []any{"redis"})
	})
}

func TestAuthzNATS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.Authz = config.AuthzNATS })
	e.startWorker("")
	c := e.dial("alice", "")
	// No authorisation service answers: deny (fail closed).
	c.send(`{"type":"join","room":"42","id":"j"}`)
	c.expectError(protocol.CodeForbidden)

	if _, err := e.nc.Subscribe(e.names.AuthzJoinSubject(), func(m *nats.Msg) {
		var req struct {
			V          int
			User, Room string
		}
		_ = json.Unmarshal(m.Data, &req)
		_ = m.Respond([]byte(`{"allow":` + map[bool]string{true: "true", false: "false"}[req.V == 1 && req.User == "alice" && req.Room == "open"] + `}`))
	}); err != nil {
		t.Fatal(err)
	}
	_ = e.nc.Flush()
	c.join("open")
	c.send(`{"type":"join","room":"closed","id":"j2"}`)
	if f := c.expectError(protocol.CodeForbidden); f.str("room") != "closed" {
		t.Fatalf("forbidden %v", f)
	}
	if st, _ := httpGet(t, e.httpURL("/v1/rooms/closed/typing?user=alice"), nil); st != 403 {
		t.Fatalf("HTTP snapshot of a closed room: %d", st)
	}
	if st, _ := httpGet(t, e.httpURL("/v1/rooms/open/typing?user=alice"), nil); st != 200 {
		t.Fatalf("HTTP snapshot of an open room: %d", st)
	}
}
