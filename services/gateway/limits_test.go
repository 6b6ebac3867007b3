package gateway_test

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Item 6, every limit of docs/protocol.md ("Limits") just under and just over, on real
// connections.

// paddedPing is a ping frame of exactly n bytes (unknown fields are
// ignored).
func paddedPing(n int) string {
	f := `{"type":"ping","id":"p","pad":""}`
	return f[:len(f)-2] + strings.Repeat("x", n-len(f)) + `"}`
}

func TestFrameLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.MaxFrameBytes = 1024 })
	c := e.dial("alice", "")
	c.send(paddedPing(1024)) // just under (at) the limit
	c.expect(protocol.TypePong)
	c.send(paddedPing(1025)) // just over
	c.expectClose(websocket.CloseMessageTooBig)

	bin := e.dial("alice", "")
	bin.send(`{"type":"ping","id":"ok"}`)
	bin.expect(protocol.TypePong)
	if err := bin.ws.WriteMessage(websocket.BinaryMessage, []byte(`{"type":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	bin.expectClose(websocket.CloseUnsupportedData)

	utf := e.dial("alice", "")
	utf.send(`{"type":"ping","id":"café ☕ 😀"}`) // valid multi-byte UTF-8
	if f := utf.expect(protocol.TypePong); f.str("id") != "café ☕ 😀" {
		t.Fatalf("pong %v", f)
	}
	for _, bad := range []string{"\xff", "\xc3", "\xed\xa0\x80" /* UTF-16 surrogate */, "\xf8\x88\x80\x80\x80"} {
		u := e.dial("alice", "")
		if err := u.ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping","id":"`+bad+`"}`)); err != nil {
			t.Fatal(err)
		}
		u.expectClose(websocket.CloseInvalidFramePayloadData)
	}
	// A close is counted when its connection ends, which can come after
	// the client has read the close frame.
	// utf is still open: six connections end, one stays.
	testkit.WaitFor(t, 5*time.Second, "the closed connections to end", func() bool { return e.metric("ellipsis_gateway_connections") == 1 })
	for code, n := range map[string]float64{"1009": 1, "1003": 1, "1007": 4} {
		if got := e.metric(`ellipsis_gateway_closes_total{code="` + code + `"}`); got != n {
			t.Errorf("closes_total{%s} = %v, want %v", code, got, n)
		}
	}
}

func TestRoomLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.MaxRoomsPerConn = 3 })
	e.startWorker("")
	c := e.dial("alice", "")
	c.join("r1")
	c.join("r2")
	c.join("r3") // just under: the third of three
	c.join("r2") // a joined room does not count twice
	c.send(`{"type":"join","room":"r4","id":"j4"}`)
	if f := c.expectError(protocol.CodeRoomLimit); f.str("room") != "r4" || f.str("id") != "j4" || !strings.Contains(f.str("message"), "3") {
		t.Fatalf("room_limit %v", f)
	}
	if slices.Contains(pubsubChannels(t, e), e.names.RoomChannel("r4")) {
		t.Fatal("a refused join subscribed its room")
	}
	c.send(`{"type":"leave","room":"r1"}`)
	c.expect(protocol.TypeLeft)
	c.join("r4")
	// The limit is per connection.
	d := e.dial("alice", "")
	d.join("r5")
}

