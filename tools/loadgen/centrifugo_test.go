package loadgen

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// fakeCentrifugo is a small Centrifugo stand-in speaking the JSON
// protocol as v6 does (see centrifugo.go): connect with an HS256 token,
// subscribe, publish into channels of one namespace, publications pushed
// to every subscriber (the publisher too), a ping {} after subscribe that
// must be answered with {}, and the publisher's reply batched with its
// echo in one message (newline-delimited), as Centrifugo's write batching
// does.
type fakeCentrifugo struct {
	t         *testing.T
	secret    []byte
	namespace string

	mu   sync.Mutex
	subs map[string][]*fakeConn // channel -> subscribers

	pongs     atomic.Int64
	published atomic.Int64
	badCmds   atomic.Int64
}

type fakeConn struct {
	ws   *websocket.Conn
	mu   sync.Mutex
	user string
}

func (c *fakeConn) write(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_ = c.ws.WriteMessage(websocket.TextMessage, b)
}

func (f *fakeCentrifugo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/connection/websocket" {
		http.NotFound(w, r)
		return
	}
	up := websocket.Upgrader{}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	c := &fakeConn{ws: ws}
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			f.command(c, line)
		}
	}
}

func (f *fakeCentrifugo) command(c *fakeConn, line []byte) {
	if string(line) == "{}" {
		f.pongs.Add(1)
		return
	}
	var cmd struct {
		ID      uint32 `json:"id"`
		Connect *struct {
			Token string `json:"token"`
		} `json:"connect"`
		Subscribe *struct {
			Channel string `json:"channel"`
		} `json:"subscribe"`
		Publish *struct {
			Channel string          `json:"channel"`
			Data    json.RawMessage `json:"data"`
		} `json:"publish"`
	}
	if err := json.Unmarshal(line, &cmd); err != nil || cmd.ID == 0 {
		f.badCmds.Add(1)
		return
	}
	id := strconv.FormatUint(uint64(cmd.ID), 10)
	switch {
	case cmd.Connect != nil:
		sub, ok := f.verify(cmd.Connect.Token)
		if !ok {
			c.write([]byte(`{"id":` + id + `,"error":{"code":109,"message":"token expired"}}`))
			return
		}
		c.user = sub
		c.write([]byte(`{"id":` + id + `,"connect":{"client":"c-` + sub + `","version":"fake","ping":25,"pong":true}}`))
	case cmd.Subscribe != nil && c.user != "":
		ch := cmd.Subscribe.Channel
		if !strings.HasPrefix(ch, f.namespace+":") {
			c.write([]byte(`{"id":` + id + `,"error":{"code":102,"message":"unknown channel"}}`))
			return
		}
		f.mu.Lock()
		f.subs[ch] = append(f.subs[ch], c)
		f.mu.Unlock()
		c.write([]byte(`{"id":` + id + `,"subscribe":{}}`))
		c.write([]byte(`{}`)) // a ping
	case cmd.Publish != nil && c.user != "":
		f.published.Add(1)
		ch := cmd.Publish.Channel
		push := `{"push":{"channel":"` + ch + `","pub":{"data":` + string(cmd.Publish.Data) + `,"info":{"user":"` + c.user + `","client":"c-` + c.user + `"}}}}`
		f.mu.Lock()
		subs := append([]*fakeConn(nil), f.subs[ch]...)
		f.mu.Unlock()
		for _, s := range subs {
			if s == c {
				s.write([]byte(`{"id":` + id + `,"publish":{}}` + "\n" + push))
			} else {
				s.write([]byte(push))
			}
		}
	default:
		f.badCmds.Add(1)
	}
}

// verify checks an HS256 token's signature and returns its sub.
func (f *fakeCentrifugo) verify(tok string) (string, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", false
	}
	mac := hmac.New(sha256.New, f.secret)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
		return "", false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", false
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Sub == "" {
		return "", false
	}
	return claims.Sub, true
}

