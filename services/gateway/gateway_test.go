package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/services/gateway"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// handshake tries a WebSocket handshake and returns the HTTP status and
// the JSON error body of a refused one.
func handshake(t *testing.T, u string, h http.Header) (int, string, string) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(u, h)
	if err == nil {
		ws.Close()
		return resp.StatusCode, "", ""
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("HTTP %d body %q is not JSON", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	code, msg := errorOf(body)
	return resp.StatusCode, code, msg
}

func TestDevAuthHandshake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := "ws://" + e.srv.HTTPAddr() + "/v1/ws"
	if st, _, _ := handshake(t, base+"?user=alice&name=Alice", nil); st != http.StatusSwitchingProtocols {
		t.Fatalf("valid user: HTTP %d", st)
	}
	if st, code, msg := handshake(t, base, nil); st != 401 || code != "unauthorized" || !strings.Contains(msg, "user") {
		t.Fatalf("missing user: %d %s %q", st, code, msg)
	}
	if st, code, msg := handshake(t, base+"?user=a%01b", nil); st != 400 || code != "bad_request" || !strings.Contains(msg, "user") {
		t.Fatalf("bad user: %d %s %q", st, code, msg)
	}
	if st, code, msg := handshake(t, base+"?user=a&name="+strings.Repeat("n", 300), nil); st != 400 || !strings.Contains(msg, "name") {
		t.Fatalf("long name: %d %s %q", st, code, msg)
	}
}

func signHS256(t *testing.T, secret string, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWTHandshake(t *testing.T) {
	t.Parallel()
	const secret = "test-secret-0123456789"
	e := newEnv(t, func(c *config.Config) { c.Auth = config.AuthJWT; c.JWTSecret = secret })
	base := "ws://" + e.srv.HTTPAddr() + "/v1/ws"
	exp := time.Now().Add(time.Hour).Unix()
	valid := signHS256(t, secret, jwt.MapClaims{"sub": "alice", "name": "Alice", "exp": exp})

	if st, _, _ := handshake(t, base, http.Header{"Authorization": {"Bearer " + valid}}); st != 101 {
		t.Fatalf("bearer: HTTP %d", st)
	}
	if st, _, _ := handshake(t, base+"?access_token="+valid, nil); st != 101 {
		t.Fatalf("access_token: HTTP %d", st)
	}
	cases := []struct {
		name, query string
		header      http.Header
		want        string
	}{
		{"missing", "", nil, "missing token"},
		{"dev user ignored", "?user=alice", nil, "missing token"},
		{"expired", "?access_token=" + signHS256(t, secret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Minute).Unix()}), nil, "expired"},
		{"bad signature", "?access_token=" + signHS256(t, "other-secret", jwt.MapClaims{"sub": "alice", "exp": exp}), nil, "signature"},
		{"no exp", "?access_token=" + signHS256(t, secret, jwt.MapClaims{"sub": "alice"}), nil, "exp"},
		{"no sub", "?access_token=" + signHS256(t, secret, jwt.MapClaims{"exp": exp}), nil, "sub"},
		{"malformed", "?access_token=abc", nil, "malformed"},
		{"bad scheme", "", http.Header{"Authorization": {"Basic " + valid}}, "Authorization header"},
		{"bad subprotocol token", "", http.Header{"Sec-WebSocket-Protocol": {"ellipsis.v1, ellipsis.bearer.abc"}}, "malformed"},
		{"oversized subprotocol token", "", http.Header{"Sec-WebSocket-Protocol": {"ellipsis.v1, ellipsis.bearer." + strings.Repeat("a", 16<<10+1)}}, "too long"},
		{"conflicting tokens", "?access_token=" + signHS256(t, secret, jwt.MapClaims{"sub": "bob", "exp": exp}),
			http.Header{"Sec-WebSocket-Protocol": {"ellipsis.v1, ellipsis.bearer." + valid}}, "conflicting tokens in Sec-WebSocket-Protocol ellipsis.bearer.<JWT> and ?access_token="},
	}
	for _, tc := range cases {
		st, code, msg := handshake(t, base+tc.query, tc.header)
		if st != 401 || code != "unauthorized" || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: HTTP %d %s %q, want 401 unauthorized naming %q", tc.name, st, code, msg, tc.want)
		}
	}
	// A header block over 64 KiB: 431 before any handler.
	if _, resp, err := websocket.DefaultDialer.Dial(base, http.Header{"Sec-WebSocket-Protocol": {"ellipsis.v1, ellipsis.bearer." + strings.Repeat("a", 80<<10)}}); err == nil || resp == nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("80 KiB header: %v %v, want 431", err, resp)
	}
	// Bearer entry without ellipsis.v1: 400 naming the header.
	if st, code, msg := handshake(t, base, http.Header{"Sec-WebSocket-Protocol": {"ellipsis.bearer." + valid}}); st != 400 || code != "bad_request" || !strings.Contains(msg, "Sec-WebSocket-Protocol") {
		t.Errorf("bearer without v1: HTTP %d %s %q", st, code, msg)
	}
	// A valid token with an invalid user id: 400.
	bad := signHS256(t, secret, jwt.MapClaims{"sub": "a\x01", "exp": exp})
	if st, code, _ := handshake(t, base+"?access_token="+bad, nil); st != 400 || code != "bad_request" {
		t.Errorf("bad sub: HTTP %d %s", st, code)
	}
}

