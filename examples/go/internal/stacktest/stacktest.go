// Package stacktest runs a private Ellipsis stack for the examples' tests:
// a presence worker and a gateway (auth none, in this process) against the
// Redis and NATS named by ELLIPSIS_TEST_REDIS_URL and ELLIPSIS_TEST_NATS_URL
// (package testkit: `make test` starts private ones), with a
// Redis key prefix and a NATS subject prefix of their own, and WebSocket
// users that type and watch.
package stacktest

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/testkit"
	"github.com/ellipsis-chat/ellipsis/testkit/inproc"
)

// Wait bounds every wait of a test (a deadline, not a pass condition).
const Wait = 10 * time.Second

// NATSURL is the tests' NATS server (testkit.NATSURL).
func NATSURL() string { return testkit.NATSURL() }

// Stack is a running private stack.
type Stack struct {
	// Prefix is the stack's NATS subject prefix (ELLIPSIS_SUBJECT_PREFIX).
	Prefix string
	// HTTPAddr is the gateway's public address, host:port.
	HTTPAddr string
	// NC is a NATS connection for the example under test.
	NC *nats.Conn
}

// Start starts worker and gateway with env over the test settings (e.g.
// ELLIPSIS_AUTHZ=nats) and stops them when the test ends.
func Start(t *testing.T, env map[string]string) *Stack {
	t.Helper()
	id := testkit.RandHex(5)
	vars := map[string]string{
		"ELLIPSIS_NATS_URL":       NATSURL(),
		"ELLIPSIS_REDIS_URL":      testkit.RedisURL(),
		"ELLIPSIS_KEY_PREFIX":     "examples-" + id + ":",
		"ELLIPSIS_SUBJECT_PREFIX": "examples" + id,
		"ELLIPSIS_HTTP_ADDR":      "127.0.0.1:0",
		"ELLIPSIS_ADMIN_ADDR":     "",
		"ELLIPSIS_AUTH":           "none",
		"ELLIPSIS_SHUTDOWN_DRAIN": "200ms",
		"ELLIPSIS_LAME_DUCK":      "0s",
		"ELLIPSIS_LOG_LEVEL":      "error",
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.Load(nil, nil, func(k string) (string, bool) { v, ok := vars[k]; return v, ok }, config.Dev())
	if err != nil {
		t.Fatal(err)
	}
	st := inproc.StartT(t, inproc.Options{Config: cfg, Workers: 1, Gateways: 1})
	nc, err := nats.Connect(NATSURL(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &Stack{Prefix: cfg.SubjectPrefix, HTTPAddr: st.Gateways[0].HTTPAddr(), NC: nc}
}

// User is one WebSocket connection of a user.
type User struct {
	t    *testing.T
	ws   *websocket.Conn
	Name string
}

// Dial connects user (auth none) to the stack's gateway.
func (s *Stack) Dial(t *testing.T, user string) *User {
	t.Helper()
	u := url.URL{Scheme: "ws", Host: s.HTTPAddr, Path: "/v1/ws", RawQuery: url.Values{"user": {user}, "name": {strings.ToUpper(user[:1]) + user[1:]}}.Encode()}
	d := websocket.Dialer{HandshakeTimeout: Wait}
	ws, resp, err := d.Dial(u.String(), nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s as %s: %v (HTTP %d)", u.Host, user, err, status)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return &User{t: t, ws: ws, Name: user}
}

// Frame is any gateway frame, decoded loosely.
type Frame map[string]any

// Send writes a frame.
func (u *User) Send(frame map[string]any) {
	u.t.Helper()
	_ = u.ws.SetWriteDeadline(time.Now().Add(Wait))
	if err := u.ws.WriteJSON(frame); err != nil {
		u.t.Fatalf("%s: send %v: %v", u.Name, frame, err)
	}
}

// Next reads the next frame, failing the test after [Wait].
func (u *User) Next() Frame {
	u.t.Helper()
	_ = u.ws.SetReadDeadline(time.Now().Add(Wait))
	_, data, err := u.ws.ReadMessage()
	if err != nil {
		u.t.Fatalf("%s: read: %v", u.Name, err)
	}
	var f Frame
	if err := json.Unmarshal(data, &f); err != nil {
		u.t.Fatalf("%s: frame %s: %v", u.Name, data, err)
	}
	return f
}

// Until reads frames until one has every field of want, and returns it.
func (u *User) Until(want map[string]any) Frame {
	u.t.Helper()
	deadline := time.Now().Add(Wait)
	for time.Now().Before(deadline) {
		f := u.Next()
		ok := true
		for k, v := range want {
			if f[k] != v {
				ok = false
				break
			}
		}
		if ok {
			return f
		}
	}
	u.t.Fatalf("%s: no frame with %v within %s", u.Name, want, Wait)
	return nil
}

// Join joins room and returns the gateway's answer (joined or error).
func (u *User) Join(room string) Frame {
	u.t.Helper()
	u.Send(map[string]any{"type": "join", "room": room, "id": "j-" + room})
	return u.Until(map[string]any{"id": "j-" + room})
}
