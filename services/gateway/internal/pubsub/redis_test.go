package pubsub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/faultproxy"
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

func waitFor(t *testing.T, what string, within time.Duration, f func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		if f() {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out after %v: %s", within, what)
	return 0
}

func prefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "pst" + hex.EncodeToString(b) + ":"
}

func newBroker(t *testing.T, client redis.UniversalClient, sharded bool, ping, timeout time.Duration) (*Redis, *recorder) {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b := NewRedis(RedisOptions{Client: client, Sharded: sharded, PingInterval: ping, PingTimeout: timeout, Metrics: met})
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

// testRedisOptions connects to ELLIPSIS_TEST_REDIS_URL (`make test` starts a
// private Redis), else the machine's on 6379.
func testRedisOptions(t *testing.T) *redis.Options {
	url := os.Getenv("ELLIPSIS_TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("ELLIPSIS_TEST_REDIS_URL: %v", err)
	}
	return opt
}

func forEachMode(t *testing.T, f func(t *testing.T, sharded bool)) {
	for _, sharded := range []bool{false, true} {
		t.Run(map[bool]string{false: "classic", true: "sharded"}[sharded], func(t *testing.T) { f(t, sharded) })
	}
}

func TestSubscribeConfirmsDeliversUnsubscribes(t *testing.T) {
	forEachMode(t, func(t *testing.T, sharded bool) {
		ctx := context.Background()
		rdb := redis.NewClient(testRedisOptions(t))
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
		waitFor(t, "message", 3*time.Second, func() bool {
			msgs, _ := rec.snapshot()
			return slices.Contains(msgs, p+"c1 hello")
		})
		if h := b.Health(); !h.OK || h.Links != 1 {
			t.Fatalf("health %+v", h)
		}
		for i := 0; i < 3; i++ {
			b.Unsubscribe(p + "c" + strconv.Itoa(i))
		}
		waitFor(t, "unsubscribed", 3*time.Second, func() bool { return len(channels(ctx, rdb, sharded, p+"*")) == 0 })
		if _, restored := rec.snapshot(); len(restored) != 0 {
			t.Fatalf("restored %v on a healthy link", restored)
		}
	})
}

func TestConcurrentSubscribeUnsubscribe(t *testing.T) {
	forEachMode(t, func(t *testing.T, sharded bool) {
		ctx := context.Background()
		rdb := redis.NewClient(testRedisOptions(t))
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
		waitFor(t, "no channel left", 3*time.Second, func() bool { return len(channels(ctx, rdb, sharded, p+"*")) == 0 })
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

// privateRedis runs redis-server on a spare loopback port for one test.
func privateRedis(t *testing.T) string {
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
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	waitFor(t, "redis-server up", 5*time.Second, func() bool { return c.Ping(context.Background()).Err() == nil })
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

// Issue 12 item 4: a silent partition (proxy frozen: connection open,
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
	waitFor(t, "link noticed dead", 5*time.Second, func() bool { return !b.Health().OK })
	noticed := time.Since(frozen)
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
	waitFor(t, "link restored", 10*time.Second, func() bool { return b.Health().OK })
	waitFor(t, "channels reported restored", 5*time.Second, func() bool {
		_, r := rec.snapshot()
		return len(r) > 0
	})
	_, restored := rec.snapshot()
	if got := fmt.Sprint(restored[0]); got != "[a b]" {
		t.Fatalf("restored %v, want [a b]", restored)
	}
	publish(ctx, direct, false, "a", "after")
	waitFor(t, "message after restore", 3*time.Second, func() bool {
		msgs, _ := rec.snapshot()
		return slices.Contains(msgs, "a after")
	})
}

// Issue 12 item 4: a healthy idle link is never redialed. 50 channels
// subscribed, 60 idle seconds (health PINGs every second): Redis counts no
// new connection. Skipped with -short.
func TestIdleLinkNeverRedialed(t *testing.T) {
	if testing.Short() {
		t.Skip("60 s")
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
	waitFor(t, "messages through the slow path", 3*time.Second, func() bool {
		msgs, _ := rec.snapshot()
		return len(msgs) == 5
	})
	if after := totalConnections(t, direct); after != before {
		t.Fatalf("the slow link was redialed: total_connections_received %d -> %d", before, after)
	}
}

// A flapping path (frozen and thawed every 300 ms, and cut now and then)
// while channels are subscribed and unsubscribed concurrently: every
// Subscribe returns within its deadline (+1 s), and once the path is
// healthy again Redis has exactly the channels with subscribers
// (PUBSUB CHANNELS / SHARDCHANNELS on the private Redis).
func TestFlappingLinkKeepsSubscriptionsConsistent(t *testing.T) {
	forEachMode(t, func(t *testing.T, sharded bool) {
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
		b, _ := newBroker(t, rdb, sharded, 300*time.Millisecond, 200*time.Millisecond)

		stop := make(chan struct{})
		flapDone := make(chan struct{})
		go func() {
			defer close(flapDone)
			for i := 0; ; i++ {
				select {
				case <-stop:
					px.Freeze(false)
					return
				case <-time.After(300 * time.Millisecond):
				}
				px.Freeze(i%2 == 0)
				if i%7 == 6 {
					px.Cut()
				}
			}
		}()
		const deadline = 500 * time.Millisecond
		var mu sync.Mutex
		refs := map[string]int{}
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				held := map[string]int{}
				for j := 0; j < 150; j++ {
					ch := "flap" + strconv.Itoa((w*3+j)%12)
					if held[ch] > 0 && j%2 == 1 {
						b.Unsubscribe(ch)
						held[ch]--
						mu.Lock()
						refs[ch]--
						mu.Unlock()
						continue
					}
					mu.Lock()
					refs[ch]++
					mu.Unlock()
					held[ch]++
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					start := time.Now()
					_ = b.Subscribe(ctx, ch) // counted whatever the outcome
					cancel()
					if took := time.Since(start); took > deadline+time.Second {
						t.Errorf("Subscribe(%s) took %v with a %v deadline", ch, took, deadline)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-flapDone
		var want []string
		mu.Lock()
		for ch, n := range refs {
			if n > 0 {
				want = append(want, ch)
			}
		}
		mu.Unlock()
		slices.Sort(want)
		ctx := context.Background()
		var got []string
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if got = channels(ctx, direct, sharded, "flap*"); slices.Equal(got, want) && b.Health().OK {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Redis has channels %v after the path healed, want those with subscribers %v", got, want)
		}
		// And they deliver: every wanted channel is confirmed.
		for _, ch := range want {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := b.Subscribe(cctx, ch)
			cancel()
			b.Unsubscribe(ch)
			if err != nil {
				t.Fatalf("Subscribe(%s) after the path healed: %v", ch, err)
			}
		}
	})
}

// Issue 12 item 3, many joins at once: a session serves one frame at a
// time, so a client that (re)joins five rooms while Redis is frozen makes
// five Subscribes one after the other. Once the first batch of
// subscriptions went unanswered for PingTimeout the link counts as
// stalled: the later Subscribes fail at once instead of each waiting for
// its own deadline until the next health PING (here far away), and the
// link is declared down and redialed.
func TestFrozenLinkFailsLaterSubscribesFast(t *testing.T) {
	addr := privateRedis(t)
	px, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	const interval, timeout, deadline = time.Minute, 500 * time.Millisecond, time.Second
	b, _ := newBroker(t, rdb, false, interval, timeout)
	ctx := context.Background()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	if err := b.Subscribe(cctx, "warm"); err != nil {
		t.Fatal(err)
	}
	cancel()
	px.Freeze(true)
	start := time.Now()
	for i := 0; i < 5; i++ {
		cctx, cancel := context.WithTimeout(ctx, deadline)
		err := b.Subscribe(cctx, "burst"+strconv.Itoa(i))
		cancel()
		if err == nil {
			t.Fatalf("Subscribe %d confirmed with Redis frozen", i)
		}
	}
	if took := time.Since(start); took > deadline+time.Second {
		t.Fatalf("five Subscribes one after the other took %v with Redis frozen; want the later ones to fail fast (all within %v)", took, deadline+time.Second)
	}
	waitFor(t, "the stalled link reported down", 3*time.Second, func() bool { return !b.Health().OK })
	px.Freeze(false)
	px.Cut()
	waitFor(t, "link back", 10*time.Second, func() bool { return b.Health().OK })
	cctx, cancel = context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := b.Subscribe(cctx, "after"); err != nil {
		t.Fatalf("Subscribe after the thaw: %v", err)
	}
}
