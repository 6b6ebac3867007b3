package pubsub

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/faultproxy"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// recorder is a Handler that records what it is given.
type recorder struct {
	mu       sync.Mutex
	msgs     []string // "channel payload"
	restored [][]string
}

func (r *recorder) HandleMessage(channel, payload string) {
	r.mu.Lock()
	r.msgs = append(r.msgs, channel+" "+payload)
	r.mu.Unlock()
}

func (r *recorder) HandleRestored(chs []string) {
	r.mu.Lock()
	r.restored = append(r.restored, chs)
	r.mu.Unlock()
}

func (r *recorder) snapshot() (msgs []string, restored [][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs), slices.Clone(r.restored)
}

func prefix() string { return "pst" + testkit.RandHex(6) + ":" }

func newBroker(t *testing.T, client redis.UniversalClient, sharded bool, ping, timeout time.Duration) (*Redis, *recorder) {
	t.Helper()
	return newBrokerWith(t, RedisOptions{Client: client, Sharded: sharded, PingInterval: ping, PingTimeout: timeout})
}

// newBrokerWith starts a broker on opts with metrics of its own, closed
// at cleanup.
func newBrokerWith(t *testing.T, opts RedisOptions) (*Redis, *recorder) {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	opts.Metrics = met
	b := NewRedis(opts)
	rec := &recorder{}
	b.Start(rec)
	t.Cleanup(b.Close)
	return b, rec
}

func publish(ctx context.Context, c *redis.Client, sharded bool, ch, msg string) {
	if sharded {
		c.SPublish(ctx, ch, msg)
	} else {
		c.Publish(ctx, ch, msg)
	}
}

func channels(ctx context.Context, c *redis.Client, sharded bool, pattern string) []string {
	var chs []string
	if sharded {
		chs, _ = c.PubSubShardChannels(ctx, pattern).Result()
	} else {
		chs, _ = c.PubSubChannels(ctx, pattern).Result()
	}
	slices.Sort(chs)
	return chs
}

func forEachMode(t *testing.T, f func(t *testing.T, sharded bool)) {
	for _, sharded := range []bool{false, true} {
		t.Run(map[bool]string{false: "classic", true: "sharded"}[sharded], func(t *testing.T) { f(t, sharded) })
	}
}

func TestSubscribeConfirmsDeliversUnsubscribes(t *testing.T) {
	forEachMode(t, func(t *testing.T, sharded bool) {
		ctx := context.Background()
		rdb := redis.NewClient(testkit.RedisOptions(t))
		t.Cleanup(func() { rdb.Close() })
		b, rec := newBroker(t, rdb, sharded, 0, 0)
		p := prefix()
		for i := 0; i < 3; i++ {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if err := b.Subscribe(cctx, p+"c"+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
			cancel()
		}
		// Confirmed: a publish now is received.
		publish(ctx, rdb, sharded, p+"c1", "hello")
		testkit.WaitFor(t, 3*time.Second, "message", func() bool {
			msgs, _ := rec.snapshot()
			return slices.Contains(msgs, p+"c1 hello")
		})
		if h := b.Health(); !h.OK || h.Links != 1 {
			t.Fatalf("health %+v", h)
		}
		for i := 0; i < 3; i++ {
			b.Unsubscribe(p + "c" + strconv.Itoa(i))
		}
		testkit.WaitFor(t, 3*time.Second, "unsubscribed", func() bool { return len(channels(ctx, rdb, sharded, p+"*")) == 0 })
		if _, restored := rec.snapshot(); len(restored) != 0 {
			t.Fatalf("restored %v on a healthy link", restored)
		}
	})
}

func TestConcurrentSubscribeUnsubscribe(t *testing.T) {
	forEachMode(t, func(t *testing.T, sharded bool) {
		ctx := context.Background()
		rdb := redis.NewClient(testkit.RedisOptions(t))
		t.Cleanup(func() { rdb.Close() })
		b, _ := newBroker(t, rdb, sharded, 0, 0)
		p := prefix()
		var wg sync.WaitGroup
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 5; j++ {
					ch := p + "r" + strconv.Itoa((i+j)%3)
					cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					if err := b.Subscribe(cctx, ch); err != nil {
						t.Error(err)
					}
					cancel()
					b.Unsubscribe(ch)
				}
			}()
		}
		wg.Wait()
		testkit.WaitFor(t, 3*time.Second, "no channel left", func() bool { return len(channels(ctx, rdb, sharded, p+"*")) == 0 })
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := b.Subscribe(cctx, p+"last"); err != nil {
			t.Fatal(err)
		}
		if chs := channels(ctx, rdb, sharded, p+"*"); len(chs) != 1 || chs[0] != p+"last" {
			t.Fatalf("channels %v", chs)
		}
	})
}

// privateRedis runs redis-server on a spare loopback port for one test,
// with extra arguments appended to its command line, and returns its
// address once it answers PING.
func privateRedis(t *testing.T, extra ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not installed (apt-get install redis-server): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning"}, extra...)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	testkit.WaitFor(t, 5*time.Second, "redis-server up", func() bool { return c.Ping(context.Background()).Err() == nil })
	return addr
}