// TestJWTSubprotocol: the SDK's default, the token in a Sec-WebSocket-Protocol
// entry; the gateway selects ellipsis.v1 and never echoes the token, and
// the connection acts as the token's user.
func TestJWTSubprotocol(t *testing.T) {
	t.Parallel()
	const secret = "test-secret-0123456789"
	e := newEnv(t, func(c *config.Config) { c.Auth = config.AuthJWT; c.JWTSecret = secret })
	e.startWorker("")
	tok := signHS256(t, secret, jwt.MapClaims{"sub": "alice", "name": "Alice", "exp": time.Now().Add(time.Hour).Unix()})
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+e.srv.HTTPAddr()+"/v1/ws",
		http.Header{"Sec-WebSocket-Protocol": {"ellipsis.v1, ellipsis.bearer." + tok}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	if got := resp.Header.Values("Sec-WebSocket-Protocol"); len(got) != 1 || got[0] != "ellipsis.v1" {
		t.Fatalf("selected subprotocol %q, want [ellipsis.v1]", got)
	}
	c := &client{t: t, ws: ws}
	c.join("r")
	c.send(`{"type":"typing_start","room":"r"}`)
	if cmd := e.nextCommand(); cmd.User != "alice" || cmd.Name != "Alice" {
		t.Fatalf("command %+v", cmd)
	}
	// The same token twice (header and subprotocol) is not a conflict.
	if st, _, msg := handshake(t, "ws://"+e.srv.HTTPAddr()+"/v1/ws", http.Header{
		"Authorization":          {"Bearer " + tok},
		"Sec-WebSocket-Protocol": {"ellipsis.v1, ellipsis.bearer." + tok},
	}); st != 101 {
		t.Fatalf("same token twice: HTTP %d %q", st, msg)
	}
}

func TestJWTClaims(t *testing.T) {
	t.Parallel()
	const secret = "test-secret-claims"
	e := newEnv(t, func(c *config.Config) { c.Auth = config.AuthJWT; c.JWTSecret = secret })
	e.startWorker("")
	base := "ws://" + e.srv.HTTPAddr() + "/v1/ws?access_token="

	// The user comes from sub, the name from the token.
	tok := signHS256(t, secret, jwt.MapClaims{"sub": "alice", "name": "Alice", "exp": time.Now().Add(time.Hour).Unix()})
	c := e.dialURL(base+tok, nil)
	c.join("r")
	c.send(`{"type":"typing_start","room":"r"}`)
	if cmd := e.nextCommand(); cmd.User != "alice" || cmd.Name != "Alice" {
		t.Fatalf("command %+v", cmd)
	}

	// share_typing:false drops start and stop alike.
	tok = signHS256(t, secret, jwt.MapClaims{"sub": "bob", "share_typing": false, "exp": time.Now().Add(time.Hour).Unix()})
	b := e.dialURL(base+tok, nil)
	b.join("r")
	b.send(`{"type":"typing_start","room":"r"}`)
	b.send(`{"type":"typing_stop","room":"r"}`)
	b.send(`{"type":"ping","id":"p"}`)
	b.expect(protocol.TypePong)
	b.ws.Close()
	e.noCommand(300 * time.Millisecond)

	// A connection is closed with 1008 when its token expires.
	tok = signHS256(t, secret, jwt.MapClaims{"sub": "carol", "exp": time.Now().Add(1500 * time.Millisecond).Unix()})
	cc := e.dialURL(base+tok, nil)
	cc.expectClose(websocket.ClosePolicyViolation)
}

func TestOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u := "ws://" + e.srv.HTTPAddr() + "/v1/ws?user=alice"
	if st, _, _ := handshake(t, u, http.Header{"Origin": {"http://" + e.srv.HTTPAddr()}}); st != 101 {
		t.Fatalf("same host: HTTP %d", st)
	}
	if st, code, msg := handshake(t, u, http.Header{"Origin": {"https://evil.example"}}); st != 403 || code != "forbidden" || !strings.Contains(msg, "evil.example") {
		t.Fatalf("other origin: HTTP %d %s %q", st, code, msg)
	}

	e2 := newEnv(t, func(c *config.Config) {
		c.AllowedOrigins = []string{"https://chat.example.com", "https://*.example.org"}
	})
	u2 := "ws://" + e2.srv.HTTPAddr() + "/v1/ws?user=alice"
	for origin, want := range map[string]int{
		"https://chat.example.com":    101,
		"https://a.b.example.org":     101,
		"https://example.org":         403,
		"http://a.example.org":        403,
		"https://chat.example.com.x":  403,
		"http://" + e2.srv.HTTPAddr(): 403,
	} {
		if st, _, _ := handshake(t, u2, http.Header{"Origin": {origin}}); st != want {
			t.Errorf("origin %s: HTTP %d, want %d", origin, st, want)
		}
	}
}

