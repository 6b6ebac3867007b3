// Package integration runs Ellipsis end to end against the real Redis and
// NATS of this machine (127.0.0.1:6379 and :4222, or ELLIPSIS_TEST_REDIS_URL
// and ELLIPSIS_TEST_NATS_URL): gateways and workers in-process, each with its
// own connections, and as separate processes. Every test uses its own Redis
// key prefix and NATS subject prefix, so it never assumes an empty Redis and
// never disturbs another test.
package integration

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	gateway "github.com/ellipsis-chat/ellipsis/services/gateway"
	"github.com/ellipsis-chat/ellipsis/services/presence-worker/worker"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
	"github.com/ellipsis-chat/ellipsis/testkit/inproc"
)

// Test timing: short, and obeying throttle < refresh < ttl like production.
const (
	testTTL      = 1500 * time.Millisecond
	testThrottle = 500 * time.Millisecond
	testRefresh  = 1000 * time.Millisecond
	testIdle     = 800 * time.Millisecond
	// expiryBound is docs/protocol.md's expiry push bound ("Timing"): ttl + 1 s.
	expiryBound = testTTL + time.Second
)

// testConfig returns a dev config on loopback port 0 with a private key
// prefix and subject prefix.
func testConfig(t *testing.T, keyPrefix, subjectPrefix string) config.Config {
	t.Helper()
	c := config.Dev()
	c.HTTPAddr = "127.0.0.1:0"
	c.AdminAddr = "127.0.0.1:0"
	c.NATSURL = testkit.NATSURL()
	c.RedisURL = testkit.RedisURL()
	c.KeyPrefix = keyPrefix
	c.SubjectPrefix = subjectPrefix
	c.TypingTTL = testTTL
	c.TypingThrottle = testThrottle
	c.TypingRefresh = testRefresh
	c.TypingIdleStop = testIdle
	c.ShutdownDrain = 200 * time.Millisecond
	// The suite's order, loss and shard-queue checks are written for
	// send-at-once and 16 worker shards (a proxy decodes single commands,
	// a flood fills one shard's 1024): the batch paths have tests of their
	// own (gateway internal/backend, worker dispatch and shard_window).
	c.BatchWindow = 0
	c.WorkerShards = 16
	c.LogLevel = "warn"
	if err := c.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	return c
}

// stack is a set of gateways and workers sharing one key and subject prefix.
type stack struct {
	t        *testing.T
	cfg      config.Config
	gateways []*gateway.Server
	workers  []*worker.Server
	svc      *inproc.Stack // nil until started
	rdb      *redis.Client
}

func newStack(t *testing.T, nGateways, nWorkers int, mutate ...func(*config.Config)) *stack {
	t.Helper()
	tok := testkit.RandHex(5)
	cfg := testConfig(t, "it-"+tok+":", "it"+tok)
	for _, m := range mutate {
		m(&cfg)
	}
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, cfg: cfg, rdb: redis.NewClient(opt)}
	t.Cleanup(s.cleanup)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	s.svc = inproc.StartT(t, inproc.Options{Config: cfg, Workers: nWorkers, Gateways: nGateways, GatewayIDSuffix: tok, Logger: log})
	s.gateways, s.workers = s.svc.Gateways, s.svc.Workers
	return s
}

func (s *stack) cleanup() {
	if s.svc != nil {
		s.svc.ShutdownWithin(10 * time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Remove this test's keys only.
	iter := s.rdb.Scan(ctx, 0, s.cfg.KeyPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		s.rdb.Del(ctx, iter.Val())
	}
	_ = s.rdb.Close()
}

// wsURL is the WebSocket URL of gateway i for a dev-auth user.
func (s *stack) wsURL(i int, user, name string) string {
	q := url.Values{"user": {user}}
	if name != "" {
		q.Set("name", name)
	}
	return "ws://" + s.gateways[i].HTTPAddr() + "/v1/ws?" + q.Encode()
}

// frame is one decoded server frame: protocol.ServerFrame, with Total a
// pointer so that a test tells a missing total from 0, and the time it was
// read.
type frame struct {
	protocol.ServerFrame
	Total *int `json:"total"`
	at    time.Time
}

func (f frame) String() string {
	b, _ := json.Marshal(f)
	return string(b)
}

// client is a test WebSocket client; a goroutine reads every frame into
// frames until the connection ends.
type client struct {
	t      *testing.T
	name   string
	conn   *websocket.Conn
	frames chan frame
	done   chan struct{}
	mu     sync.Mutex
	closed bool
	// Set by the reader before done is closed: why and when reading ended
	// (a *websocket.CloseError carries the server's close code).
	readErr error
	endedAt time.Time
}

func dial(t *testing.T, rawURL, name string) *client {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.Dial(rawURL, nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("%s: dial %s: %v (HTTP %d)", name, rawURL, err, status)
	}
	c := &client{t: t, name: name, conn: conn, frames: make(chan frame, 1024), done: make(chan struct{})}
	go c.read()
	t.Cleanup(c.close)
	return c
}

func (c *client) read() {
	defer close(c.done)
	for {
		_, data, err := c.conn.ReadMessage()
		if err != nil {
			c.readErr, c.endedAt = err, time.Now()
			return
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			c.t.Errorf("%s: undecodable frame %q: %v", c.name, data, err)
			continue
		}
		f.at = time.Now()
		select {
		case c.frames <- f:
		default:
			c.t.Errorf("%s: test client buffer full", c.name)
		}
	}
}

func (c *client) send(v map[string]any) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.conn.WriteJSON(v); err != nil {
		c.t.Fatalf("%s: write %v: %v", c.name, v, err)
	}
}

func (c *client) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	_ = c.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	_ = c.conn.Close()
	<-c.done
}

