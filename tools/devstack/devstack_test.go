package devstack_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/testkit"
	"github.com/ellipsis-chat/ellipsis/tools/backends"
	"github.com/ellipsis-chat/ellipsis/tools/demo"
	"github.com/ellipsis-chat/ellipsis/tools/devstack"
)

// testConfig is the dev config on loopback ports chosen by the kernel,
// with a unique Redis key prefix (the machine's Redis is shared).
func testConfig(t *testing.T, env map[string]string) (config.Config, string) {
	t.Helper()
	prefix := "ellipsis-test-tools-" + testkit.RandHex(6) + ":"
	base := map[string]string{
		"ELLIPSIS_HTTP_ADDR":      "127.0.0.1:0",
		"ELLIPSIS_ADMIN_ADDR":     "127.0.0.1:0",
		"ELLIPSIS_KEY_PREFIX":     prefix,
		"ELLIPSIS_SHUTDOWN_DRAIN": "200ms",
	}
	for k, v := range env {
		base[k] = v
	}
	cfg, err := config.Load(nil, nil, func(k string) (string, bool) { v, ok := base[k]; return v, ok }, config.Dev())
	if err != nil {
		t.Fatal(err)
	}
	return cfg, prefix
}

func start(t *testing.T, opts devstack.Options) *devstack.Stack {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t)
	}
	st, err := devstack.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := st.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return st
}

var lineRE = regexp.MustCompile(`^\[\s*\d+\.\ds\] (\w+)\s+sees: (.*)$`)

// runDemo plays the three demo users against the stack and checks what
// they saw and sent.
func runDemo(t *testing.T, st *devstack.Stack, d time.Duration) {
	t.Helper()
	var out testkit.SyncBuffer
	res, err := demo.Run(context.Background(), demo.Options{
		URL:      st.WebSocketURL(),
		Room:     "demo-" + testkit.RandHex(6),
		Speed:    2,
		Duration: d,
		Users: []demo.User{
			{ID: "alice", Name: "Alice", Session: 1, StartAfter: 0},
			{ID: "bob", Name: "Bob", Session: 0, StartAfter: 300 * time.Millisecond},
			{ID: "carol", Name: "Carol", Session: 2, StartAfter: 600 * time.Millisecond},
		},
		Settle: time.Second,
		Out:    &out,
	})
	text := out.String()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, text)
	}
	var sum bytes.Buffer
	_ = res.WriteSummary(&sum)
	t.Logf("demo output:\n%s%s", text, sum.String())

	last := map[string]string{}
	lines := 0
	for _, l := range strings.Split(text, "\n") {
		if m := lineRE.FindStringSubmatch(l); m != nil {
			last[m[1]] = m[2]
			lines++
		}
	}
	if lines < 6 {
		t.Fatalf("only %d indicator lines", lines)
	}
	for _, u := range []string{"alice", "bob", "carol"} {
		if last[u] != demo.Nobody {
			t.Errorf("%s's last line is %q, want %q (every stop reached every view)", u, last[u], demo.Nobody)
		}
	}
	for _, want := range []string{" is typing…", " are typing…"} {
		if !strings.Contains(text, want) {
			t.Errorf("nobody saw %q", want)
		}
	}
	if strings.Contains(text, "error:") {
		t.Errorf("the gateway answered with error frames")
	}
	for _, u := range res.Users {
		if u.Sent.Starts == 0 || u.Sent.Starts != u.Sent.Stops() {
			t.Errorf("%s: %+v; want starts, each stopped", u.ID, u.Sent)
		}
		if u.Received == 0 || u.Errors != 0 {
			t.Errorf("%s: received %d events, %d errors", u.ID, u.Received, u.Errors)
		}
	}
}