func startFakeCentrifugo(t *testing.T, secret string) (*fakeCentrifugo, string) {
	f := &fakeCentrifugo{t: t, secret: []byte(secret), namespace: "typing", subs: map[string][]*fakeConn{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, "ws" + strings.TrimPrefix(srv.URL, "http") + "/connection/websocket"
}

// A bounded rate-mode run against the fake server: every state change
// reaches the room's other members, the publisher's echoes are counted
// apart, the pings are answered, the replies batched with an echo are
// read.
func TestCentrifugoAgainstFake(t *testing.T) {
	f, u := startFakeCentrifugo(t, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{
		System: SystemCentrifugo, URLs: []string{u}, JWTSecret: "s3cret", Mode: ModeRate,
		Conns: 20, Rooms: 4, TypingShare: 0.5, Rate: 20, Duration: 2 * time.Second,
		// A settle long enough for the publishers' own replies and echoes too
		// (the settle ends once the other members have every change).
		Settle: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	res.WriteTable(&table)
	t.Log(table.String())
	if res.Connected != 20 || len(res.Errors) != 0 {
		t.Fatalf("connected %d of 20, errors %v", res.Connected, res.Errors)
	}
	if res.TypingConns != 10 {
		t.Errorf("%d typing connections, want 10", res.TypingConns)
	}
	sent := res.Sent.Starts + res.Sent.Stops
	d := res.Delivered
	if sent == 0 || d.ExpectedState != 4*sent || d.MatchedState != d.ExpectedState || d.LostState != 0 {
		t.Errorf("sent %d state changes; delivered %d of %d expected (want 4 per change)", sent, d.MatchedState, d.ExpectedState)
	}
	if d.Echoes != sent || d.Replies != sent || d.Unmatched != 0 {
		t.Errorf("echoes %d, replies %d, unmatched %d; want an echo and a reply per change (%d), nothing unmatched", d.Echoes, d.Replies, d.Unmatched, sent)
	}
	if res.Latency.Count != d.MatchedState || res.Latency.P50 <= 0 {
		t.Errorf("latency %+v", res.Latency)
	}
	if d.Pings != 20 {
		t.Errorf("%d pings answered, want 20 (one per connection)", d.Pings)
	}
	testkit.WaitForWhy(t, 20*time.Second, "20 pongs at the server", func() (bool, string) {
		n := f.pongs.Load()
		return n == 20, fmt.Sprintf("got %d", n)
	})
	if n := f.badCmds.Load(); n != 0 {
		t.Errorf("the server read %d malformed commands", n)
	}
}

// A wrong secret fails the connect with the server's error code.
func TestCentrifugoConnectError(t *testing.T) {
	_, u := startFakeCentrifugo(t, "right")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{
		System: SystemCentrifugo, URLs: []string{u}, JWTSecret: "wrong", Mode: ModeRate,
		Conns: 2, Rooms: 1, Rate: 1, Duration: time.Second,
	})
	if err == nil {
		t.Fatal("run with a wrong secret succeeded")
	}
	if res != nil && res.Connected != 0 {
		t.Errorf("%d connected with a wrong secret", res.Connected)
	}
}

func TestParseCentrifugo(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		kind       int
		want       protocol.ServerFrame
	}{
		{"publication fast path", `{"push":{"channel":"typing:r1","pub":{"data":{"type":"typing_start"},"info":{"user":"u1","client":"c"}}}}`,
			cfPublication, protocol.ServerFrame{Type: "typing_start", Room: "r1", User: "u1"}},
		{"stop", `{"push":{"channel":"typing:r1","pub":{"data":{"type":"typing_stop"},"info":{"user":"u1","client":"c"}}}}`,
			cfPublication, protocol.ServerFrame{Type: "typing_stop", Room: "r1", User: "u1", Reason: "stopped"}},
		{"escaped user: decoded", `{"push":{"channel":"typing:r1","pub":{"data":{"type":"typing_start"},"info":{"user":"u\"1","client":"c"}}}}`,
			cfPublication, protocol.ServerFrame{Type: "typing_start", Room: "r1", User: `u"1`}},
		{"fields reordered: decoded", `{"push":{"pub":{"info":{"client":"c","user":"u2"},"data":{"type":"typing_stop"}},"channel":"typing:r2"}}`,
			cfPublication, protocol.ServerFrame{Type: "typing_stop", Room: "r2", User: "u2", Reason: "stopped"}},
		{"publish reply", `{"id":7,"publish":{}}`, cfReplyOK, protocol.ServerFrame{ID: "7"}},
		{"error reply", `{"id":7,"error":{"code":103,"message":"permission denied"}}`, cfReplyError, protocol.ServerFrame{Code: "103"}},
		{"disconnect", `{"push":{"disconnect":{"code":3501,"reason":"bad request"}}}`, cfDisconnect, protocol.ServerFrame{Code: "3501"}},
		{"join push", `{"push":{"channel":"typing:r1","join":{"info":{"user":"u1"}}}}`, cfOther, protocol.ServerFrame{}},
		{"other data", `{"push":{"channel":"typing:r1","pub":{"data":{"type":"hello"},"info":{"user":"u1"}}}}`, cfBad, protocol.ServerFrame{}},
		{"not JSON", `{"push":`, cfBad, protocol.ServerFrame{}},
	} {
		ev, k := parseCentrifugo([]byte(tc.line))
		if k != tc.kind || !reflect.DeepEqual(ev, tc.want) {
			t.Errorf("%s: got %d %+v, want %d %+v", tc.name, k, ev, tc.kind, tc.want)
		}
	}
}

func TestCentrifugoLinesAndPing(t *testing.T) {
	var got []string
	for l := range lines([]byte("{\"id\":1}\n{}\n\n{\"push\":{}}\n")) {
		got = append(got, string(l))
	}
	if strings.Join(got, "|") != `{"id":1}|{}|{"push":{}}` {
		t.Errorf("lines: %q", got)
	}
	if !isPing([]byte("{}")) || !isPing([]byte(" {}\r")) || isPing([]byte(`{"id":1}`)) {
		t.Error("isPing")
	}
}

func TestCentrifugoFrame(t *testing.T) {
	c := &client{room: "run-r3", r: &runner{opts: Options{CentrifugoNamespace: "typing"}}, cmdID: 2}
	var d centrifugoDriver
	for i, tc := range []struct {
		k    kind
		want string
	}{
		{kindStart, `{"id":3,"publish":{"channel":"typing:run-r3","data":{"type":"typing_start"}}}`},
		{kindRefresh, `{"id":4,"publish":{"channel":"typing:run-r3","data":{"type":"typing_start"}}}`},
		{kindStop, `{"id":5,"publish":{"channel":"typing:run-r3","data":{"type":"typing_stop"}}}`},
	} {
		b := d.frame(c, tc.k)
		if string(b) != tc.want || !json.Valid(b) {
			t.Errorf("frame %d: %s, want %s", i, b, tc.want)
		}
	}
}

func TestTypingSpreadWithinRooms(t *testing.T) {
	// Rooms of 5, half typing, an even room count: every room gets 2 or 3
	// typists (not all typists in every other room).
	r := &runner{opts: Options{Mode: ModeRate, Conns: 40, Rooms: 8, TypingShare: 0.5, URLs: []string{"ws://127.0.0.1:1/v1/ws"}}, runID: "t"}
	r.opts.System = SystemEllipsis
	typing := map[int]int{}
	total := 0
	for _, c := range buildClients(r) {
		if c.typing {
			typing[c.roomIdx]++
			total++
		}
	}
	if total != 20 {
		t.Errorf("%d typists, want 20", total)
	}
	for room := 0; room < 8; room++ {
		if n := typing[room]; n < 2 || n > 3 {
			t.Errorf("room %d has %d typists, want 2 or 3", room, n)
		}
	}
}
