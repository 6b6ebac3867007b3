package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/services/gateway"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Tests run against the Redis and NATS of the test environment
// (testkit.RedisURL, testkit.NATSURL: `make test` starts private ones).
// Every test gets its own key prefix and subject prefix, so tests (and other
// suites) never see each other's traffic; nothing is ever flushed.

const frameTimeout = 3 * time.Second

// env is one gateway plus an emulated presence worker: a snapshot responder
// and a command collector on the test's NATS subjects, and a Redis client
// to publish room events.
type env struct {
	t     *testing.T
	cfg   config.Config
	srv   *gateway.Server
	names names.Names
	nc    *nats.Conn
	rdb   *redis.Client
	cmds  chan protocol.Command // every command the gateway published; 1000, full: the NATS callback blocks

	mu   sync.Mutex
	snap map[string][]protocol.Typist // room -> snapshot answer
	// full, when it has the room, is its whole snapshot answer (threads,
	// activities), instead of snap's.
	full map[string]protocol.Snapshot
	// onSnapshot, when set, runs before the snapshot is answered.
	onSnapshot func(room string)
}

type envOpt func(*config.Config)

// testBatchWindow is ELLIPSIS_TEST_BATCH_WINDOW (a duration, e.g. 2ms),
// the ELLIPSIS_BATCH_WINDOW every test gateway runs with, so the package's
// contract can be run with batching on; unset: 0, the default.
func testBatchWindow(t testing.TB) time.Duration {
	v := os.Getenv("ELLIPSIS_TEST_BATCH_WINDOW")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("ELLIPSIS_TEST_BATCH_WINDOW: %v", err)
	}
	return d
}

func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	id := testkit.RandHex(6)
	cfg := config.Default()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.Auth = config.AuthNone
	cfg.NATSURL = testkit.NATSURL()
	cfg.RedisURL = testkit.RedisURL()
	cfg.KeyPrefix = "gwt" + id + ":"
	cfg.SubjectPrefix = "gwt" + id
	cfg.GatewayID = "gw-test" + id[:4]
	cfg.ShutdownDrain = 0
	cfg.LameDuck = 0
	cfg.SnapshotTimeout = time.Second
	cfg.BatchWindow = testBatchWindow(t)
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	e := &env{t: t, cfg: cfg, names: names.New(cfg.KeyPrefix, cfg.SubjectPrefix),
		cmds: make(chan protocol.Command, 1000), snap: map[string][]protocol.Typist{}}

	e.rdb = redis.NewClient(testkit.RedisOptions(t))
	t.Cleanup(func() { e.rdb.Close() })

	srv, err := gateway.New(gateway.Options{Config: cfg})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.srv = srv
	if err := srv.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return e
}

