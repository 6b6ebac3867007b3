package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Ellipsis on Redis Sentinel: a master, one replica and three Sentinels
// (quorum 2), all private processes on spare loopback ports, with two
// gateway and two worker processes given a redis+sentinel:// URL. The typing
// scenarios run; then the master is SIGKILLed, the Sentinels promote the
// replica, and the scenarios run again: on new rooms, and with the clients
// that stayed connected through the failover (they get a resync; their
// typing_start gets through again once the services follow the new master).
//
// TestSentinelManualFailover does the same with SENTINEL FAILOVER: the old
// master stays up, and is only demoted (its clients killed) when a
// Sentinel next looks at it, up to 10 s later. go-redis moves its command
// connections at once but not Pub/Sub ones: the gateway's hub follows the
// master Sentinel names (redisconn.Options.WatchMaster) instead of waiting
// for the old master to drop it.
func TestSentinelTypingAndFailover(t *testing.T) { t.Parallel(); testSentinelFailover(t, false) }

func TestSentinelManualFailover(t *testing.T) { t.Parallel(); testSentinelFailover(t, true) }

func testSentinelFailover(t *testing.T, manual bool) {
	const master = "ellipsis"
	se := startSentinelEnv(t, master)

	// The stack is built by hand rather than by newProcStack, whose cleanup
	// scans the machine's shared Redis for the stack's key prefix: this test
	// never connects to it. NATS is the machine's, under the stack's unique
	// subject prefix, as newProcStack does.
	tok := testkit.RandHex(5)
	cfg := testConfig(t, "it-"+tok+":", "it"+tok)
	cfg.RedisURL = se.url()
	gwBin, wkBin := buildBinaries(t)
	ps := &procStack{t: t, s: &stack{t: t, cfg: cfg}, gwBin: gwBin, wkBin: wkBin}
	ps.startWorker(nil)
	ps.startWorker(nil)
	g0, g1 := ps.startGateway(nil), ps.startGateway(nil)
	all := []*proc{ps.workers[0], ps.workers[1], g0, g1}

	sentinelScenarios(t, "before", g0, g1)
	if t.Failed() {
		return
	}

	room, alice, bob, carol := joinThroughFailover(t, g0, g1)
	marks := map[*view]int{bob: bob.mark(), carol: carol.mark()}

	old, promoted := se.redis[0], se.redis[1]
	how := "the SIGKILL of " + old.Addr()
	began := time.Now()
	if manual {
		how = "SENTINEL FAILOVER"
		se.failover()
	} else {
		old.Kill()
	}
	se.waitMaster(promoted.Addr(), 20*time.Second)
	switched := time.Now()
	t.Logf("sentinels report %s as the master %v after %s", promoted.Addr(), switched.Sub(began).Round(time.Millisecond), how)

	firstStart := startThroughFailover(t, alice, bob, carol, room, marks, switched, promoted.Addr())
	last := checkResyncAfterFailover(t, bob, carol, room, marks, firstStart, began, switched)
	recordRecovery(t, "Sentinel failover ("+how+"): typing_start through again", last.Sub(began))
	if errs := alice.frames(0, func(f frame) bool { return f.Type == "error" && f.Code != "unavailable" }); len(errs) > 0 {
		t.Fatalf("alice got errors other than unavailable: %v", errs)
	}
	// The typist stops; both receivers are right.
	_ = alice.c.trySend(map[string]any{"type": "typing_stop", "room": room})
	bob.waitShown(room, "", 3*time.Second)
	carol.waitShown(room, "", 3*time.Second)

	for _, p := range all {
		at := waitReadyz(t, p.adminAddr, 200, 10*time.Second)
		t.Logf("%s /readyz 200 %v after the failover began", p.name, at.Sub(began).Round(time.Millisecond))
	}
	sentinelScenarios(t, "after", g0, g1)
}

