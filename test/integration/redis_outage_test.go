package integration

import (
	"net/http"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// isPushedSnapshot matches an unasked typing snapshot (a resync) of room.
func isPushedSnapshot(room string) func(frame) bool {
	return func(f frame) bool { return f.Type == "typing" && f.ID == "" && f.Room == room }
}

// A Redis outage, as separate processes. A private Redis is killed while a
// user types and restarted a second later: both services report it on
// /readyz and in their logs, the workers retry with backoff and count the
// failures, and once Redis is back the gateway has resubscribed its rooms
// and pushes a typing snapshot for every joined room, after which the
// typist is shown again.
func TestRedisOutageAndRestart(t *testing.T) {
	t.Parallel()
	r := testkit.StartRedis(t, "")
	ps := newProcStack(t, map[string]string{"ELLIPSIS_REDIS_URL": r.URL()})
	w0, w1 := ps.startWorker(nil), ps.startWorker(nil)
	g := ps.startGateway(nil)
	rooms := []string{"redis:1", "redis:2"}
	alice := dial(t, g.wsURL("alice", "Alice"), "alice")
	bob := watch(dial(t, g.wsURL("bob", "Bob"), "bob"))
	for _, room := range rooms {
		alice.join(room)
		bob.join(room)
	}
	stop := keepTyping(alice, rooms[0], 300*time.Millisecond)
	defer stop()
	bob.waitShown(rooms[0], "alice", 2*time.Second)

	r.Kill()
	down := time.Now()
	for _, p := range []*proc{g, w0, w1} {
		at := waitReadyz(t, p.adminAddr, 503, 3*time.Second, "redis")
		t.Logf("%s /readyz 503 (redis) %v after the kill", p.name, at.Sub(down))
	}
	// A join needs the room's subscription: unavailable at once.
	carol := watch(dial(t, g.wsURL("carol", ""), "carol"))
	f, took := carol.request(map[string]any{"type": "join", "room": rooms[0]}, 5*time.Second)
	if f.Type != "error" || f.Code != "unavailable" {
		t.Fatalf("join during the Redis outage: %v, want error unavailable", f)
	}
	t.Logf("join during the outage answered %q in %v: %s", f.Code, took, f.Message)
	time.Sleep(time.Second) // alice keeps typing: the workers retry and fail
	errs := metric(t, w0.adminAddr, "ellipsis_worker_redis_errors_total") + metric(t, w1.adminAddr, "ellipsis_worker_redis_errors_total")
	if errs == 0 {
		t.Fatal("ellipsis_worker_redis_errors_total did not count the outage")
	}
	since := bob.mark()
	back := time.Now() // redis-server listens within milliseconds
	r.Restart()
	var pushed time.Time
	for _, room := range rooms {
		f := bob.waitFrame(since, isPushedSnapshot(room), 5*time.Second, "pushed typing snapshot of "+room)
		t.Logf("typing snapshot of %s pushed %v after Redis was back: %q", room, f.at.Sub(back), users(f.Users))
		if f.at.After(pushed) {
			pushed = f.at
		}
	}
	recordRecovery(t, "Redis restart: typing snapshot pushed for every joined room", pushed.Sub(back))
	at := bob.waitShown(rooms[0], "alice", 3*time.Second)
	recordRecovery(t, "Redis restart: typist shown again (next refresh)", at.Sub(back))
	for _, p := range []*proc{g, w0, w1} {
		at := waitReadyz(t, p.adminAddr, 200, 5*time.Second)
		t.Logf("%s /readyz 200 %v after Redis was back", p.name, at.Sub(back))
	}
	stop()
	alice.stop(rooms[0])
	bob.waitShown(rooms[0], "", time.Second)

	// Reported, with backoff, and at a bounded rate.
	retries := w0.countLines("redis call failed") + w1.countLines("redis call failed")
	if retries == 0 || retries > 4 {
		t.Fatalf("workers logged %d retry warnings for one outage, want 1..4 (rate-limited)", retries)
	}
	if g.countLines("redis pubsub connection lost") != 1 || g.countLines("resyncing rooms") == 0 {
		t.Fatalf("gateway did not log the lost and restored Pub/Sub connection once:\n%s", tail(g.out.String(), 30))
	}
}

// Redis outages in process, so goroutines can be counted: ten Redis
// outages in a row, each followed by the resync push and a working
// keystroke path; afterwards the process has no more goroutines than
// after the first. Not parallel: runtime.NumGoroutine counts the whole
// process, and sequential tests run before the parallel ones start.
func TestRedisOutagesLeakNoGoroutines(t *testing.T) {
	r := testkit.StartRedis(t, "")
	s := newStack(t, 1, 1, func(c *config.Config) { c.RedisURL = r.URL() })
	gwAdmin, wkAdmin := s.gateways[0].AdminAddr(), s.workers[0].AdminAddr()
	room := "leak"
	alice := dial(t, s.wsURL(0, "alice", ""), "alice")
	alice.join(room)
	bob := watch(dial(t, s.wsURL(0, "bob", ""), "bob"))
	bob.join(room)
	o := &outageEnv{t: t, r: r, gwAdmin: gwAdmin, wkAdmin: wkAdmin, room: room, alice: alice, bob: bob,
		noKeepAlive: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	o.outage(0) // warm up: connections, pools and timers exist from now on
	base := settleGoroutines()
	var worst, total time.Duration
	for i := 1; i <= 10; i++ {
		d := o.outage(i)
		worst, total = max(worst, d), total+d
	}
	t.Logf("ten Redis outages: snapshot pushed %v after Redis was back on average, %v at worst", total/10, worst)
	recordRecovery(t, "Redis restart ×10 (in process): snapshot pushed, worst", worst)
	deadline := time.Now().Add(5 * time.Second)
	n := settleGoroutines()
	for n > base+3 && time.Now().Before(deadline) {
		n = settleGoroutines()
	}
	t.Logf("goroutines: %d after the first outage, %d after ten more", base, n)
	if n > base+3 {
		var sb strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&sb, 1)
		t.Fatalf("goroutine leak: %d goroutines after ten Redis outages, %d after the first\n%s", n, base, sb.String())
	}
	if errs := metric(t, wkAdmin, "ellipsis_worker_redis_errors_total"); errs == 0 {
		t.Fatal("the worker counted no Redis errors over ten outages")
	}
}

// outageEnv is the Redis-outage scenario: one gateway and one worker on
// the private Redis r, alice typing and bob watching in room.
type outageEnv struct {
	t                *testing.T
	r                testkit.RedisServer
	gwAdmin, wkAdmin string
	room             string
	alice            *client
	bob              *view
	noKeepAlive      *http.Client
}

// status is the HTTP status of addr's /readyz, 0 if it does not answer.
func (o *outageEnv) status(addr string) int {
	resp, err := o.noKeepAlive.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitStatus waits (5 s) until addr's /readyz answers want.
func (o *outageEnv) waitStatus(addr string, want int) {
	t := o.t
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for o.status(addr) != want {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz of %s never %d", addr, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// outage is outage i: Redis is killed until both services are unready
// (the first time, also until the worker counted a Redis error), then
// restarted; the gateway pushes bob a snapshot, both are ready again and
// the whole keystroke path works. It returns the time from the restart to
// the snapshot.
func (o *outageEnv) outage(i int) time.Duration {
	t := o.t
	t.Helper()
	o.r.Kill()
	o.waitStatus(o.gwAdmin, 503)
	o.waitStatus(o.wkAdmin, 503)
	if i == 0 {
		// The worker's sweeper (every ELLIPSIS_SWEEP_INTERVAL) meets the
		// dead Redis and counts it: wait for that once, so the count
		// checked at the end does not depend on whether a short
		// outage happened to fall between two sweeps.
		for deadline := time.Now().Add(5 * time.Second); metric(t, o.wkAdmin, "ellipsis_worker_redis_errors_total") == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the worker counted no Redis error 5 s into an outage")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	since := o.bob.mark()
	back := time.Now()
	o.r.Restart()
	f := o.bob.waitFrame(since, isPushedSnapshot(o.room), 5*time.Second, "typing snapshot after the Redis restart")
	o.waitStatus(o.gwAdmin, 200)
	o.waitStatus(o.wkAdmin, 200)
	// The whole keystroke path works again.
	since = o.bob.mark()
	o.alice.start(o.room)
	o.bob.waitFrame(since, isStart(o.room, "alice"), 3*time.Second, "typing_start after the Redis restart")
	o.alice.stop(o.room)
	o.bob.waitFrame(since, isStop(o.room, "alice", "stopped"), 3*time.Second, "typing_stop after the Redis restart")
	return f.at.Sub(back)
}

// settleGoroutines collects garbage, waits 300 ms and returns the number
// of goroutines.
func settleGoroutines() int {
	runtime.GC()
	time.Sleep(300 * time.Millisecond)
	return runtime.NumGoroutine()
}
