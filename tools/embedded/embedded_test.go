package embedded

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"
)

func TestNATS(t *testing.T) {
	n, err := StartNATS(NATSOptions{Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown()
	if n.URL() == "" || n.URL() == "nats://127.0.0.1:4222" {
		t.Fatalf("URL = %q, want a random port", n.URL())
	}
	nc, err := nats.Connect(n.URL(), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("ellipsis.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("ellipsis.test", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(2 * time.Second)
	if err != nil || string(msg.Data) != "hi" {
		t.Fatalf("NextMsg = %v, %v", msg, err)
	}
	n.Shutdown()
	n.Shutdown() // twice is fine
}

func TestNATSPortInUse(t *testing.T) {
	a, err := StartNATS(NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	port, _ := strconv.Atoi(a.URL()[len("nats://127.0.0.1:"):])
	if _, err := StartNATS(NATSOptions{Port: port, ReadyTimeout: 500 * time.Millisecond}); err == nil {
		t.Fatal("second server on the same port started")
	}
}

func newRedis(t *testing.T) (*Redis, *redis.Client) {
	t.Helper()
	r, err := StartRedis(RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	opt, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return r, c
}

// TestRedisRealTimeTTL: a PX key really expires with the wall clock, with
// no FastForward from the test.
func TestRedisRealTimeTTL(t *testing.T) {
	_, c := newRedis(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 150*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "long", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET before expiry = %q, %v", v, err)
	}
	time.Sleep(60 * time.Millisecond)
	pttl, err := c.PTTL(ctx, "k").Result()
	if err != nil || pttl <= 0 || pttl > 100*time.Millisecond {
		t.Fatalf("PTTL after 60ms = %s, %v; want it to have run down below 100ms", pttl, err)
	}
	time.Sleep(150 * time.Millisecond)
	if _, err := c.Get(ctx, "k").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after expiry: err = %v, want redis.Nil", err)
	}
	if n, err := c.Exists(ctx, "k", "long").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS = %d, %v; want only the long key", n, err)
	}
}

// TestRedisTimeFollowsWallClock: TIME and redis.call('TIME') in Lua return
// the wall clock and advance with it.
func TestRedisTimeFollowsWallClock(t *testing.T) {
	_, c := newRedis(t)
	ctx := context.Background()
	near := func(what string, got time.Time) {
		t.Helper()
		if d := time.Since(got); d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("%s = %s, %s away from the wall clock", what, got, d)
		}
	}
	t1, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	near("TIME", t1)

	const script = `local t = redis.call('TIME'); return t[1] * 1000 + math.floor(t[2] / 1000)`
	luaMs := func() time.Time {
		t.Helper()
		ms, err := c.Eval(ctx, script, nil).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return time.UnixMilli(ms)
	}
	l1 := luaMs()
	near("Lua TIME", l1)
	time.Sleep(120 * time.Millisecond)
	t2, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	l2 := luaMs()
	if d := t2.Sub(t1); d < 100*time.Millisecond || d > 1500*time.Millisecond {
		t.Fatalf("TIME advanced %s over a 120ms sleep", d)
	}
	if d := l2.Sub(l1); d < 100*time.Millisecond || d > 1500*time.Millisecond {
		t.Fatalf("Lua TIME advanced %s over a 120ms sleep", d)
	}
	near("Lua TIME after sleep", l2)
}

// TestRedisScoreExpiry is what the presence worker does: scores are expiry
// times from Lua TIME and a key TTL, both following the wall clock. Each
// check is made against the server's own TIME (both scripts return it), so
// a test goroutine that the machine delays cannot move a check to the other
// side of an expiry.
func TestRedisScoreExpiry(t *testing.T) {
	_, c := newRedis(t)
	ctx := context.Background()
	// life is the member's lifetime (its score is now + life) and, plus
	// 1 s, the key's PEXPIRE. 1 s, not less: the first check needs two
	// evals within it; on a loaded 2-vCPU machine under -race two evals
	// have taken more than 100 ms.
	const life = 1000
	const add = `
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) + 1000)
return now`
	added, err := c.Eval(ctx, add, []string{"typing:users:{x}"}, life, "alice:c1").Int64()
	if err != nil {
		t.Fatal(err)
	}
	now, got := liveMembers(t, ctx, c)
	if now >= added+life {
		t.Fatalf("the second eval ran %d ms after the first: cannot check the live member", now-added)
	}
	if len(got) != 1 || got[0] != "alice:c1" {
		t.Fatalf("live %d ms after the add = %v, want alice:c1", now-added, got)
	}
	untilMemberExpired(t, ctx, c, added, life)
	untilKeyExpired(t, ctx, c, added, life)
}

// liveMembers returns the server's TIME (ms) and the members of
// typing:users:{x} whose score is after it.
func liveMembers(t *testing.T, ctx context.Context, c *redis.Client) (int64, []any) {
	t.Helper()
	const live = `
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
return {now, redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')}`
	v, err := c.Eval(ctx, live, []string{"typing:users:{x}"}).Slice()
	if err != nil || len(v) != 2 {
		t.Fatalf("live = %v, %v", v, err)
	}
	now, _ := v[0].(int64)
	members, _ := v[1].([]any)
	return now, members
}

// untilMemberExpired polls, by the server's TIME, the member added at added
// (ms) with score added+life: live until its score, not from then on.
func untilMemberExpired(t *testing.T, ctx context.Context, c *redis.Client, added, life int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		now, got := liveMembers(t, ctx, c)
		if now >= added+life {
			if len(got) != 0 {
				t.Fatalf("live %d ms after the add (score %d ms after) = %v; want none", now-added, life, got)
			}
			break
		}
		if len(got) != 1 {
			t.Fatalf("live %d ms after the add, before its score = %v; want alice:c1", now-added, got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("server TIME stuck %d ms after the add", now-added)
		}
	}
}

// untilKeyExpired polls, by the server's TIME, the room key added at added
// (ms): it lives until its PEXPIRE (life + 1 s after the add) and not after.
// The PEXPIRE ran a little after the TIME the add returned, and TIME and
// EXISTS are two calls: margin is the slack either way.
func untilKeyExpired(t *testing.T, ctx context.Context, c *redis.Client, added, life int64) {
	t.Helper()
	const margin = 50
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		tm, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		n, err := c.Exists(ctx, "typing:users:{x}").Result()
		if err != nil {
			t.Fatal(err)
		}
		at := tm.UnixMilli() - added
		if at < life+1000-margin && n != 1 {
			t.Fatalf("room key %d ms after the add, before its PEXPIRE (%d ms): exists = %d", at, life+1000, n)
		}
		if at >= life+1000+margin {
			if n != 0 {
				t.Fatalf("room key %d ms after the add, past its PEXPIRE (%d ms): exists = %d", at, life+1000, n)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server TIME stuck %d ms after the add", tm.UnixMilli()-added)
		}
	}
}

func TestRedisPubSubAndClose(t *testing.T) {
	r, c := newRedis(t)
	ctx := context.Background()
	sub := c.Subscribe(ctx, "chat:room:{x}")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // subscription confirmation
		t.Fatal(err)
	}
	if err := c.Publish(ctx, "chat:room:{x}", "ev").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub.Channel():
		if m.Payload != "ev" {
			t.Fatalf("payload %q", m.Payload)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no message")
	}
	r.Close()
	r.Close() // twice is fine
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Close succeeded")
	}
}
