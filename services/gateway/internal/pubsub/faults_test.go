package pubsub

import (
	"context"
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
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Network faults against a private Redis behind shared/faultproxy: a
// flapping path, a frozen one under a burst of Subscribes, and Close
// while Redis hangs.

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
		flapDone := flapPath(px, stop)
		refs := &channelRefs{n: map[string]int{}}
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				refs.churn(t, b, w)
			}()
		}
		wg.Wait()
		close(stop)
		<-flapDone
		want := refs.held()
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

// flapPath freezes and thaws px every 300 ms, and cuts it every seventh
// time, until stop is closed; then it thaws px and closes the returned
// channel.
func flapPath(px *faultproxy.Proxy, stop <-chan struct{}) <-chan struct{} {
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
	return flapDone
}

// channelRefs counts the subscribers of each channel across the goroutines
// of TestFlappingLinkKeepsSubscriptionsConsistent.
type channelRefs struct {
	mu sync.Mutex
	n  map[string]int
}

// churn is worker w's 150 Subscribes and Unsubscribes of channels flap0 to
// flap11 on b, each Subscribe with a 500 ms deadline it must keep (+1 s).
func (r *channelRefs) churn(t *testing.T, b *Redis, w int) {
	t.Helper()
	const deadline = 500 * time.Millisecond
	held := map[string]int{}
	for j := 0; j < 150; j++ {
		ch := "flap" + strconv.Itoa((w*3+j)%12)
		if held[ch] > 0 && j%2 == 1 {
			b.Unsubscribe(ch)
			held[ch]--
			r.mu.Lock()
			r.n[ch]--
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		r.n[ch]++
		r.mu.Unlock()
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
}

// held is the channels with subscribers, sorted.
func (r *channelRefs) held() []string {
	var want []string
	r.mu.Lock()
	for ch, n := range r.n {
		if n > 0 {
			want = append(want, ch)
		}
	}
	r.mu.Unlock()
	slices.Sort(want)
	return want
}

// Many joins at once: a session serves one frame at a
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
	// Each Subscribe that waited its whole deadline costs 1 s: five of
	// them (the fault this guards) take 5 s; the first waits for the
	// stall (PingTimeout) and, on a loaded machine under -race, one more
	// may still catch the link before it is marked down. 3 s tells the two
	// apart.
	if bound := deadline + 2*time.Second; time.Since(start) > bound {
		t.Fatalf("five Subscribes one after the other took %v with Redis frozen; want the later ones to fail fast (all within %v)", time.Since(start), bound)
	}
	testkit.WaitFor(t, 3*time.Second, "the stalled link reported down", func() bool { return !b.Health().OK })
	px.Freeze(false)
	px.Cut()
	testkit.WaitFor(t, 10*time.Second, "link back", func() bool { return b.Health().OK })
	cctx, cancel = context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := b.Subscribe(cctx, "after"); err != nil {
		t.Fatalf("Subscribe after the thaw: %v", err)
	}
}

// Closing the broker (gateway shutdown) with Redis frozen, or with the
// link redialing into a blackhole, ends within the client's dial and
// write timeouts (+1 s): shutdown never hangs on Redis.
func TestCloseBoundedWhenRedisHangs(t *testing.T) {
	for _, mode := range []string{"frozen", "blackholed"} {
		t.Run(mode, func(t *testing.T) {
			addr := privateRedis(t)
			px, err := faultproxy.New(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			const dial, rw = time.Second, time.Second
			rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1, DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw})
			t.Cleanup(func() { rdb.Close() })
			met, err := metrics.New(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			b := NewRedis(RedisOptions{Client: rdb, PingInterval: 300 * time.Millisecond, PingTimeout: 200 * time.Millisecond, Metrics: met})
			b.Start(&recorder{})
			cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := b.Subscribe(cctx, "c"); err != nil {
				t.Fatal(err)
			}
			if mode == "frozen" {
				px.Freeze(true)
			} else {
				px.Blackhole(true)
				px.Cut()
			}
			time.Sleep(700 * time.Millisecond) // a health PING missed, a redial under way
			// Joins in flight while it closes end too.
			errs := make(chan error, 3)
			for i := 0; i < 3; i++ {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					errs <- b.Subscribe(ctx, "new"+strconv.Itoa(i))
				}()
			}
			start := time.Now()
			b.Close()
			if took := time.Since(start); took > dial+rw+time.Second {
				t.Fatalf("Close took %v with Redis %s (dial and write timeouts %v, %v)", took, mode, dial, rw)
			}
			for i := 0; i < 3; i++ {
				select {
				case err := <-errs:
					if err == nil {
						t.Fatal("a Subscribe succeeded with Redis hung")
					}
				case <-time.After(3 * time.Second):
					t.Fatal("a Subscribe in flight did not end with Close")
				}
			}
		})
	}
}

// A reconnect's first round resubscribes every channel of the link, and
// its PONG comes after all their replies. Here 600 channels of 2 KB
// (sharded: one SSUBSCRIBE per slot) through a path that then delays every
// 32 KB chunk by 80 ms take about 3 s to answer, three times the 1 s PING
// timeout, with a reply every ~80 ms (far under the timeout, so a loaded
// machine's scheduling stalls do not look like a dead link): the deadline re-arms
// while replies keep coming, and the link comes up on that one connection
// (Redis counts a single new connection), instead of redialing at each
// deadline and resending everything for ever.
func TestSlowResubscribeRoundComesUp(t *testing.T) {
	addr := privateRedis(t)
	px, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	direct := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	t.Cleanup(func() { direct.Close() })
	b, _ := newBroker(t, rdb, true, time.Minute, time.Second)
	pad, p := strings.Repeat("x", 2000), prefix()
	errs := make(chan error, 600)
	for i := 0; i < cap(errs); i++ {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs <- b.Subscribe(ctx, p+strconv.Itoa(i)+":"+pad)
		}()
	}
	for i := 0; i < cap(errs); i++ {
		if err := <-errs; err != nil {
			t.Fatalf("Subscribe on the fast path: %v", err)
		}
	}
	before := totalConnections(t, direct)
	px.Slow(80 * time.Millisecond)
	b.mu.Lock()
	l := b.links[""]
	b.mu.Unlock()
	l.redial("test: a fresh connection") // go-redis redials on its own after a Cut
	testkit.WaitFor(t, 3*time.Second, "the redialed link reported down", func() bool { return !b.Health().OK })
	testkit.WaitFor(t, 20*time.Second, "the link up again after its slow resubscribing round", func() bool { return b.Health().OK })
	if after := totalConnections(t, direct); after != before+1 {
		t.Fatalf("total_connections_received %d -> %d: want one reconnect, the slow first round was redialed", before, after)
	}
	if n := len(channels(context.Background(), direct, true, p+"*")); n != cap(errs) {
		t.Fatalf("%d channels subscribed after the reconnect, want %d", n, cap(errs))
	}
}