func TestStackEmbeddedBackendsRunsDemo(t *testing.T) {
	cfg, _ := testConfig(t, nil)
	st := start(t, devstack.Options{Config: cfg, Backends: backends.Options{DefaultRedisURL: "redis://" + testkit.ClosedAddr(t)}})
	b := st.Backends()
	if b.NATSSource != backends.Embedded || b.RedisSource != backends.Embedded {
		t.Fatalf("backends: NATS %s (%s), Redis %s (%s); want both embedded", b.NATSURL, b.NATSSource, b.RedisURL, b.RedisSource)
	}
	if st.Config().NATSURL != b.NATSURL || st.Config().RedisURL != b.RedisURL {
		t.Fatalf("services not pointed at the backends: %+v", st.Config())
	}
	if !strings.HasPrefix(st.URL(), "http://127.0.0.1:") || !strings.HasSuffix(st.WebSocketURL(), "/v1/ws") {
		t.Fatalf("URL %s, WebSocketURL %s", st.URL(), st.WebSocketURL())
	}

	admin := "http://" + st.AdminAddr()
	if code, body := testkit.HTTPGet(t, admin+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	if code, _ := testkit.HTTPGet(t, st.URL()); code != http.StatusOK {
		t.Fatalf("demo page: %d", code)
	}

	runDemo(t, st, 6*time.Second)

	// One registry, both services, served once on the gateway's admin.
	code, metrics := testkit.HTTPGet(t, admin+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{"ellipsis_gateway_", "ellipsis_worker_", "go_goroutines", "process_"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Shutdown(ctx); err != nil { // twice is fine
		t.Fatal(err)
	}
	if _, err := http.Get(st.URL()); err == nil {
		t.Fatal("public listener still serving after Shutdown")
	}
}

// TestStackLocalRedisRunsDemo uses a real Redis found as the default (as
// `make run` does with 127.0.0.1:6379 when it answers): the test Redis
// (ELLIPSIS_TEST_REDIS_URL, which `make test` starts), under a unique key
// prefix.
func TestStackLocalRedisRunsDemo(t *testing.T) {
	url := testkit.RedisURL()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	pctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		t.Fatalf("no Redis at %s (make test starts one; or set ELLIPSIS_TEST_REDIS_URL): %v", url, err)
	}
	cfg, prefix := testConfig(t, nil)
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	st := start(t, devstack.Options{Config: cfg, Backends: backends.Options{DefaultRedisURL: url}})
	if b := st.Backends(); b.RedisSource != backends.FromDefault {
		t.Fatalf("Redis %s (%s), want the local one", b.RedisURL, b.RedisSource)
	}
	runDemo(t, st, 5*time.Second)
}

func TestStartFailsWhenPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg, _ := testConfig(t, map[string]string{"ELLIPSIS_HTTP_ADDR": ln.Addr().String()})
	_, err = devstack.Start(context.Background(), devstack.Options{Config: cfg, Logger: zaptest.NewLogger(t)})
	if err == nil {
		t.Fatal("Start succeeded on a busy port")
	}
	if !strings.Contains(err.Error(), "ELLIPSIS_HTTP_ADDR "+ln.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error should name the setting and the cause: %v", err)
	}
}

func TestStartFailsWhenAdminPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg, _ := testConfig(t, map[string]string{"ELLIPSIS_ADMIN_ADDR": ln.Addr().String()})
	_, err = devstack.Start(context.Background(), devstack.Options{Config: cfg, Logger: zaptest.NewLogger(t),
		Backends: backends.Options{DefaultRedisURL: "redis://" + testkit.ClosedAddr(t)}})
	if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_ADMIN_ADDR") {
		t.Fatalf("Start on a busy admin port: err = %v", err)
	}
}

func TestStartFailsWithUnreachableNATS(t *testing.T) {
	url := "nats://" + testkit.ClosedAddr(t)
	cfg, _ := testConfig(t, map[string]string{"ELLIPSIS_NATS_URL": url})
	_, err := devstack.Start(context.Background(), devstack.Options{Config: cfg, Backends: backends.Options{ConnectTimeout: 500 * time.Millisecond}})
	if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_NATS_URL is set to "+url) {
		t.Fatalf("err = %v", err)
	}
}