// abort drops the TCP connection without a close frame.
func (c *client) abort() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	_ = c.conn.UnderlyingConn().Close()
	<-c.done
}

// next waits for the next frame that matches pred, skipping others (pongs,
// refreshes) but failing on error frames unless pred accepts them.
func (c *client) next(pred func(frame) bool, within time.Duration, what string) frame {
	c.t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		select {
		case f := <-c.frames:
			if pred(f) {
				return f
			}
			if f.Type == "error" {
				c.t.Fatalf("%s: error frame while waiting for %s: %v", c.name, what, f)
			}
		case <-deadline.C:
			c.t.Fatalf("%s: no %s within %s", c.name, what, within)
			return frame{}
		}
	}
}

// tryNext is next without failing on a timeout: false when no frame
// matching pred arrived within d.
func (c *client) tryNext(pred func(frame) bool, d time.Duration) (frame, bool) {
	c.t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case f := <-c.frames:
			if pred(f) {
				return f, true
			}
			if f.Type == "error" {
				c.t.Fatalf("%s: error frame: %v", c.name, f)
			}
		case <-deadline.C:
			return frame{}, false
		}
	}
}

// quiet asserts that no frame matching pred arrives within d.
func (c *client) quiet(pred func(frame) bool, d time.Duration, what string) {
	c.t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case f := <-c.frames:
			if pred(f) {
				c.t.Fatalf("%s: unexpected %s: %v", c.name, what, f)
			}
		case <-deadline.C:
			return
		}
	}
}

// drain returns every frame received within d.
func (c *client) drain(d time.Duration) []frame {
	var out []frame
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case f := <-c.frames:
			out = append(out, f)
		case <-deadline.C:
			return out
		}
	}
}

func (c *client) join(room string) frame {
	c.t.Helper()
	id := "j-" + testkit.RandHex(5)
	c.send(map[string]any{"type": "join", "room": room, "id": id})
	return c.next(func(f frame) bool { return f.Type == "joined" && f.ID == id }, 5*time.Second, "joined "+room)
}

// joinRetrying joins room as a client does after an outage: a join
// answered unavailable (docs/protocol.md: "retry") is sent again after
// 200 ms, until joined or within has passed.
func (c *client) joinRetrying(room string, within time.Duration) frame {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		id := "j-" + testkit.RandHex(5)
		c.send(map[string]any{"type": "join", "room": room, "id": id})
		f := c.next(func(f frame) bool { return f.ID == id && (f.Type == "joined" || f.Type == "error") }, 5*time.Second, "an answer to join "+room)
		switch {
		case f.Type == "joined":
			return f
		case f.Code != "unavailable":
			c.t.Fatalf("%s: join %s answered %v", c.name, room, f)
		case time.Now().After(deadline):
			c.t.Fatalf("%s: join %s still unavailable after %v: %v", c.name, room, within, f)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *client) start(room string) { c.send(map[string]any{"type": "typing_start", "room": room}) }
func (c *client) stop(room string)  { c.send(map[string]any{"type": "typing_stop", "room": room}) }

func isStart(room, user string) func(frame) bool {
	return func(f frame) bool { return f.Type == "typing_start" && f.Room == room && f.User == user }
}

func isStop(room, user, reason string) func(frame) bool {
	return func(f frame) bool {
		return f.Type == "typing_stop" && f.Room == room && f.User == user && (reason == "" || f.Reason == reason)
	}
}

func isAbout(user string) func(frame) bool {
	return func(f frame) bool {
		if f.User == user {
			return true
		}
		for _, u := range append(f.Typing, f.Users...) {
			if u.User == user {
				return true
			}
		}
		return false
	}
}

func users(ts []protocol.Typist) string {
	var s []string
	for _, u := range ts {
		s = append(s, u.User)
	}
	return strings.Join(s, ",")
}
