package backends

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/testkit"
	"github.com/ellipsis-chat/ellipsis/tools/embedded"
)

// load builds a dev Config from the given environment.
func load(t *testing.T, env map[string]string) config.Config {
	t.Helper()
	cfg, err := config.Load(nil, nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, config.Dev())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func pingNATS(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	nc.Close()
}

func pingRedisOK(t *testing.T, url string) {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING %s: %v", url, err)
	}
}

func TestEmbeddedWhenNothingSet(t *testing.T) {
	b, err := Resolve(context.Background(), Options{
		Config:          load(t, nil),
		Logger:          zaptest.NewLogger(t),
		DefaultRedisURL: "redis://" + testkit.ClosedAddr(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.NATSSource != Embedded || b.NATSURL == config.Default().NATSURL {
		t.Fatalf("NATS = %s (%s), want an embedded one on a random port", b.NATSURL, b.NATSSource)
	}
	if b.RedisSource != Embedded || !strings.HasPrefix(b.RedisURL, "redis://127.0.0.1:") {
		t.Fatalf("Redis = %s (%s), want the embedded one", b.RedisURL, b.RedisSource)
	}
	pingNATS(t, b.NATSURL)
	pingRedisOK(t, b.RedisURL)
	b.Close()
	b.Close() // twice is fine
}

func TestDefaultRedisUsedWhenItAnswers(t *testing.T) {
	// A stand-in for the machine's Redis on 6379: an embedded server at a
	// known address, passed as the default.
	r, err := embedded.StartRedis(embedded.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := Resolve(context.Background(), Options{Config: load(t, nil), Logger: zaptest.NewLogger(t), DefaultRedisURL: r.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.RedisSource != FromDefault || b.RedisURL != r.URL() {
		t.Fatalf("Redis = %s (%s), want the default %s", b.RedisURL, b.RedisSource, r.URL())
	}
}

// TestRealRedisAsDefault probes a real redis-server as the default (the
// test Redis, ELLIPSIS_TEST_REDIS_URL, standing in for 127.0.0.1:6379:
// `make test` starts a private one).
func TestRealRedisAsDefault(t *testing.T) {
	url := testkit.RedisURL()
	if err := pingRedis(context.Background(), url, time.Second); err != nil {
		t.Fatalf("no Redis at %s (make test starts one; or set ELLIPSIS_TEST_REDIS_URL): %v", url, err)
	}
	b, err := Resolve(context.Background(), Options{Config: load(t, nil), Logger: zaptest.NewLogger(t), DefaultRedisURL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.RedisSource != FromDefault || b.RedisURL != url {
		t.Fatalf("Redis = %s (%s), want the real one at %s", b.RedisURL, b.RedisSource, url)
	}
}

func TestExplicitNATSUsedAsGiven(t *testing.T) {
	n, err := embedded.StartNATS(embedded.NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown()
	b, err := Resolve(context.Background(), Options{
		Config:          load(t, map[string]string{"ELLIPSIS_NATS_URL": n.URL()}),
		DefaultRedisURL: "redis://" + testkit.ClosedAddr(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.NATSSource != FromEnv || b.NATSURL != n.URL() {
		t.Fatalf("NATS = %s (%s), want %s as configured", b.NATSURL, b.NATSSource, n.URL())
	}
}

func TestExplicitNATSUnreachableFails(t *testing.T) {
	url := "nats://" + testkit.ClosedAddr(t)
	start := time.Now()
	_, err := Resolve(context.Background(), Options{
		Config:         load(t, map[string]string{"ELLIPSIS_NATS_URL": url}),
		ConnectTimeout: 500 * time.Millisecond,
	})
	if err == nil {
		t.Fatal("Resolve succeeded with an unreachable ELLIPSIS_NATS_URL")
	}
	if !strings.Contains(err.Error(), "ELLIPSIS_NATS_URL is set to "+url) || !strings.Contains(err.Error(), "NATS is not reachable") {
		t.Fatalf("error should name the setting and the problem: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %s, want a bounded check", d)
	}
}

func TestExplicitRedisUnreachableFails(t *testing.T) {
	url := "redis://:secret@" + testkit.ClosedAddr(t)
	_, err := Resolve(context.Background(), Options{
		Config:         load(t, map[string]string{"ELLIPSIS_REDIS_URL": url}),
		ConnectTimeout: 500 * time.Millisecond,
	})
	if err == nil {
		t.Fatal("Resolve succeeded with an unreachable ELLIPSIS_REDIS_URL")
	}
	if !strings.Contains(err.Error(), "ELLIPSIS_REDIS_URL is set to") || !strings.Contains(err.Error(), "Redis is not reachable") {
		t.Fatalf("error should name the setting and the problem: %v", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error leaks the password: %v", err)
	}
}

func TestExplicitRedisUsed(t *testing.T) {
	r, err := embedded.StartRedis(embedded.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := Resolve(context.Background(), Options{Config: load(t, map[string]string{"ELLIPSIS_REDIS_URL": r.URL()})})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.RedisSource != FromEnv || b.RedisURL != r.URL() {
		t.Fatalf("Redis = %s (%s)", b.RedisURL, b.RedisSource)
	}
}

func TestProbeRedis(t *testing.T) {
	r, err := embedded.StartRedis(embedded.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if err := probeRedis(ctx, r.URL(), time.Second); err != nil {
		t.Fatalf("probe of a live server: %v", err)
	}
	r.Close()
	if err := probeRedis(ctx, r.URL(), time.Second); err == nil {
		t.Fatal("probe of a closed server succeeded")
	}
	// A server that wants AUTH answers -NOAUTH: not usable as the default.
	auth := miniredis.RunT(t)
	auth.RequireAuth("pw")
	if err := probeRedis(ctx, "redis://"+auth.Addr(), time.Second); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("probe of an AUTH server: %v", err)
	}
	// Something that is not Redis and never answers: bounded by the timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	if err := probeRedis(ctx, "redis://"+ln.Addr().String(), 200*time.Millisecond); err == nil {
		t.Fatal("probe of a silent listener succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("probe took %s", d)
	}
	if err := probeRedis(ctx, "rediss://x:1", time.Second); err == nil {
		t.Fatal("rediss:// probed as plain")
	}
}

func TestRedact(t *testing.T) {
	// The NATS list hides the whole user info: a token is the user name.
	if got := natsconn.RedactURLs("nats://u:p@a:1, nats://tok3n@b:2,nats://c:3"); got != "nats://xxxxx@a:1,nats://xxxxx@b:2,nats://c:3" {
		t.Fatalf("RedactURLs = %q", got)
	}
}