// startWorker connects the emulated worker to natsURL (default: the test's).
func (e *env) startWorker(natsURL string) {
	e.t.Helper()
	if natsURL == "" {
		natsURL = e.cfg.NATSURL
	}
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		e.t.Fatalf("worker nats: %v", err)
	}
	e.t.Cleanup(nc.Close)
	e.nc = nc
	if _, err := nc.QueueSubscribe(e.names.SnapshotSubject(), names.QueueGroup, func(m *nats.Msg) {
		req, err := protocol.DecodeSnapshotRequest(m.Data)
		if err != nil {
			e.t.Errorf("bad snapshot request %s: %v", m.Data, err)
			return
		}
		e.mu.Lock()
		users, hook := e.snap[req.Room], e.onSnapshot
		full, isFull := e.full[req.Room]
		e.mu.Unlock()
		if hook != nil {
			hook(req.Room)
		}
		reply := protocol.SnapshotReply{V: 1, Room: req.Room, Users: users}
		if isFull {
			reply = protocol.SnapshotReply{V: 1, Room: req.Room, Users: full.Users, Total: full.Total, Activities: full.Activities, Threads: full.Threads}
		}
		b, _ := json.Marshal(reply)
		_ = m.Respond(b)
	}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := nc.Subscribe(e.names.CommandSubject(), func(m *nats.Msg) {
		cmds, errs, err := protocol.DecodeCommands(m.Data) // a command or a batch
		if err != nil {
			e.t.Errorf("gateway published an invalid command %s: %v", m.Data, err)
			return
		}
		for i, cmd := range cmds {
			if errs[i] != nil {
				e.t.Errorf("gateway published an invalid command in %s: %v", m.Data, errs[i])
				continue
			}
			e.cmds <- cmd
		}
	}); err != nil {
		e.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) setSnapshot(room string, users ...protocol.Typist) {
	e.mu.Lock()
	e.snap[room] = users
	e.mu.Unlock()
}

// publish sends a room event on Redis as a worker would and returns the
// exact payload.
func (e *env) publish(ev protocol.RoomEvent) string {
	e.t.Helper()
	payload := string(protocol.RoomEventPrefix(ev)) + strconv.FormatInt(time.Now().UnixMilli(), 10) + "}"
	if err := e.rdb.Publish(context.Background(), e.names.RoomChannel(ev.Room), payload).Err(); err != nil {
		e.t.Fatalf("publish: %v", err)
	}
	return payload
}

// nextCommand waits for the next published command.
func (e *env) nextCommand() protocol.Command {
	e.t.Helper()
	select {
	case c := <-e.cmds:
		return c
	case <-time.After(frameTimeout):
		e.t.Fatal("no command published")
	}
	return protocol.Command{}
}

// noCommand checks that nothing is published for d.
func (e *env) noCommand(d time.Duration) {
	e.t.Helper()
	select {
	case c := <-e.cmds:
		e.t.Fatalf("unexpected command %+v", c)
	case <-time.After(d):
	}
}

func (e *env) httpURL(path string) string { return "http://" + e.srv.HTTPAddr() + path }

func (e *env) wsURL(q url.Values) string {
	return "ws://" + e.srv.HTTPAddr() + "/v1/ws?" + q.Encode()
}

type client struct {
	t  *testing.T
	ws *websocket.Conn
	// early holds the summaries read while waiting for an answer (watchAll:
	// the rooms of an earlier watch frame may have theirs already), for
	// expectSummary.
	early []frame
}

// dial opens a dev-auth WebSocket as user.
func (e *env) dial(user, name string) *client {
	e.t.Helper()
	q := url.Values{"user": {user}}
	if name != "" {
		q.Set("name", name)
	}
	return e.dialURL(e.wsURL(q), nil)
}

func (e *env) dialURL(u string, h http.Header) *client {
	e.t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(u, h)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		e.t.Fatalf("dial %s: %v (HTTP %d)", u, err, status)
	}
	e.t.Cleanup(func() { ws.Close() })
	return &client{t: e.t, ws: ws}
}

func (c *client) send(v any) {
	c.t.Helper()
	var b []byte
	if s, ok := v.(string); ok {
		b = []byte(s)
	} else {
		b, _ = json.Marshal(v)
	}
	if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// readRaw returns the next frame's bytes.
func (c *client) readRaw() []byte {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(frameTimeout))
	_, b, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return b
}

type frame map[string]any

func (f frame) str(k string) string { s, _ := f[k].(string); return s }

func (c *client) read() frame {
	c.t.Helper()
	b := c.readRaw()
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		c.t.Fatalf("frame %s: %v", b, err)
	}
	return f
}

// expect reads the next frame and checks its type.
func (c *client) expect(typ string) frame {
	c.t.Helper()
	f := c.read()
	if f.str("type") != typ {
		c.t.Fatalf("got frame %v, want type %s", f, typ)
	}
	return f
}

// expectError reads an error frame with code.
func (c *client) expectError(code string) frame {
	c.t.Helper()
	f := c.expect(protocol.TypeError)
	if f.str("code") != code {
		c.t.Fatalf("got error %v, want code %s", f, code)
	}
	if f.str("message") == "" {
		c.t.Fatalf("error without message: %v", f)
	}
	return f
}

// join joins room and returns the joined frame.
func (c *client) join(room string) frame {
	c.t.Helper()
	c.send(map[string]string{"type": "join", "room": room, "id": "j-" + room})
	f := c.expect(protocol.TypeJoined)
	if f.str("room") != room || f.str("id") != "j-"+room {
		c.t.Fatalf("joined %v, want room %q", f, room)
	}
	return f
}

// expectClose reads until the connection closes and checks the close code.
func (c *client) expectClose(code int) {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(frameTimeout))
	for {
		_, _, err := c.ws.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			c.t.Fatalf("connection ended with %v, want close %d", err, code)
		}
		if ce.Code != code {
			c.t.Fatalf("close %d %q, want %d", ce.Code, ce.Text, code)
		}
		return
	}
}

// httpGet returns status and decoded JSON body.
func httpGet(t *testing.T, u string, h http.Header) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// errorOf returns the code and message of a JSON error body.
func errorOf(body map[string]any) (code, msg string) {
	e, _ := body["error"].(map[string]any)
	code, _ = e["code"].(string)
	msg, _ = e["message"].(string)
	return code, msg
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