// sentinelScenarios runs the typing scenarios of round (the subtests
// round+"/…"), alice on g0 and bob on g1, each in a new room.
func sentinelScenarios(t *testing.T, round string, g0, g1 *proc) {
	t.Helper()
	t.Run(round+"/start-stop-across-gateways", func(t *testing.T) {
		room := "sentinel:" + round + ":" + testkit.RandHex(5)
		alice := dial(t, g0.wsURL("alice", "Alice"), "alice")
		bob := dial(t, g1.wsURL("bob", "Bob"), "bob")
		joinRetry(alice, room, 5*time.Second)
		joinRetry(bob, room, 5*time.Second)
		alice.start(room)
		if f := bob.next(isStart(room, "alice"), 3*time.Second, "typing_start"); f.Name != "Alice" {
			t.Fatalf("typing_start %v, want name Alice", f)
		}
		alice.stop(room)
		bob.next(isStop(room, "alice", "stopped"), 3*time.Second, "typing_stop")
	})
	t.Run(round+"/silent-typist-expires", func(t *testing.T) {
		room := "sentinel:" + round + ":" + testkit.RandHex(5)
		alice := dial(t, g0.wsURL("alice", "Alice"), "alice")
		bob := dial(t, g1.wsURL("bob", "Bob"), "bob")
		joinRetry(alice, room, 5*time.Second)
		joinRetry(bob, room, 5*time.Second)
		started := time.Now()
		alice.start(room)
		bob.next(isStart(room, "alice"), 3*time.Second, "typing_start")
		f := bob.next(isStop(room, "alice", ""), expiryBound+time.Second, "typing_stop (expired)")
		if f.Reason != "expired" {
			t.Fatalf("stop reason %q, want expired", f.Reason)
		}
		t.Logf("typing_stop(expired) %v after the start (bound %v)", f.at.Sub(started).Round(time.Millisecond), expiryBound)
	})
}

// joinThroughFailover joins the clients that stay connected through the
// failover: alice on gateway 0, bob on gateway 1 and carol on gateway 0, in
// one room, so both gateways' Pub/Sub connections must follow the new
// master. alice starts and stops, and bob and carol show both.
func joinThroughFailover(t *testing.T, g0, g1 *proc) (string, *view, *view, *view) {
	t.Helper()
	room := "sentinel:through:" + testkit.RandHex(5)
	alice := watch(dial(t, g0.wsURL("alice", "Alice"), "alice"))
	bob := watch(dial(t, g1.wsURL("bob", "Bob"), "bob"))
	carol := watch(dial(t, g0.wsURL("carol", "Carol"), "carol"))
	for _, v := range []*view{alice, bob, carol} {
		v.join(room)
	}
	alice.c.start(room)
	bob.waitShown(room, "alice", 3*time.Second)
	carol.waitShown(room, "alice", 3*time.Second)
	alice.c.stop(room)
	bob.waitShown(room, "", 3*time.Second)
	carol.waitShown(room, "", 3*time.Second)
	return room, alice, bob, carol
}