// totalConnections is INFO stats total_connections_received.
func totalConnections(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatal("no total_connections_received in INFO stats")
	return 0
}

// A silent partition (proxy frozen: connection open,
// nothing forwarded) is noticed within PingInterval + PingTimeout, Health
// turns down, and when the path heals the link redials and reports its
// channels restored; joins meanwhile fail fast.
func TestSilentLinkDeathNoticedAndRestored(t *testing.T) {
	addr := privateRedis(t)
	px, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	direct := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { direct.Close() })
	const interval, timeout = 500 * time.Millisecond, 300 * time.Millisecond
	b, rec := newBroker(t, rdb, false, interval, timeout)
	ctx := context.Background()
	for _, ch := range []string{"a", "b"} {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if err := b.Subscribe(cctx, ch); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	px.Freeze(true)
	frozen := time.Now()
	testkit.WaitFor(t, 5*time.Second, "link noticed dead", func() bool { return !b.Health().OK })
	noticed := time.Since(frozen)
	if got := testutil.ToFloat64(b.met.RedisLinksDown); got != 1 {
		t.Errorf("redis_pubsub_links_down = %v while the link is down, want 1", got)
	}
	t.Logf("silent link death noticed after %v (interval %v + timeout %v)", noticed, interval, timeout)
	if noticed > interval+timeout+time.Second {
		t.Fatalf("noticed after %v, want within interval+timeout (+1 s slack)", noticed)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	start := time.Now()
	err = b.Subscribe(cctx, "c")
	cancel()
	b.Unsubscribe("c")
	if err == nil || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("subscribe on a down link: %v after %v, want a fast ErrUnavailable", err, time.Since(start))
	}
	px.Freeze(false)
	px.Cut() // the frozen connections are abandoned by the broker anyway
	testkit.WaitFor(t, 10*time.Second, "link restored", func() bool { return b.Health().OK })
	if got := testutil.ToFloat64(b.met.RedisLinksDown); got != 0 {
		t.Errorf("redis_pubsub_links_down = %v once the link is restored, want 0", got)
	}
	testkit.WaitFor(t, 5*time.Second, "channels reported restored", func() bool {
		_, r := rec.snapshot()
		return len(r) > 0
	})
	_, restored := rec.snapshot()
	if got := fmt.Sprint(restored[0]); got != "[a b]" {
		t.Fatalf("restored %v, want [a b]", restored)
	}
	publish(ctx, direct, false, "a", "after")
	testkit.WaitFor(t, 3*time.Second, "message after restore", func() bool {
		msgs, _ := rec.snapshot()
		return slices.Contains(msgs, "a after")
	})
}

// A healthy idle link is never redialed. 50 channels
// subscribed, 60 idle seconds (health PINGs every second): Redis counts no
// new connection. Skipped with -short.
func TestIdleLinkNeverRedialed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: watches an idle link for 60 s; make test runs it (no -short)")
	}
	t.Parallel()
	addr := privateRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	b, _ := newBroker(t, rdb, false, time.Second, 500*time.Millisecond)
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if err := b.Subscribe(cctx, "room"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	admin := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	t.Cleanup(func() { admin.Close() })
	before := totalConnections(t, admin)
	time.Sleep(60 * time.Second)
	after := totalConnections(t, admin)
	if after != before {
		t.Fatalf("total_connections_received went from %d to %d over 60 idle seconds: the link was redialed", before, after)
	}
	if h := b.Health(); !h.OK {
		t.Fatalf("health %+v", h)
	}
}

// A slow but live path (every chunk delayed 100 ms, well within the PING
// timeout) is not mistaken for a dead one: subscriptions confirm, messages
// flow, and the link is never redialed.
func TestSlowLinkStaysUp(t *testing.T) {
	addr := privateRedis(t)
	px, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	px.Slow(100 * time.Millisecond)
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	direct := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { direct.Close() })
	b, rec := newBroker(t, rdb, false, time.Second, 800*time.Millisecond)
	ctx := context.Background()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := b.Subscribe(cctx, "slow"); err != nil {
		t.Fatal(err)
	}
	before := totalConnections(t, direct)
	for i := 0; i < 5; i++ { // 3 s: three health PINGs through the slow path
		publish(ctx, direct, false, "slow", strconv.Itoa(i))
		time.Sleep(600 * time.Millisecond)
		if h := b.Health(); !h.OK {
			t.Fatalf("slow link reported down: %+v", h)
		}
	}
	testkit.WaitFor(t, 3*time.Second, "messages through the slow path", func() bool {
		msgs, _ := rec.snapshot()
		return len(msgs) == 5
	})
	if after := totalConnections(t, direct); after != before {
		t.Fatalf("the slow link was redialed: total_connections_received %d -> %d", before, after)
	}
}
