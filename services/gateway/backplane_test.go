package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/faultproxy"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// The Redis Pub/Sub backplane's refusals and never-up link, end to end:
// what a client and /readyz see.

// metricValue reads one unlabelled ellipsis_gateway_* sample from /metrics
// (-1 when absent).
func metricValue(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return -1
}

func readyz(t *testing.T, admin string) (int, map[string]any) {
	return httpGet(t, "http://"+admin+"/readyz", nil)
}

// A gateway whose Redis user lacks the room channels' pattern (ACL
// resetchannels): /readyz is 503 naming the refusal before any join, a
// join answers error unavailable (never joined) and counts in
// ellipsis_gateway_redis_subscribe_refused_total; once the ACL has the
// room channels' pattern the gateway turns ready by itself and the join
// succeeds.
func TestJoinRefusedByRedisACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := redis.NewClient(testkit.RedisOptions(t))
	t.Cleanup(func() { admin.Close() })
	user := "ellipsis-noch-" + testkit.RandHex(4)
	// The user docs/deploy.md gives the gateways, without its channel
	// pattern.
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "resetkeys", "resetchannels", "-@all", "+@connection", "+@pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	u, err := url.Parse(testkit.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, "pw")
	e := newEnv(t, func(c *config.Config) {
		c.RedisURL = u.String()
		c.PubSubPingInterval = 300 * time.Millisecond
		c.PubSubPingTimeout = 200 * time.Millisecond
	})
	e.startWorker("")
	adminAddr := e.srv.AdminAddr()
	testkit.WaitFor(t, 5*time.Second, "readyz 503 naming the refusal", func() bool {
		st, body := readyz(t, adminAddr)
		checks, _ := body["checks"].(map[string]any)
		why, _ := checks["redis"].(string)
		return st == 503 && strings.Contains(why, "refusing room channel subscriptions: NOPERM")
	})

	c := e.dial("alice", "")
	c.send(`{"type":"join","room":"42","id":"j"}`)
	f := c.expectError(protocol.CodeUnavailable)
	if f.str("id") != "j" || f.str("room") != "42" || !strings.Contains(f.str("message"), "refused") {
		t.Fatalf("error %v, want unavailable for join j of room 42 saying refused", f)
	}
	c.send(`{"type":"typing_start","room":"42","id":"t"}`)
	c.expectError(protocol.CodeNotJoined)
	room := metricValue(t, adminAddr, `ellipsis_gateway_redis_subscribe_refused_total{kind="room"}`)
	probe := metricValue(t, adminAddr, `ellipsis_gateway_redis_subscribe_refused_total{kind="probe"}`)
	if room < 1 || probe < 1 {
		t.Fatalf("redis_subscribe_refused_total room %v probe %v, want at least 1 each (the join, the check channel)", room, probe)
	}

	if err := admin.Do(ctx, "ACL", "SETUSER", user, "&"+e.cfg.KeyPrefix+"chat:room:*").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "readyz 200 once the ACL allows room channels", func() bool {
		st, _ := readyz(t, adminAddr)
		return st == 200
	})
	c.join("42")
	payload := e.publish(protocol.RoomEvent{V: 1, Type: protocol.TypeTypingStart, Room: "42", User: "bob", TTLMs: 5000})
	if got := c.readRaw(); string(got) != payload {
		t.Fatalf("after the retried join got %s, want the room event %s", got, payload)
	}
}

// A gateway started against a Redis that accepts TCP and never answers (a
// proxy frozen from the start) is not ready from its first /readyz, and
// turns ready once the path thaws.
func TestReadyzRedisFrozenFromStart(t *testing.T) {
	t.Parallel()
	opt := testkit.RedisOptions(t)
	px, err := faultproxy.New(opt.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	px.Freeze(true)
	u, err := url.Parse(testkit.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Host = px.Addr()
	// go-redis's own dial, read and write timeouts at 30 s: a start-up PING
	// bounded by them rather than by its 1 s context would hold the start
	// for 30 s, far beyond the 10 s bound below, which leaves a loaded CI
	// machine (-race, shared CPUs) 9 s over the ~1 s start.
	q := u.Query()
	for _, k := range []string{"dial_timeout", "read_timeout", "write_timeout"} {
		q.Set(k, "30s")
	}
	u.RawQuery = q.Encode()
	start := time.Now()
	e := newEnv(t, func(c *config.Config) {
		c.RedisURL = u.String()
		c.PubSubPingTimeout = time.Second
	})
	t.Logf("gateway started in %v", time.Since(start))
	adminAddr := e.srv.AdminAddr()
	st, body := readyz(t, adminAddr)
	down, _ := body["down"].([]any)
	if st != 503 || !slices.Contains(down, any("redis")) {
		t.Fatalf("first readyz with Redis frozen: %d %v, want 503 naming redis", st, body)
	}
	// Start's PING is bounded by 1 s (dial and handshake included); the
	// link is down from the start, not after its first health interval.
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("first readyz answered %v after the gateway was started, want about 1 s", took)
	}
	px.Freeze(false)
	thawed := time.Now()
	testkit.WaitFor(t, 5*time.Second, "readyz 200 once the path thawed", func() bool {
		st, _ := readyz(t, adminAddr)
		return st == 200
	})
	t.Logf("readyz 200 %v after the thaw", time.Since(thawed))
	e.startWorker("")
	c := e.dial("alice", "")
	c.join("42")
}