func TestJoinSnapshotSelfFiltered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("")
	e.setSnapshot("42", protocol.Typist{User: "alice", Name: "Alice"}, protocol.Typist{User: "bob", Name: "Bob"})
	c := e.dial("alice", "Alice")
	f := c.join("42")
	typing, _ := f["typing"].([]any)
	if len(typing) != 1 || typing[0].(map[string]any)["user"] != "bob" || typing[0].(map[string]any)["name"] != "Bob" {
		t.Fatalf("joined typing %v, want only bob", f["typing"])
	}
	// Joining again re-sends joined; an empty snapshot is [] not null.
	e.setSnapshot("42")
	f = c.join("42")
	if typing, ok := f["typing"].([]any); !ok || len(typing) != 0 {
		t.Fatalf("rejoin typing %v", f["typing"])
	}
	// sync answers with a typing snapshot and the id.
	e.setSnapshot("42", protocol.Typist{User: "carol"}, protocol.Typist{User: "alice"})
	c.send(`{"type":"sync","room":"42","id":"s1"}`)
	f = c.expect(protocol.TypeTyping)
	users, _ := f["users"].([]any)
	if f.str("id") != "s1" || len(users) != 1 || users[0].(map[string]any)["user"] != "carol" {
		t.Fatalf("sync: %v", f)
	}
	// ping.
	c.send(`{"type":"ping","id":"p1"}`)
	if f := c.expect(protocol.TypePong); f.str("id") != "p1" {
		t.Fatalf("pong %v", f)
	}
}

func TestTypingCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("")
	c := e.dial("alice", "Alice")
	c.join("42")
	c.send(`{"type":"typing_start","room":"42","user":"mallory","name":"Mallory"}`)
	c.send(`{"type":"typing_start","room":"42"}`)
	c.send(`{"type":"typing_stop","room":"42"}`)
	var seqs []uint64
	var conn string
	for i, op := range []string{"start", "start", "stop"} {
		cmd := e.nextCommand()
		if cmd.Op != op || cmd.Room != "42" || cmd.User != "alice" || cmd.Name != "Alice" || cmd.V != 1 || cmd.TsMs == 0 {
			t.Fatalf("command %d: %+v", i, cmd)
		}
		if !strings.HasPrefix(cmd.Conn, e.srv.GatewayID()+":") || (conn != "" && cmd.Conn != conn) {
			t.Fatalf("conn %q", cmd.Conn)
		}
		conn = cmd.Conn
		seqs = append(seqs, cmd.Seq)
	}
	if !slices.IsSorted(seqs) || seqs[0] == seqs[1] || seqs[1] == seqs[2] {
		t.Fatalf("seqs %v not increasing", seqs)
	}
	// leave publishes a leave command, answers left; typing then needs a join.
	c.send(`{"type":"leave","room":"42","id":"l1"}`)
	if f := c.expect(protocol.TypeLeft); f.str("id") != "l1" || f.str("room") != "42" {
		t.Fatalf("left %v", f)
	}
	if cmd := e.nextCommand(); cmd.Op != "leave" || cmd.Conn != conn || cmd.Seq <= seqs[2] {
		t.Fatalf("leave command %+v", cmd)
	}
	c.send(`{"type":"typing_start","room":"42","id":"t9"}`)
	if f := c.expectError(protocol.CodeNotJoined); f.str("room") != "42" || f.str("id") != "t9" {
		t.Fatalf("not_joined %v", f)
	}
	// Closing publishes nothing: no room is joined any more.
	c.ws.Close()
	e.noCommand(300 * time.Millisecond)
}

func TestFrameErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.MaxRoomsPerConn = 2 })
	e.startWorker("")
	c := e.dial("alice", "")
	c.send(`{"type":"typing_start","room":"42"}`)
	c.expectError(protocol.CodeNotJoined)
	c.send(`{"type":"sync","room":"42","id":"s"}`)
	c.expectError(protocol.CodeNotJoined)
	c.send(`{"type":`)
	c.expectError(protocol.CodeBadRequest)
	c.send(`[1,2]`)
	c.expectError(protocol.CodeBadRequest)
	c.send(`{"room":"42"}`)
	c.expectError(protocol.CodeBadRequest)
	c.send(`{"type":"dance","room":"42","id":"d1"}`)
	if f := c.expectError(protocol.CodeUnknownType); f.str("id") != "d1" {
		t.Fatalf("unknown_type %v", f)
	}
	c.send(map[string]string{"type": "join", "room": "a\x01b"})
	if f := c.expectError(protocol.CodeBadRequest); !strings.Contains(f.str("message"), "room") {
		t.Fatalf("control char: %v", f)
	}
	c.send(map[string]string{"type": "join", "room": strings.Repeat("r", 300)})
	if f := c.expectError(protocol.CodeBadRequest); !strings.Contains(f.str("message"), "300") {
		t.Fatalf("300 bytes: %v", f)
	}
	c.send(`{"type":"join","room":""}`)
	c.expectError(protocol.CodeBadRequest)
	// room_limit: 2 rooms per connection in this test.
	c.join("r1")
	c.join("r2")
	c.join("r1") // rejoining a joined room is fine
	c.send(`{"type":"join","room":"r3","id":"j3"}`)
	if f := c.expectError(protocol.CodeRoomLimit); f.str("room") != "r3" {
		t.Fatalf("room_limit %v", f)
	}
	// Rooms with any valid text work.
	c.send(`{"type":"leave","room":"r1"}`)
	c.expect(protocol.TypeLeft)
	c.join("café ☕ {x} a*b?c[d]")
	// The connection survived every error.
	c.send(`{"type":"ping"}`)
	c.expect(protocol.TypePong)
}

func TestFanOutSelfFilter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("")
	a1 := e.dial("alice", "Alice")
	a2 := e.dial("alice", "Alice")
	b := e.dial("bob", "Bob")
	other := e.dial("carol", "")
	for _, c := range []*client{a1, a2, b} {
		c.join("room:42")
	}
	other.join("elsewhere")

	aliceEv := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "room:42", User: "alice", Name: "Alice", TTLMs: 5000})
	if got := string(b.readRaw()); got != aliceEv {
		t.Fatalf("bob got %s, want the payload as published %s", got, aliceEv)
	}
	bobEv := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: "room:42", User: "bob", Reason: protocol.ReasonStopped})
	// Redis keeps a channel's order: had alice's own event reached her, it
	// would come before bob's.
	for _, a := range []*client{a1, a2} {
		if got := string(a.readRaw()); got != bobEv {
			t.Fatalf("alice got %s, want only bob's event %s", got, bobEv)
		}
	}
	// A client of another room got nothing.
	other.send(`{"type":"ping"}`)
	other.expect(protocol.TypePong)

	// Invalid events are dropped, the fan-out goes on.
	if err := e.rdb.Publish(context.Background(), e.names.RoomChannel("room:42"), `{"v":1,"type":"bogus"}`).Err(); err != nil {
		t.Fatal(err)
	}
	ev := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "room:42", User: "dave", TTLMs: 5000})
	if got := string(b.readRaw()); got != ev {
		t.Fatalf("bob got %s", got)
	}
}

func TestJoinBuffersEventsDuringSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("")
	var payload string
	e.mu.Lock()
	e.onSnapshot = func(room string) {
		// An event published after the subscription and before the
		// snapshot answer must reach the joining client, after joined.
		payload = e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: room, User: "bob", TTLMs: 5000})
		time.Sleep(100 * time.Millisecond)
	}
	e.mu.Unlock()
	c := e.dial("alice", "")
	c.join("42")
	if got := string(c.readRaw()); got != payload {
		t.Fatalf("after joined got %s, want %s", got, payload)
	}
}

func pubsubChannels(t *testing.T, e *env) []string {
	t.Helper()
	chs, err := e.rdb.PubSubChannels(context.Background(), e.cfg.KeyPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(chs)
	return chs
}

func TestLazySubscription(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("")
	if chs := pubsubChannels(t, e); len(chs) != 0 {
		t.Fatalf("channels before any join: %v", chs)
	}
	a := e.dial("alice", "")
	b := e.dial("bob", "")
	a.join("42")
	want := []string{e.names.RoomChannel("42")}
	if chs := pubsubChannels(t, e); !slices.Equal(chs, want) {
		t.Fatalf("after first join: %v, want %v", chs, want)
	}
	b.join("42")
	b.join("{x}")
	want = []string{e.names.RoomChannel("42"), e.names.RoomChannel("{x}")}
	slices.Sort(want)
	if chs := pubsubChannels(t, e); !slices.Equal(chs, want) {
		t.Fatalf("after joins: %v, want %v", chs, want)
	}
	a.send(`{"type":"leave","room":"42"}`)
	a.expect(protocol.TypeLeft)
	time.Sleep(100 * time.Millisecond)
	if chs := pubsubChannels(t, e); !slices.Equal(chs, want) {
		t.Fatalf("a member is left; channels %v, want %v", chs, want)
	}
	b.send(`{"type":"leave","room":"42"}`)
	b.expect(protocol.TypeLeft)
	want = []string{e.names.RoomChannel("{x}")}
	testkit.WaitFor(t, 5*time.Second, "unsubscribe after the last leave", func() bool { return slices.Equal(pubsubChannels(t, e), want) })
	b.ws.Close() // the last member of {x} disconnects
	testkit.WaitFor(t, 5*time.Second, "unsubscribe after the last disconnect", func() bool { return len(pubsubChannels(t, e)) == 0 })
}

func TestDisconnectCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("")
	c := e.dial("alice", "")
	c.join("b")
	c.join("a")
	c.join("a")
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	cmd := e.nextCommand()
	if cmd.Op != protocol.OpDisconnect || cmd.User != "alice" || cmd.Room != "" || !slices.Equal(cmd.Rooms, []string{"a", "b"}) || cmd.Seq == 0 {
		t.Fatalf("disconnect %+v", cmd)
	}
	e.noCommand(300 * time.Millisecond)

	// A broken connection (no close frame) disconnects too.
	d := e.dial("dave", "")
	d.join("x")
	d.ws.UnderlyingConn().Close()
	if cmd := e.nextCommand(); cmd.Op != protocol.OpDisconnect || cmd.User != "dave" {
		t.Fatalf("disconnect %+v", cmd)
	}
	e.noCommand(200 * time.Millisecond)
}

func TestCloseCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	big := e.dial("alice", "")
	big.send(`{"type":"ping","id":"` + strings.Repeat("x", 5000) + `"}`)
	big.expectClose(websocket.CloseMessageTooBig)

	bin := e.dial("alice", "")
	if err := bin.ws.WriteMessage(websocket.BinaryMessage, []byte(`{"type":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	bin.expectClose(websocket.CloseUnsupportedData)

	utf := e.dial("alice", "")
	if err := utf.ws.WriteMessage(websocket.TextMessage, []byte("{\"type\":\"ping\",\"id\":\"\xff\xfe\"}")); err != nil {
		t.Fatal(err)
	}
	utf.expectClose(websocket.CloseInvalidFramePayloadData)
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.InboundRate = 1; c.InboundBurst = 2 })
	c := e.dial("alice", "")
	for i := 0; i < 3; i++ {
		c.send(`{"type":"ping","id":"p"}`)
	}
	c.expect(protocol.TypePong)
	c.expect(protocol.TypePong)
	// The rejected frame is not decoded: the error names no id.
	if f := c.expectError(protocol.CodeRateLimited); f.str("id") != "" || f.str("room") != "" {
		t.Fatalf("rate_limited %v", f)
	}
	// Sustained: closed with 1008.
	for i := 0; i < 60; i++ {
		if c.ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)) != nil {
			break
		}
	}
	c.expectClose(websocket.ClosePolicyViolation)
}

// A client whose reader freezes for seconds (a TCP proxy stops reading
// the gateway's side, as a tunnel or an elevator would) while its room
// churns is not closed: the gateway conflates its events and, once the
// proxy reads again, the client ends with exactly the true state of every
// typist and still answers a ping (docs/protocol.md, "Order and loss").
func TestSlowConsumerConflates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.OutboundQueue = 8; c.WriteStall = 20 * time.Second })
	e.startWorker("")
	px := newFreezeProxy(t, e.srv.HTTPAddr())
	slow := e.dialURL("ws://"+px.addr()+"/v1/ws?user=alice", nil)
	slow.join("42")
	slow.join("43")

	px.freeze()
	truth := map[string]string{} // room|user -> last event type
	// 20000 events of ~1.1 KB: 22 MB, far more than the socket buffers
	// (the gateway's and the proxy's, a few MB each) take.
	name := strings.Repeat("B", 1000)
	pipe := e.rdb.Pipeline()
	for i := range 20000 {
		room, user := "42", "u"+strconv.Itoa(i%30)
		if i%5 == 0 {
			room = "43"
		}
		typ := protocol.TypeTypingStart
		if (i/30)%2 == 1 {
			typ = protocol.TypeTypingStop
		}
		ev := protocol.RoomEvent{Type: typ, Room: room, User: user, Name: name, TTLMs: 5000, Reason: protocol.ReasonStopped}
		if typ == protocol.TypeTypingStart {
			ev.Reason = ""
		} else {
			ev.Name, ev.TTLMs = "", 0
		}
		payload := string(protocol.RoomEventPrefix(ev)) + strconv.FormatInt(time.Now().UnixMilli(), 10) + "}"
		pipe.Publish(context.Background(), e.names.RoomChannel(room), payload)
		truth[room+"|"+user] = typ
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the gateway to conflate", func() bool {
		return e.metric("ellipsis_gateway_conflating_connections") == 1
	})
	time.Sleep(3 * time.Second) // frozen for seconds, under the write stall
	px.thaw()

	// Read what the gateway wrote (the socket buffers' backlog first, then
	// the conflated latest events) until the pong of a ping sent now, then
	// until conflation ended and nothing more comes.
	r := readAll(slow.ws, 1<<16)
	seen := map[string]string{}
	apply := func(f timedFrame) (pong bool) {
		var ev protocol.RoomEvent
		if json.Unmarshal(f.data, &ev) == nil && ev.User != "" {
			seen[ev.Room+"|"+ev.User] = ev.Type
		}
		return ev.Type == protocol.TypePong
	}
	slow.send(`{"type":"ping","id":"p"}`)
	for deadline := time.After(60 * time.Second); ; {
		select {
		case f := <-r.frames:
			if apply(f) {
				goto ponged
			}
			continue
		case <-r.done:
			t.Fatalf("slow client's connection ended: %v", r.err)
		case <-deadline:
			t.Fatal("no pong within 60 s of the thaw")
		}
	}
ponged:
	testkit.WaitFor(t, 10*time.Second, "conflation to end", func() bool {
		return e.metric("ellipsis_gateway_conflating_connections") == 0
	})
	for quiet := false; !quiet; {
		select {
		case f := <-r.frames:
			apply(f)
		case <-r.done:
			t.Fatalf("slow client's connection ended: %v", r.err)
		case <-time.After(time.Second):
			quiet = true
		}
	}
	if !maps.Equal(seen, truth) {
		n := 0
		for k, v := range truth {
			if seen[k] != v {
				n++
			}
		}
		t.Fatalf("the slow client ends with %d of %d typists' state wrong", n, len(truth))
	}
	if n := e.metric(`ellipsis_gateway_closes_total{code="1013"}`); n != 0 {
		t.Fatalf("closed with 1013 %v times", n)
	}
	if n := e.metric("ellipsis_gateway_conflated_events_total"); n == 0 {
		t.Fatal("no event conflated: the proxy did not hold the reader back")
	}
}

// freezeProxy forwards TCP connections to a gateway; freeze stops it
// reading the gateway's side (the client's reader is frozen: the
// gateway's writes fill the socket buffers and block), thaw resumes.
type freezeProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	frozen chan struct{} // open while frozen; nil when not
}

func newFreezeProxy(t *testing.T, upstream string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln}
	t.Cleanup(func() { p.thaw(); _ = ln.Close() })
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = down.Close()
				continue
			}
			// A small receive buffer (no autotuning, which may grow it
			// to tens of MB): a frozen reader's backlog fills the
			// gateway's socket within a few MB.
			_ = up.(*net.TCPConn).SetReadBuffer(64 << 10)
			t.Cleanup(func() { _ = up.Close(); _ = down.Close() })
			go func() { _, _ = io.Copy(up, down) }()
			go p.pump(down, up)
		}
	}()
	return p
}

func (p *freezeProxy) addr() string { return p.ln.Addr().String() }

// pump copies the gateway's side to the client's, waiting while frozen.
func (p *freezeProxy) pump(down, up net.Conn) {
	buf := make([]byte, 1024)
	for {
		p.mu.Lock()
		f := p.frozen
		p.mu.Unlock()
		if f != nil {
			<-f
		}
		n, err := up.Read(buf)
		if n > 0 {
			if _, werr := down.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = down.Close()
			return
		}
	}
}

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
}

func (p *freezeProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

func grepMetrics(all string) string {
	var out []string
	for _, l := range strings.Split(all, "\n") {
		if strings.HasPrefix(l, "ellipsis_gateway_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestNATSUnreachable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.NATSURL = "nats://127.0.0.1:1" })
	c := e.dial("alice", "")
	start := time.Now()
	c.send(`{"type":"join","room":"42","id":"j"}`)
	if f := c.expectError(protocol.CodeUnavailable); f.str("id") != "j" || f.str("room") != "42" {
		t.Fatalf("unavailable %v", f)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("unavailable took %s, want at once", d)
	}
	st, body := httpGet(t, e.httpURL("/v1/rooms/42/typing?user=alice"), nil)
	if code, _ := errorOf(body); st != 503 || code != protocol.CodeUnavailable {
		t.Fatalf("snapshot: %d %v", st, body)
	}
	st, body = httpGet(t, "http://"+e.srv.AdminAddr()+"/readyz", nil)
	if st != 503 || !slices.Contains(body["down"].([]any), any("nats")) {
		t.Fatalf("readyz: %d %v", st, body)
	}
}

func TestNATSOutage(t *testing.T) {
	t.Parallel()
	ns := testkit.StartNATS(t, "")
	e := newEnv(t, func(c *config.Config) { c.NATSURL = ns.URL() })
	e.startWorker(ns.URL())
	e.setSnapshot("42", protocol.Typist{User: "bob"})
	c := e.dial("alice", "")
	c.join("42")
	ns.Kill()
	testkit.WaitFor(t, 5*time.Second, "the gateway to see NATS down", func() bool {
		st, _ := httpGet(t, "http://"+e.srv.AdminAddr()+"/readyz", nil)
		return st == 503
	})
	c.send(`{"type":"typing_start","room":"42","id":"t1"}`)
	c.expectError(protocol.CodeUnavailable)
	c.send(`{"type":"sync","room":"42","id":"s1"}`)
	c.expectError(protocol.CodeUnavailable)

	ns.Restart() // the same port: the gateway reconnects
	testkit.WaitFor(t, 5*time.Second, "the gateway and worker to reconnect", func() bool {
		st, _ := httpGet(t, "http://"+e.srv.AdminAddr()+"/readyz", nil)
		return st == 200 && e.nc.IsConnected()
	})
	// After a NATS reconnect the gateway pushes a fresh snapshot.
	f := c.expect(protocol.TypeTyping)
	if users, _ := f["users"].([]any); len(users) != 1 || f.str("id") != "" {
		t.Fatalf("resync push %v", f)
	}
	// The start answered unavailable is never published; a new stop is.
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c.send(`{"type":"typing_stop","room":"42"}`)
	if cmd := e.nextCommand(); cmd.Op != protocol.OpStop {
		t.Fatalf("first command after the outage: %+v, want the stop", cmd)
	}
}

func TestRedisResync(t *testing.T) {
	t.Parallel()
	name := "gwt-resync-" + testkit.RandHex(4)
	e := newEnv(t, func(c *config.Config) { c.RedisURL = testkit.RedisURL() + "?client_name=" + name })
	e.startWorker("")
	e.setSnapshot("42", protocol.Typist{User: "bob"})
	c := e.dial("alice", "")
	c.join("42")
	// Kill only this gateway's Pub/Sub connection (named, in subscribe mode).
	list, err := e.rdb.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name="+name+" ") && strings.Contains(line, " sub=1 ") {
			for _, f := range strings.Fields(line) {
				if id, ok := strings.CutPrefix(f, "id="); ok {
					if err := e.rdb.Do(context.Background(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
						t.Fatal(err)
					}
					killed++
				}
			}
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d pubsub connections named %s:\n%s", killed, name, list)
	}
	f := c.expect(protocol.TypeTyping)
	if users, _ := f["users"].([]any); len(users) != 1 || f.str("room") != "42" {
		t.Fatalf("resync %v", f)
	}
	// Events flow again.
	ev := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: "42", User: "bob", Reason: protocol.ReasonStopped})
	if got := string(c.readRaw()); got != ev {
		t.Fatalf("after resync got %s", got)
	}
}

func TestRoomTypingHTTP(t *testing.T) {
	t.Parallel()
	const secret = "http-secret"
	// Eleven snapshots of one user in a row: a burst above the default
	// (TestHTTPSnapshotBudget tests the budget).
	e := newEnv(t, func(c *config.Config) { c.Auth = config.AuthJWT; c.JWTSecret = secret; c.HTTPSnapshotBurst = 20 })
	e.startWorker("")
	tok := signHS256(t, secret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	bearer := http.Header{"Authorization": {"Bearer " + tok}}
	for _, room := range []string{"42", "a/b", "{x}", "café ☕", "a b", "a*b?c[d]", "!abc:matrix.org", "50%", "."} {
		e.setSnapshot(room, protocol.Typist{User: "alice"}, protocol.Typist{User: "bob", Name: "Bob"})
		u := e.httpURL("/v1/rooms/" + strings.ReplaceAll(url.PathEscape(room), ".", "%2E") + "/typing")
		st, body := httpGet(t, u, bearer)
		users, _ := body["users"].([]any)
		if st != 200 || body["room"] != room || len(users) != 1 || users[0].(map[string]any)["user"] != "bob" {
			t.Errorf("room %q (%s): %d %v", room, u, st, body)
		}
	}
	// access_token works too; no token is 401.
	if st, _ := httpGet(t, e.httpURL("/v1/rooms/42/typing?access_token="+tok), nil); st != 200 {
		t.Errorf("access_token: %d", st)
	}
	if st, body := httpGet(t, e.httpURL("/v1/rooms/42/typing"), nil); st != 401 {
		t.Errorf("no token: %d %v", st, body)
	}
	// Invalid rooms: 400 naming the field.
	for _, esc := range []string{"a%01b", strings.Repeat("r", 300)} {
		st, body := httpGet(t, e.httpURL("/v1/rooms/"+esc+"/typing"), bearer)
		if code, msg := errorOf(body); st != 400 || code != protocol.CodeBadRequest || !strings.Contains(msg, "room") {
			t.Errorf("room %q: %d %v", esc, st, body)
		}
	}
	// No worker answers: 503.
	e.nc.Close()
	if st, body := httpGet(t, e.httpURL("/v1/rooms/42/typing"), bearer); st != 503 {
		t.Errorf("no worker: %d %v", st, body)
	}
}

func TestDemoAndConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for path, want := range map[string]string{
		"/":                "<title>Ellipsis demo</title>",
		"/src/ellipsis.js": "export function formatTyping",
	} {
		resp, err := http.Get(e.httpURL(path))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d %.100s", path, resp.StatusCode, b)
		}
		if path == "/src/ellipsis.js" && !strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
			t.Errorf("ellipsis.js Content-Type %q", resp.Header.Get("Content-Type"))
		}
	}
	st, body := httpGet(t, e.httpURL("/v1/config"), nil)
	if st != 200 || body["ttl_ms"] != 5000.0 || body["refresh_ms"] != 4000.0 || body["idle_stop_ms"] != 3000.0 || body["auth"] != "none" {
		t.Fatalf("config: %d %v", st, body)
	}
	if st, _ := httpGet(t, e.httpURL("/nope"), nil); st != 404 {
		t.Errorf("/nope: %d", st)
	}

	off := newEnv(t, func(c *config.Config) { c.DemoPage = false })
	if st, _ := httpGet(t, off.httpURL("/"), nil); st != 404 {
		t.Errorf("demo disabled: / is %d", st)
	}
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	admin := "http://" + e.srv.AdminAddr()
	if st, _ := httpGet(t, admin+"/healthz", nil); st != 200 {
		t.Fatalf("healthz %d", st)
	}
	testkit.WaitFor(t, 5*time.Second, "readyz 200", func() bool {
		st, _ := httpGet(t, admin+"/readyz", nil)
		return st == 200
	})
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !containsAll(string(b), "ellipsis_gateway_connections", "ellipsis_gateway_redis_subscriptions", "go_goroutines") {
		t.Fatalf("metrics:\n%s", grepMetrics(string(b)))
	}

	noAdmin := newEnv(t, func(c *config.Config) { c.AdminAddr = "" })
	if noAdmin.srv.AdminAddr() != "" {
		t.Fatalf("AdminAddr %q with the admin listener disabled", noAdmin.srv.AdminAddr())
	}

	// /debug/pprof/ only with ELLIPSIS_PPROF.
	if st := getStatus(t, admin+"/debug/pprof/"); st != 404 {
		t.Errorf("/debug/pprof/ without ELLIPSIS_PPROF: %d, want 404", st)
	}
	prof := newEnv(t, func(c *config.Config) { c.Pprof = true })
	if st := getStatus(t, "http://"+prof.srv.AdminAddr()+"/debug/pprof/goroutine?debug=1"); st != 200 {
		t.Errorf("/debug/pprof/goroutine with ELLIPSIS_PPROF: %d, want 200", st)
	}
}

// getStatus is the status of a GET of u (any body).
func getStatus(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.ShutdownDrain = 200 * time.Millisecond })
	e.startWorker("")
	a := e.dial("alice", "")
	a.join("42")
	b := e.dial("bob", "")
	b.join("42")
	b.join("43")

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(ctx)
	}()
	got := map[string][]string{}
	for i := 0; i < 2; i++ {
		cmd := e.nextCommand()
		if cmd.Op != protocol.OpDisconnect {
			t.Fatalf("command %+v", cmd)
		}
		got[cmd.User] = cmd.Rooms
	}
	if !slices.Equal(got["alice"], []string{"42"}) || !slices.Equal(got["bob"], []string{"42", "43"}) {
		t.Fatalf("disconnects %v", got)
	}
	a.expectClose(websocket.CloseGoingAway)
	b.expectClose(websocket.CloseGoingAway)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	e.noCommand(200 * time.Millisecond) // exactly one disconnect each
	if err := e.srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := e.srv.Start(context.Background()); err == nil {
		t.Fatal("Start after Shutdown succeeded")
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	cfg := config.Dev()
	cfg.HTTPAddr, cfg.AdminAddr = "127.0.0.1:0", ""
	s, err := gateway.New(gateway.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown before Start: %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown twice: %v", err)
	}
	bad := config.Default()
	bad.Auth = config.AuthJWT
	if _, err := gateway.New(gateway.Options{Config: bad}); err == nil || !strings.Contains(err.Error(), "ELLIPSIS_JWT_SECRET") {
		t.Fatalf("New with jwt and no secret: %v", err)
	}
	jwks := config.Default()
	jwks.JWKSFile = "/nonexistent.json"
	if _, err := gateway.New(gateway.Options{Config: jwks}); err == nil || !strings.Contains(err.Error(), "JWKS") {
		t.Fatalf("New with JWKS only: %v", err)
	}
}

// A restarted gateway with a configured ELLIPSIS_GATEWAY_ID must not reuse
// connection ids: workers remember each connection's last seq for a while,
// and a reused "<id>:1" would make the new connection's commands stale.
func TestConfiguredGatewayIDIsUniquePerBoot(t *testing.T) {
	cfg := config.Dev()
	cfg.GatewayID = "fixed"
	a, err := gateway.New(gateway.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	b, err := gateway.New(gateway.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if a.GatewayID() == b.GatewayID() || !strings.HasPrefix(a.GatewayID(), "fixed-") || !strings.HasPrefix(b.GatewayID(), "fixed-") {
		t.Fatalf("two boots of gateway %q got ids %q and %q", cfg.GatewayID, a.GatewayID(), b.GatewayID())
	}
}