func TestBrowserHost(t *testing.T) {
	for in, want := range map[string]string{
		":8080":          "localhost:8080",
		"0.0.0.0:8080":   "localhost:8080",
		"[::]:8080":      "localhost:8080",
		"127.0.0.1:8080": "127.0.0.1:8080",
		"[::1]:9":        "[::1]:9",
		"example:1":      "example:1",
	} {
		if got := devstack.BrowserHost(in); got != want {
			t.Errorf("BrowserHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEmbeddedRedisExpiresTypists: with the embedded Redis, a typist whose
// client goes silent is pushed out by the worker's sweeper (typing_stop
// "expired") about ttl later, in real time: the embedded server's TIME and
// TTLs follow the wall clock.
func TestEmbeddedRedisExpiresTypists(t *testing.T) {
	cfg, _ := testConfig(t, map[string]string{
		"ELLIPSIS_TYPING_TTL":       "1s",
		"ELLIPSIS_TYPING_THROTTLE":  "200ms",
		"ELLIPSIS_TYPING_REFRESH":   "500ms",
		"ELLIPSIS_TYPING_IDLE_STOP": "400ms",
	})
	st := start(t, devstack.Options{Config: cfg, Backends: backends.Options{DefaultRedisURL: "redis://" + testkit.ClosedAddr(t)}})
	if st.Backends().RedisSource != backends.Embedded {
		t.Fatalf("Redis source %s, want embedded", st.Backends().RedisSource)
	}
	room := "expiry-" + testkit.RandHex(6)
	dial := func(user string) *websocket.Conn {
		t.Helper()
		c, _, err := websocket.DefaultDialer.Dial(st.WebSocketURL()+"?user="+user, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.WriteJSON(map[string]string{"type": "join", "room": room, "id": "j"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, c, "joined", 5*time.Second)
		return c
	}
	alice, bob := dial("alice"), dial("bob")
	if err := alice.WriteJSON(map[string]string{"type": "typing_start", "room": room}); err != nil {
		t.Fatal(err)
	}
	ev := waitFor(t, bob, "typing_start", 5*time.Second)
	started := time.Now()
	if ev["user"] != "alice" || ev["ttl_ms"] != float64(1000) {
		t.Fatalf("typing_start = %v", ev)
	}
	ev = waitFor(t, bob, "typing_stop", 5*time.Second)
	took := time.Since(started)
	if ev["reason"] != "expired" || ev["user"] != "alice" {
		t.Fatalf("typing_stop = %v, want alice expired", ev)
	}
	// ttl 1 s; the expiry push is due within ttl + 1 s (docs/protocol.md, "Timing").
	if took < 800*time.Millisecond || took > 2*time.Second {
		t.Fatalf("expired after %s, want about the 1s ttl", took)
	}
}

// waitFor reads frames until one of type typ arrives.
func waitFor(t *testing.T, c *websocket.Conn, typ string, within time.Duration) map[string]any {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	defer c.SetReadDeadline(time.Time{})
	for {
		var ev map[string]any
		if err := c.ReadJSON(&ev); err != nil {
			t.Fatalf("waiting for %s: %v", typ, err)
		}
		if ev["type"] == typ {
			return ev
		}
	}
}

// TestStackJWT: ELLIPSIS_AUTH=jwt; the demo mints HS256 tokens with the
// stack's secret, and is refused without them.
func TestStackJWT(t *testing.T) {
	cfg, _ := testConfig(t, map[string]string{"ELLIPSIS_AUTH": "jwt", "ELLIPSIS_JWT_SECRET": "dev-secret-" + testkit.RandHex(6)})
	st := start(t, devstack.Options{Config: cfg, Backends: backends.Options{DefaultRedisURL: "redis://" + testkit.ClosedAddr(t)}})
	opts := demo.Options{
		URL: st.WebSocketURL(), Room: "jwt-" + testkit.RandHex(6), Speed: 10, Messages: 1, Settle: 300 * time.Millisecond,
		Users: []demo.User{{ID: "alice", Name: "Alice", Session: 1}, {ID: "bob", Name: "Bob", Session: 0}},
	}
	if _, err := demo.Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "-jwt-secret") {
		t.Fatalf("without a secret: err = %v", err)
	}
	opts.JWTSecret = cfg.JWTSecret
	res, err := demo.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range res.Users {
		if u.Sent.Messages != 1 || u.Received == 0 || u.Errors != 0 {
			t.Errorf("%s: %+v", u.ID, u)
		}
	}
}