// startThroughFailover has alice type again and again (stop, start: each
// start is new, so it is published) until bob and carol both see a
// typing_start published after the failover began (after marks), on the
// new master. Bound: 5 s after the switch (go-redis probes a refused
// address once a second; seen: ~0.4 s). It returns when each saw it.
func startThroughFailover(t *testing.T, alice, bob, carol *view, room string, marks map[*view]int, switched time.Time, promoted string) map[*view]time.Time {
	t.Helper()
	firstStart := map[*view]time.Time{}
	const bound = 5 * time.Second
	deadline := switched.Add(bound)
	for len(firstStart) < 2 {
		_ = alice.c.trySend(map[string]any{"type": "typing_stop", "room": room})
		_ = alice.c.trySend(map[string]any{"type": "typing_start", "room": room})
		time.Sleep(100 * time.Millisecond)
		for _, v := range []*view{bob, carol} {
			if _, ok := firstStart[v]; ok {
				continue
			}
			if fs := v.frames(marks[v], isStart(room, "alice")); len(fs) > 0 {
				firstStart[v] = fs[0].at
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("typing_start did not get through again within %v of the switch to %s (bob on gateway 1: %v, carol on gateway 0: %v); "+
				"a gateway whose Pub/Sub connection stays on the old master (still up after SENTINEL FAILOVER) gets no events",
				bound, promoted, !firstStart[bob].IsZero(), !firstStart[carol].IsZero())
		}
	}
	return firstStart
}

// checkResyncAfterFailover waits (5 s) for the resync snapshot bob and
// carol each get after the failover, logs their timings, and returns the
// later of their first typing_start after the failover.
func checkResyncAfterFailover(t *testing.T, bob, carol *view, room string, marks map[*view]int, firstStart map[*view]time.Time, began, switched time.Time) time.Time {
	t.Helper()
	for _, v := range []*view{bob, carol} {
		// Events published while the gateway's Pub/Sub connection was
		// down are lost: once it is back, the gateway pushes a snapshot.
		snap := v.waitFrame(marks[v], isPushedSnapshot(room), 5*time.Second, "resync snapshot after the failover")
		errs := v.frames(marks[v], func(f frame) bool { return f.Type == "error" })
		t.Logf("%s (connected through the failover): first typing_start %v after the failover began, %v after the switch; resync snapshot %v after the failover began; errors %v",
			v.c.name, firstStart[v].Sub(began).Round(time.Millisecond), firstStart[v].Sub(switched).Round(time.Millisecond),
			snap.at.Sub(began).Round(time.Millisecond), errs)
	}
	last := firstStart[bob]
	if firstStart[carol].After(last) {
		last = firstStart[carol]
	}
	return last
}

// joinRetry joins room, retrying while the gateway answers unavailable (its
// Redis subscription or a worker's Redis pool is still reconnecting after a
// failover), and fails on any other error or after within.
func joinRetry(c *client, room string, within time.Duration) frame {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for attempt := 1; ; attempt++ {
		id := "j-" + testkit.RandHex(5)
		c.send(map[string]any{"type": "join", "room": room, "id": id})
		f := c.next(func(f frame) bool { return f.ID == id }, within, "reply to join "+room)
		if f.Type == "joined" {
			if attempt > 1 {
				c.t.Logf("%s: joined %s at attempt %d", c.name, room, attempt)
			}
			return f
		}
		if f.Type != "error" || f.Code != "unavailable" || time.Now().After(deadline) {
			c.t.Fatalf("%s: join %s (attempt %d): %v", c.name, room, attempt, f)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sentinelEnv is a private Redis master, one replica and three Sentinels
// monitoring the master under one name.
type sentinelEnv struct {
	t         *testing.T
	name      string
	redis     []testkit.RedisServer // [0] the first master, [1] its replica
	sentinels []*testkit.Server
}

// startRedisNode starts redis-server without persistence on a spare
// loopback port, with extra arguments: no 5 s wait before a replica's first
// full sync (which it stores in its directory, testkit's temporary one).
func startRedisNode(t *testing.T, extra ...string) testkit.RedisServer {
	t.Helper()
	return testkit.StartRedis(t, "", append([]string{"--repl-diskless-sync-delay", "0"}, extra...)...)
}

func startSentinelEnv(t *testing.T, name string) *sentinelEnv {
	t.Helper()
	se := &sentinelEnv{t: t, name: name}
	m := startRedisNode(t)
	r := startRedisNode(t, "--replicaof", "127.0.0.1", m.Port())
	se.redis = []testkit.RedisServer{m, r}
	// The replica is in sync before the Sentinels start, so their first
	// INFO of the master lists it (the next one is 10 s later).
	testkit.WaitForWhy(t, 10*time.Second, "replica "+r.Addr()+" in sync with "+m.Addr(), func() (bool, string) {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(info, "master_link_status:up"), info
	})

	se.startSentinels(m)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- sentinels ---\n%s", se.logs())
		}
	})

	started := time.Now()
	se.waitSentinelsSee(m, r)
	t.Logf("sentinels see master %s, replica %s and each other %v after they started", m.Addr(), r.Addr(), time.Since(started).Round(time.Millisecond))
	return se
}

// startSentinels starts three Sentinels on spare loopback ports, each
// monitoring master m under se.name (quorum 2, down after 1 s), with its
// own writable config file.
func (se *sentinelEnv) startSentinels(m testkit.RedisServer) {
	t := se.t
	t.Helper()
	name := se.name
	bin := testkit.FindBinary(t, "redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
	dir := t.TempDir()
	for i := range 3 {
		addr := freePort(t)
		_, port, _ := net.SplitHostPort(addr)
		// Sentinels rewrite their config file: it must be theirs and writable.
		conf := filepath.Join(dir, fmt.Sprintf("sentinel%d.conf", i))
		text := strings.Join([]string{
			"port " + port,
			"bind 127.0.0.1",
			"daemonize no",
			"dir " + dir,
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s 2", name, m.Port()),
			"sentinel down-after-milliseconds " + name + " 1000",
			"sentinel failover-timeout " + name + " 5000",
			"sentinel parallel-syncs " + name + " 1",
			"",
		}, "\n")
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		s := testkit.StartServer(t, "sentinel:"+port, bin, addr, []string{conf, "--sentinel"}, func() bool {
			c := redis.NewSentinelClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			return c.Ping(ctx).Err() == nil
		})
		se.sentinels = append(se.sentinels, s)
	}
}

// waitSentinelsSee waits (15 s each) until every Sentinel sees the master
// m, its replica r (link up) and the two other Sentinels (hello messages,
// every 2 s): a failover can start.
func (se *sentinelEnv) waitSentinelsSee(m, r testkit.RedisServer) {
	t := se.t
	t.Helper()
	name := se.name
	for _, s := range se.sentinels {
		testkit.WaitForWhy(t, 15*time.Second, s.Name()+" seeing the master, the replica and 2 sentinels", func() (bool, string) {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			addr, err := c.GetMasterAddrByName(ctx, name).Result()
			if err != nil || len(addr) != 2 || net.JoinHostPort(addr[0], addr[1]) != m.Addr() {
				return false, fmt.Sprintf("master %v %v", addr, err)
			}
			replicas, err := c.Replicas(ctx, name).Result()
			if err != nil || len(replicas) != 1 || net.JoinHostPort(replicas[0]["ip"], replicas[0]["port"]) != r.Addr() ||
				replicas[0]["flags"] != "slave" || replicas[0]["master-link-status"] != "ok" {
				return false, fmt.Sprintf("replicas %v %v", replicas, err)
			}
			sentinels, err := c.Sentinels(ctx, name).Result()
			if err != nil || len(sentinels) != 2 {
				return false, fmt.Sprintf("sentinels %v %v", sentinels, err)
			}
			for _, o := range sentinels {
				if o["flags"] != "sentinel" {
					return false, fmt.Sprintf("sentinels %v", sentinels)
				}
			}
			return true, ""
		})
	}
}

// url is the services' ELLIPSIS_REDIS_URL: the first Sentinel, the others
// as addr= options.
func (se *sentinelEnv) url() string {
	u := "redis+sentinel://" + se.sentinels[0].Addr() + "?master_name=" + se.name
	for _, s := range se.sentinels[1:] {
		u += "&addr=" + s.Addr()
	}
	return u
}

// waitMaster waits until every Sentinel reports addr as the master.
func (se *sentinelEnv) waitMaster(addr string, within time.Duration) {
	se.t.Helper()
	for _, s := range se.sentinels {
		testkit.WaitForWhy(se.t, within, s.Name()+" reporting "+addr+" as the master", func() (bool, string) {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			got, err := c.GetMasterAddrByName(ctx, se.name).Result()
			if err != nil || len(got) != 2 {
				return false, fmt.Sprintf("%v %v", got, err)
			}
			return net.JoinHostPort(got[0], got[1]) == addr, strings.Join(got, ":")
		})
	}
}

// failover asks the first Sentinel for a failover (SENTINEL FAILOVER).
func (se *sentinelEnv) failover() {
	se.t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: se.sentinels[0].Addr()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Failover(ctx, se.name).Err(); err != nil {
		se.t.Fatalf("SENTINEL FAILOVER %s: %v", se.name, err)
	}
}

// logs returns the tail of every Sentinel's output.
func (se *sentinelEnv) logs() string {
	var b strings.Builder
	for _, s := range se.sentinels {
		fmt.Fprintf(&b, "--- %s ---\n%s\n", s.Name(), tail(s.Output(), 40))
	}
	return b.String()
}
