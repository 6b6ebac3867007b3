package pubsub

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/shared/faultproxy"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Refusals and never-up links against a real Redis (a private
// redis-server per test, whose ACL users the test sets).

// aclUser makes user "ellipsis-noch" on the Redis at addr: everything the
// gateway's links need (AUTH, HELLO, PING, (S)SUBSCRIBE, UNSUBSCRIBE), no
// dangerous command, and only the channels matching allowed.
func aclUser(t *testing.T, admin *redis.Client, allowed string) *redis.Options {
	t.Helper()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "ellipsis-noch", "reset", "on", ">pw", "~*", "+@all", "-@dangerous", "resetchannels", "&"+allowed).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", "ellipsis-noch") })
	return &redis.Options{Addr: admin.Options().Addr, Username: "ellipsis-noch", Password: "pw", MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second}
}

// Under an ACL that allows "ok:*" only: the check channel is refused on
// the first round (the link is down before any join), a Subscribe of a
// channel outside the pattern fails with ErrRefused as soon as Redis
// answers and Redis holds no such subscription, one inside is confirmed
// (ending refusing), three refusals in a row make the link down again,
// and once the ACL allows every channel the health round's probe brings
// it back up and subscriptions work.
func TestACLRefusedSubscriptions(t *testing.T) {
	forEachMode(t, func(t *testing.T, sharded bool) {
		ctx := context.Background()
		admin := redis.NewClient(&redis.Options{Addr: privateRedis(t)})
		t.Cleanup(func() { admin.Close() })
		rdb := redis.NewClient(aclUser(t, admin, "ok:*"))
		t.Cleanup(func() { rdb.Close() })
		b, rec := newCheckedBroker(t, rdb, sharded, "room:acl-check")

		testkit.WaitFor(t, 5*time.Second, "the link up and refusing", func() bool {
			return strings.Contains(b.Health().Down["shared"], "refusing room channel subscriptions: NOPERM")
		})
		if got := testutil.ToFloat64(b.met.RedisLinksDown); got != 1 {
			t.Fatalf("redis_pubsub_links_down = %v with the check channel refused, want 1", got)
		}
		subscribe := func(ch string) error {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			return b.Subscribe(cctx, ch)
		}
		err := subscribe("room:1")
		b.Unsubscribe("room:1")
		if !errors.Is(err, ErrRefused) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Subscribe outside the ACL: %v, want ErrRefused", err)
		}
		if err := subscribe("ok:1"); err != nil {
			t.Fatalf("Subscribe inside the ACL: %v", err)
		}
		if h := b.Health(); !h.OK {
			t.Fatalf("a confirmed subscription left the link down: %+v", h)
		}
		for i := 2; i < 2+refusalsUnhealthy; i++ {
			ch := "room:" + strconv.Itoa(i)
			if err := subscribe(ch); !errors.Is(err, ErrRefused) {
				t.Fatalf("Subscribe(%s): %v, want ErrRefused", ch, err)
			}
			b.Unsubscribe(ch)
		}
		if h := b.Health(); h.OK || !strings.Contains(h.Down["shared"], "NOPERM") {
			t.Fatalf("health after %d refusals in a row: %+v, want down, refusing", refusalsUnhealthy, h)
		}
		if room, probe := testutil.ToFloat64(b.met.RedisSubscribeRefused.Room), testutil.ToFloat64(b.met.RedisSubscribeRefused.Probe); room < 1+refusalsUnhealthy || probe < 1 {
			t.Fatalf("redis_subscribe_refused_total room %v probe %v, want at least %d (room:1, %d more) and 1 (the check)", room, probe, 1+refusalsUnhealthy, refusalsUnhealthy)
		}
		if got := channels(ctx, admin, sharded, "*"); !slices.Equal(got, []string{"ok:1"}) {
			t.Fatalf("Redis holds %v, want only [ok:1]", got)
		}

		if err := admin.Do(ctx, "ACL", "SETUSER", "ellipsis-noch", "allchannels").Err(); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 5*time.Second, "the probe accepted", func() bool { return b.Health().OK })
		if err := subscribe("room:9"); err != nil {
			t.Fatalf("Subscribe once the ACL allows it: %v", err)
		}
		publish(ctx, admin, sharded, "room:9", "hi")
		testkit.WaitFor(t, 3*time.Second, "a message on room:9", func() bool {
			msgs, _ := rec.snapshot()
			return slices.Contains(msgs, "room:9 hi")
		})
		testkit.WaitFor(t, 3*time.Second, "the check channel unsubscribed", func() bool {
			return !slices.Contains(channels(ctx, admin, sharded, "*"), "room:acl-check")
		})
	})
}

func newCheckedBroker(t *testing.T, client redis.UniversalClient, sharded bool, check string) (*Redis, *recorder) {
	t.Helper()
	b, rec := newBrokerWith(t, RedisOptions{Client: client, Sharded: sharded, PingInterval: 300 * time.Millisecond, PingTimeout: 500 * time.Millisecond, CheckChannel: check})
	return b, rec
}