// The bucket admits its burst; beyond it one rate_limited error frame a
// second and silence, and rejections are counted over time, not in a row:
// a frame admitted in between does not reset the count.
func TestInboundRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.InboundRate = 1; c.InboundBurst = 5; c.InboundMaxRejected = 3 })
	c := e.dial("alice", "")
	for i := 0; i < 5; i++ { // the burst: all served
		c.send(`{"type":"ping","id":"p` + strconv.Itoa(i) + `"}`)
	}
	for i := 0; i < 5; i++ {
		c.expect(protocol.TypePong)
	}
	// Over the bucket, but not over the limit. The limit comes before
	// decoding: malformed frames are rejected like the others, never
	// answered bad_request or unknown_type.
	for _, f := range []string{`{"type":"ping","id":"r"}`, `not json`, `{"type":"nope","id":"u"}`} {
		c.send(f)
	}
	// One notice, naming no frame (rejected frames are not decoded); the
	// other two rejections get no reply.
	if f := c.expectError(protocol.CodeRateLimited); f.str("id") != "" {
		t.Fatalf("rate_limited %v", f)
	}
	time.Sleep(1100 * time.Millisecond) // one token back: served
	c.send(`{"type":"ping","id":"again"}`)
	if f := c.expect(protocol.TypePong); f.str("id") != "again" {
		t.Fatalf("after the rejections: %v, want the pong of \"again\"", f)
	}
	// A fourth rejection within 10 s closes, although a frame was served
	// since the third.
	c.send(`{"type":"ping"}`)
	c.expectClose(websocket.ClosePolicyViolation)
	if n := e.metric("ellipsis_gateway_rate_limited_total"); n != 4 {
		t.Errorf("rate_limited_total = %v, want 4", n)
	}
	if n := e.metric(`ellipsis_gateway_errors_total{code="rate_limited"}`); n != 1 {
		t.Errorf("errors_total{rate_limited} = %v, want 1 (one notice a second)", n)
	}
	if n := e.metric("ellipsis_gateway_abuse_closes_total"); n != 1 {
		t.Errorf("abuse_closes_total = %v, want 1", n)
	}
	if n := e.metric(`ellipsis_gateway_frames_in_total{type="invalid"}`); n != 0 {
		t.Errorf("frames_in_total{invalid} = %v: a rejected frame was decoded", n)
	}

	// WebSocket ping control frames take tokens too: the burst is answered,
	// a flood is not, and a sustained one closes with 1008.
	p := e.dial("bob", "")
	pongs := make(chan string, 100)
	p.ws.SetPongHandler(func(s string) error { pongs <- s; return nil })
	for i := 0; i < 5; i++ {
		if err := p.ws.WriteControl(websocket.PingMessage, []byte("k"+strconv.Itoa(i)), time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	p.send(`{"type":"ping","id":"after"}`) // no token left: rate_limited
	if f := p.expectError(protocol.CodeRateLimited); f.str("id") != "" {
		t.Fatalf("rate_limited %v", f)
	}
	if len(pongs) != 5 {
		t.Fatalf("%d pongs for the 5 pings of the burst", len(pongs))
	}
	for i := 0; i < 10; i++ {
		if p.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)) != nil {
			break
		}
	}
	p.expectClose(websocket.ClosePolicyViolation)
	if len(pongs) != 5 {
		t.Fatalf("%d pongs, want only the burst's 5", len(pongs))
	}
}

// The outbound queue absorbs a burst up to its high-water mark (half its
// size) event by event while a client is not reading; past it events
// conflate (TestSlowConsumerConflates), and a write stall closes with
// 1013 (TestWriteStall, TestSlowReaderDoesNotDelayOthers).
func TestOutboundQueueUnderLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.OutboundQueue = 32 })
	e.startWorker("")
	c := e.dial("alice", "")
	c.join("r")
	ev := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "bob", TTLMs: 5000})
	e.publishMany("r", ev, 15)
	for i := 0; i < 16; i++ {
		if got := string(c.readRaw()); got != ev {
			t.Fatalf("event %d: %s", i, got)
		}
	}
	c.send(`{"type":"ping"}`)
	c.expect(protocol.TypePong)
	if n := e.metric(`ellipsis_gateway_closes_total{code="1013"}`); n != 0 {
		t.Fatalf("closed a client within its queue: %v", n)
	}
}

