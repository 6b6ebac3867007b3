package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Per-viewer filters at the gateway's edges (docs/protocol.md, "Per-viewer
// filters"): the hide_typing_from claim's limits at the handshake, in
// both auth modes; the join authoriser's hide_typing_from, and its bad
// replies; the watch summary.

func hideIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint("u", i)
	}
	return out
}

func TestHideTypingFromHandshakeLimits(t *testing.T) {
	t.Parallel()
	const secret = "filters-secret"
	jwtEnv := newEnv(t, func(c *config.Config) { c.Auth, c.JWTSecret = config.AuthJWT, secret })
	devEnv := newEnv(t)
	tokenURL := func(hide any) string {
		c := jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "hide_typing_from": hide}
		return jwtEnv.wsURL(url.Values{"access_token": {testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(secret), "", c)}})
	}
	devURL := func(hide []string) string {
		return devEnv.wsURL(url.Values{"user": {"alice"}, "hide_typing_from": hide})
	}
	for name, tc := range map[string]struct {
		u    string
		want string // "" accepted, else the 400 message
	}{
		"jwt 1000":      {tokenURL(hideIDs(1000)), ""},
		"jwt 1001":      {tokenURL(hideIDs(1001)), "hide_typing_from: at most 1000 user ids, got 1001"},
		"jwt a string":  {tokenURL("bob"), `hide_typing_from: must be an array of user ids, got "bob"`},
		"jwt bad id":    {tokenURL([]string{"bob", ""}), "hide_typing_from[1]: is required"},
		"jwt long id":   {tokenURL([]string{strings.Repeat("b", 257)}), "hide_typing_from[0]: must be 1..256 bytes, got 257"},
		"dev 1000":      {devURL(hideIDs(1000)), ""},
		"dev 1001":      {devURL(hideIDs(1001)), "hide_typing_from: at most 1000 user ids, got 1001"},
		"dev bad id":    {devURL([]string{"b\x01"}), "hide_typing_from[0]: control character U+0001 at byte 1"},
		"dev empty one": {devURL([]string{""}), "hide_typing_from[0]: is required"},
	} {
		status, code, msg, _ := handshakeResp(t, tc.u, nil)
		switch {
		case tc.want == "" && status != 101:
			t.Errorf("%s: HTTP %d %s %q, want the upgrade", name, status, code, msg)
		case tc.want != "" && (status != 400 || code != protocol.CodeBadRequest || msg != tc.want):
			t.Errorf("%s: HTTP %d %s %q, want 400 bad_request %q", name, status, code, msg, tc.want)
		}
	}
	// Refusals are counted as bad_request (invalid credentials' content).
	if v := jwtEnv.metric(`ellipsis_gateway_handshakes_rejected_total{reason="bad_request"}`); v != 4 {
		t.Errorf("jwt gateway counted %v bad_request refusals, want 4", v)
	}
	if v := devEnv.metric(`ellipsis_gateway_handshakes_rejected_total{reason="bad_request"}`); v != 3 {
		t.Errorf("dev gateway counted %v bad_request refusals, want 3", v)
	}
}

// authzEnv answers the join authoriser: alice hides bob in every room but
// "bad-*", where the reply's list is invalid; "garbage" gets no JSON.
func authzEnv(t *testing.T) *env {
	e := newEnv(t, func(c *config.Config) { c.Authz = config.AuthzNATS; c.WatchInterval = 100 * time.Millisecond })
	e.startWorker("")
	if _, err := e.nc.Subscribe(e.names.AuthzJoinSubject(), func(m *nats.Msg) {
		var req struct{ User, Room string }
		_ = json.Unmarshal(m.Data, &req)
		reply := `{"allow":true}`
		switch {
		case req.Room == "garbage":
			reply = `{"allow":`
		case strings.HasPrefix(req.Room, "bad-"):
			reply = `{"allow":true,"hide_typing_from":["bob",7]}`
		case req.User == "alice":
			reply = `{"allow":true,"hide_typing_from":["bob"]}`
		}
		_ = m.Respond([]byte(reply))
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAuthzReplyHidesUsers(t *testing.T) {
	t.Parallel()
	e := authzEnv(t)
	e.setSnapshot("r", typists("bob", "carol")...)
	alice, dave := e.dial("alice", ""), e.dial("dave", "")
	if j := alice.join("r"); fmt.Sprint(j["typing"]) != "[map[user:carol]]" || j["total"] != 1.0 {
		t.Fatalf("alice's joined: %v", j)
	}
	if j := dave.join("r"); j["total"] != 2.0 {
		t.Fatalf("dave's joined: %v", j)
	}
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "bob", TTLMs: 5000})
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: "r", User: "bob", Reason: protocol.ReasonStopped})
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "carol", TTLMs: 5000})
	if f := alice.expect(protocol.TypeTypingStart); f.str("user") != "carol" {
		t.Fatalf("alice got %v, want carol's start (bob's events dropped)", f)
	}
	for _, u := range []string{"bob", "bob", "carol"} {
		if f := dave.read(); f.str("user") != u {
			t.Fatalf("dave got %v, want %s's event", f, u)
		}
	}
	// A re-join asks no authoriser and keeps the room's list.
	if j := alice.join("r"); fmt.Sprint(j["typing"]) != "[map[user:carol]]" {
		t.Fatalf("alice's re-join: %v", j)
	}
	// The watch of a room applies the room's list too.
	e.setSnapshot("w", typists("bob", "carol")...)
	if acc, ref := alice.watchAll([]string{"w"}); len(acc) != 1 || len(ref) != 0 {
		t.Fatalf("watch: %v %v", acc, ref)
	}
	if s := summaryOf(alice.expectSummary()); s != "w carol/1" {
		t.Fatalf("alice's summary %s, want w carol/1", s)
	}
}

// A reply the gateway cannot read denies the join (fail closed, as any
// reply but an allow), and is counted and logged as bad_reply.
func TestAuthzBadReplyDenies(t *testing.T) {
	t.Parallel()
	e := authzEnv(t)
	alice := e.dial("alice", "")
	for _, room := range []string{"bad-1", "garbage"} {
		alice.send(map[string]string{"type": "join", "room": room, "id": room})
		if f := alice.expectError(protocol.CodeForbidden); f.str("room") != room {
			t.Fatalf("join %s: %v", room, f)
		}
	}
	if v := e.metric(`ellipsis_gateway_authz_total{result="bad_reply"}`); v != 2 {
		t.Fatalf("bad_reply counted %v, want 2", v)
	}
	// Cached as a denial: asked again, refused without a new bad reply.
	alice.send(map[string]string{"type": "join", "room": "bad-1", "id": "again"})
	alice.expectError(protocol.CodeForbidden)
	if v := e.metric(`ellipsis_gateway_authz_total{result="deny"}`); v != 1 {
		t.Fatalf("deny counted %v, want 1 (the cached denial)", v)
	}
}