// A link whose Redis accepts TCP and never answers (a proxy frozen from
// the start) is down at once, and up once the path thaws.
func TestLinkFrozenFromStartIsDown(t *testing.T) {
	addr := privateRedis(t)
	px, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	px.Freeze(true)
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	const timeout = 500 * time.Millisecond
	b, _ := newBrokerWith(t, RedisOptions{Client: rdb, PingInterval: time.Minute, PingTimeout: timeout})
	if h := b.Health(); h.OK || h.Down["shared"] != errNeverUp {
		t.Fatalf("health of a link that never answered: %+v, want down %q", h, errNeverUp)
	}
	if got := testutil.ToFloat64(b.met.RedisLinksDown); got != 1 {
		t.Fatalf("redis_pubsub_links_down = %v, want 1", got)
	}
	// The first PING is due within PingTimeout: the health interval (a
	// minute here) is not waited for.
	testkit.WaitFor(t, 3*time.Second, "the first PING's deadline to fail the connection", func() bool {
		return strings.Contains(b.Health().Down["shared"], "no reply to PING")
	})
	if h := b.Health(); h.OK {
		t.Fatalf("health %+v", h)
	}
	px.Freeze(false)
	testkit.WaitFor(t, 5*time.Second, "the link up once the path thawed", func() bool { return b.Health().OK })
	if got := testutil.ToFloat64(b.met.RedisLinksDown); got != 0 {
		t.Fatalf("redis_pubsub_links_down = %v once up, want 0", got)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := b.Subscribe(cctx, "after"); err != nil {
		t.Fatal(err)
	}
}

// privateCluster runs a one-master Redis Cluster (redis-server with
// cluster-enabled, every slot assigned) on a spare loopback port for one
// test and returns its address.
func privateCluster(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	addr := privateRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--dir", dir)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "cluster_state:ok", func() bool {
		info, _ := c.ClusterInfo(ctx).Result()
		return strings.Contains(info, "cluster_state:ok")
	})
	return addr
}

// Sharded Pub/Sub on Redis Cluster under an ACL without the room pattern:
// the master's link checks a channel of its own slot on its first round
// (down at once), the join that opened it is refused (SSUBSCRIBE NOPERM),
// and once the ACL allows the channels the link's probe brings it up.
func TestACLRefusedOnCluster(t *testing.T) {
	ctx := context.Background()
	addr := privateCluster(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { admin.Close() })
	o := aclUser(t, admin, "ok:*")
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, Username: o.Username, Password: o.Password, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	b, rec := newBrokerWith(t, RedisOptions{Client: rdb, Sharded: true, PingInterval: 300 * time.Millisecond, PingTimeout: 200 * time.Millisecond, CheckChannel: "room:acl-check"})
	if h := b.Health(); h.OK {
		t.Fatalf("health before the Cluster answered: %+v, want down", h)
	}
	testkit.WaitFor(t, 5*time.Second, "the Cluster probe answered", func() bool { return b.Health().OK })
	subscribe := func(ch string) error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return b.Subscribe(cctx, ch)
	}
	err := subscribe("room:{7}")
	b.Unsubscribe("room:{7}")
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("SSUBSCRIBE outside the ACL on Cluster: %v, want ErrRefused", err)
	}
	h := b.Health()
	if h.OK || h.Links != 1 || len(h.Down) != 1 {
		t.Fatalf("health after the master's check was refused: %+v, want its one link down", h)
	}
	for _, why := range h.Down {
		if !strings.Contains(why, "refusing room channel subscriptions: NOPERM") {
			t.Fatalf("health after the master's check was refused: %+v, want the link refusing", h)
		}
	}
	if room, probe := testutil.ToFloat64(b.met.RedisSubscribeRefused.Room), testutil.ToFloat64(b.met.RedisSubscribeRefused.Probe); room < 1 || probe < 1 {
		t.Fatalf("redis_subscribe_refused_total room %v probe %v, want at least 1 each (the join, the check)", room, probe)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "ellipsis-noch", "allchannels").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the probe accepted", func() bool { return b.Health().OK })
	if err := subscribe("room:{8}"); err != nil {
		t.Fatalf("SSUBSCRIBE once the ACL allows it: %v", err)
	}
	publish(ctx, admin, true, "room:{8}", "hi")
	testkit.WaitFor(t, 3*time.Second, "a message on room:{8}", func() bool {
		msgs, _ := rec.snapshot()
		return slices.Contains(msgs, "room:{8} hi")
	})
}

// A user that may not PING: every reply is an error, no PONG ever comes,
// the link never counts as up and says why; the connection is failed at
// the first PING's deadline (and redialed with backoff), not kept open.
func TestRefusedPingKeepsLinkDown(t *testing.T) {
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: privateRedis(t)})
	t.Cleanup(func() { admin.Close() })
	o := aclUser(t, admin, "*")
	if err := admin.Do(ctx, "ACL", "SETUSER", "ellipsis-noch", "-ping").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	b, _ := newBrokerWith(t, RedisOptions{Client: rdb, PingInterval: time.Minute, PingTimeout: 200 * time.Millisecond})
	testkit.WaitFor(t, 5*time.Second, "the refused PING failing the connection", func() bool {
		why := b.Health().Down["shared"]
		return strings.Contains(why, "no PONG") && strings.Contains(why, "NOPERM")
	})
	before := totalConnections(t, admin)
	testkit.WaitFor(t, 5*time.Second, "the link redialing", func() bool { return totalConnections(t, admin) > before })
	if h := b.Health(); h.OK {
		t.Fatalf("health %+v with PING refused", h)
	}
}