// A write that cannot finish within ELLIPSIS_WRITE_STALL (a client that
// stopped reading) closes the connection with 1013, counted in
// write_stall_closes_total, whatever its queue holds.
func TestWriteStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.OutboundQueue = 1 << 20; c.WriteStall = 300 * time.Millisecond })
	e.startWorker("")
	ws := e.dialSlow(e.wsURL(url.Values{"user": {"slow"}}))
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"join","room":"r","id":"j"}`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // joined (the reply waits in the socket)
	ev := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "bob", Name: strings.Repeat("B", 2000), TTLMs: 5000})
	e.publishMany("r", ev, 4000) // 8 MB: more than the socket buffers hold
	testkit.WaitFor(t, 5*time.Second, "the stalled connection to be closed with 1013", func() bool {
		return e.metric(`ellipsis_gateway_closes_total{code="1013"}`) == 1 &&
			e.metric("ellipsis_gateway_write_stall_closes_total") == 1
	})
}

// Ping/pong keepalive with a read deadline: a client that answers pings
// stays for many pong waits; one that never reads (so never answers) is
// dropped after one.
func TestKeepalive(t *testing.T) {
	t.Parallel()
	// Pings go out at 9/10 of the pong wait, so the pong has 1/10 of it
	// (200 ms) to come back: enough under -race on a busy machine.
	e := newEnv(t, func(c *config.Config) { c.PongWait = 2 * time.Second })
	alive := e.dial("alice", "")
	r := readAll(alive.ws, 16)
	silent := e.dialSlow(e.wsURL(url.Values{"user": {"bob"}}))
	_ = silent
	testkit.WaitFor(t, 5*time.Second, "the silent client to be dropped", func() bool {
		return e.metric(`ellipsis_gateway_closes_total{code="1006"}`) == 1
	})
	time.Sleep(6 * time.Second) // three pong waits
	alive.send(`{"type":"ping","id":"still"}`)
	r.waitFor(t, protocol.TypePong, frameTimeout)
	if n := e.metric("ellipsis_gateway_connections"); n != 1 {
		t.Fatalf("connections = %v, want 1", n)
	}
}

func TestMaxConnsPerGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.MaxConns = 2 })
	a := e.dial("alice", "")
	e.dial("bob", "") // just under: the second of two
	st, code, msg, resp := handshakeResp(t, e.wsURL(url.Values{"user": {"carol"}}), nil)
	if st != http.StatusServiceUnavailable || code != protocol.CodeUnavailable || !strings.Contains(msg, "connection limit") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third connection: %d %s %q (Retry-After %q)", st, code, msg, resp.Header.Get("Retry-After"))
	}
	// Checked before authentication: no credentials, still 503.
	if st, _, _ := handshake(t, "ws://"+e.srv.HTTPAddr()+"/v1/ws", nil); st != 503 {
		t.Fatalf("third connection without credentials: %d", st)
	}
	a.ws.Close()
	testkit.WaitFor(t, 5*time.Second, "the slot to be given back", func() bool {
		st, _, _ := handshake(t, e.wsURL(url.Values{"user": {"carol"}}), nil)
		return st == 101
	})
	if n := e.metric(`ellipsis_gateway_handshakes_rejected_total{reason="max_conns"}`); n < 2 {
		t.Fatalf("handshakes_rejected_total{max_conns} = %v", n)
	}
	// The limit is exported beside the count, for the capacity alert.
	if n := e.metric("ellipsis_gateway_max_connections"); n != 2 {
		t.Fatalf("max_connections = %v, want 2 (ELLIPSIS_MAX_CONNS)", n)
	}
}

func TestMaxConnsPerUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.MaxConnsPerUser = 2 })
	a := e.dial("alice", "")
	e.dial("alice", "") // just under
	st, code, msg, resp := handshakeResp(t, e.wsURL(url.Values{"user": {"alice"}}), nil)
	if st != http.StatusTooManyRequests || code != "too_many_connections" || !strings.Contains(msg, "alice") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third alice: %d %s %q", st, code, msg)
	}
	e.dial("bob", "") // other users are not affected
	a.ws.Close()
	testkit.WaitFor(t, 5*time.Second, "alice's slot to be given back", func() bool {
		st, _, _ := handshake(t, e.wsURL(url.Values{"user": {"alice"}}), nil)
		return st == 101
	})
}
