package integration

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/faultproxy"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// The gateway and the worker reach a private Redis
// through a fault proxy (shared/faultproxy) that the test freezes, cuts
// and blackholes.

const (
	faultPingInterval = time.Second
	faultPingTimeout  = 500 * time.Millisecond
)

// faultStack is one gateway and one worker whose Redis sits behind px.
func faultStack(t *testing.T) (*stack, *faultproxy.Proxy, testkit.RedisServer) {
	t.Helper()
	r := testkit.StartRedis(t, "")
	px, err := faultproxy.New(r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	s := newStack(t, 1, 1, func(c *config.Config) {
		c.RedisURL = "redis://" + px.Addr()
		c.PubSubPingInterval, c.PubSubPingTimeout = faultPingInterval, faultPingTimeout
	})
	return s, px, r
}

// readyzTimed asks /readyz once (a new connection) and times the answer.
func readyzTimed(addr string) (code int, took time.Duration, err error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := c.Get("http://" + addr + "/readyz")
	took = time.Since(start)
	if err != nil {
		return 0, took, err
	}
	resp.Body.Close()
	return resp.StatusCode, took, nil
}

// timedReadyz asks /readyz once and fails the test if the answer takes
// more than a second.
func timedReadyz(t *testing.T, addr string) int {
	t.Helper()
	code, took, err := readyzTimed(addr)
	if err != nil || took > time.Second {
		t.Fatalf("/readyz: %v after %v, want an answer within 1 s", err, took)
	}
	return code
}

func isReply(id string) func(frame) bool { return func(f frame) bool { return f.ID == id } }

// Frozen Redis (connections kept, nothing forwarded): joins answer joined
// or unavailable within ELLIPSIS_SNAPSHOT_TIMEOUT + 1 s, pings are answered,
// closing a connection does not wait on Redis, /readyz answers within a
// second and turns 503 once the health PING times out; after the thaw the
// gateway redials and resyncs the joined room.
func TestRedisFrozen(t *testing.T) {
	t.Parallel()
	s, px, _ := faultStack(t)
	admin := s.gateways[0].AdminAddr()
	bound := s.cfg.SnapshotTimeout + time.Second
	bob := watch(dial(t, s.wsURL(0, "bob", ""), "bob"))
	bob.join("frozen:1")
	leaver := dial(t, s.wsURL(0, "leaver", ""), "leaver")
	leaver.join("frozen:1")

	px.Freeze(true)
	frozen := time.Now()
	noticedCh := pollReadyzFromFreeze(t, admin, frozen)
	carol := dial(t, s.wsURL(0, "carol", ""), "carol")
	checkJoinsWhileFrozen(t, carol, bound)
	start := time.Now()
	leaver.close() // the close handshake, and the hub's leave, never wait on Redis
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("closing a connection took %v with Redis frozen", took)
	}
	noticed := <-noticedCh
	if noticed < 0 {
		t.Fatalf("/readyz never 503 within ping interval + timeout + 3 s of the freeze")
	}
	if code := timedReadyz(t, admin); code != 503 {
		t.Fatalf("/readyz %d while Redis is frozen", code)
	}
	t.Logf("silent Redis link noticed (/readyz 503) %v after the freeze (ping interval %v + timeout %v)", noticed, faultPingInterval, faultPingTimeout)
	recordRecovery(t, "Redis frozen: silent Pub/Sub link noticed (/readyz 503)", noticed)

	since := bob.mark()
	px.Freeze(false)
	px.Cut()
	back := time.Now()
	f := bob.waitFrame(since, isPushedSnapshot("frozen:1"), 10*time.Second, "resync of frozen:1 after the thaw")
	t.Logf("frozen:1 resynced %v after the thaw", f.at.Sub(back))
	waitReadyz(t, admin, 200, 10*time.Second)
}

// pollReadyzFromFreeze polls admin's /readyz from the freeze on: every
// answer within a second, and the first 503 timed. The channel gets the
// time from frozen to the first 503, or -1 if none came within ping
// interval + timeout + 3 s.
func pollReadyzFromFreeze(t *testing.T, admin string, frozen time.Time) <-chan time.Duration {
	noticedCh := make(chan time.Duration, 1)
	go func() {
		for time.Since(frozen) < faultPingInterval+faultPingTimeout+3*time.Second {
			code, took, err := readyzTimed(admin)
			if err != nil || took > time.Second {
				t.Errorf("/readyz with Redis frozen: %v after %v", err, took)
				break
			}
			if code == 503 {
				noticedCh <- time.Since(frozen)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		noticedCh <- -1
	}()
	return noticedCh
}

// checkJoinsWhileFrozen has carol join a known and a new room, each with a
// ping, with Redis frozen: the join is answered (joined or unavailable)
// and the ping ponged, both within bound.
func checkJoinsWhileFrozen(t *testing.T, carol *client, bound time.Duration) {
	t.Helper()
	for i, room := range []string{"frozen:1", "frozen:new"} {
		id := "j" + strconv.Itoa(i)
		sent := time.Now()
		carol.send(map[string]any{"type": "join", "room": room, "id": id})
		carol.send(map[string]any{"type": "ping", "id": "p" + id})
		// The pong may come first: the ping does not wait behind the join.
		var f, p frame
		for f.ID == "" || p.ID == "" {
			g := carol.next(func(g frame) bool { return g.ID == id || g.ID == "p"+id }, bound+time.Second, "answers to join "+room+" and ping")
			if g.ID == id {
				f = g
			} else {
				p = g
			}
		}
		if f.Type != "joined" && (f.Type != "error" || f.Code != "unavailable") {
			t.Fatalf("join %s with Redis frozen: %v", room, f)
		}
		took := f.at.Sub(sent)
		t.Logf("join of %s with Redis frozen: %s %s in %v", room, f.Type, f.Code, took)
		recordRecovery(t, "Redis frozen: join of "+room+" answered", took)
		if took > bound {
			t.Fatalf("join answered after %v, want within %v", took, bound)
		}
		if p.Type != "pong" || p.at.Sub(sent) > bound {
			t.Fatalf("ping: %v after %v", p, p.at.Sub(sent))
		}
	}
}

// The hang the issue measured: Redis connections are reset and new ones
// hang (blackholed) for a while. Five joins of five new rooms, sent at
// once from five connections, are all answered within
// ELLIPSIS_SNAPSHOT_TIMEOUT + 1 s, and /readyz keeps answering within a
// second; once the path heals, joins work again.
func TestRedisResetThenHang(t *testing.T) {
	t.Parallel()
	s, px, _ := faultStack(t)
	admin := s.gateways[0].AdminAddr()
	bound := s.cfg.SnapshotTimeout + time.Second
	px.Blackhole(true)
	px.Cut()
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		c := dial(t, s.wsURL(0, "u"+strconv.Itoa(i), ""), "u"+strconv.Itoa(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			c.send(map[string]any{"type": "join", "room": "hang:" + strconv.Itoa(i), "id": "j"})
			f := c.next(isReply("j"), bound+2*time.Second, "answer to join")
			if took := f.at.Sub(sent); took > bound || (f.Type != "joined" && f.Code != "unavailable") {
				t.Errorf("join %d: %v after %v, want joined or unavailable within %v", i, f, took, bound)
			}
		}()
	}
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		timedReadyz(t, admin)
	}
	wg.Wait()
	px.Blackhole(false)
	waitReadyz(t, admin, 200, 10*time.Second)
	v := watch(dial(t, s.wsURL(0, "late", ""), "late"))
	v.join("hang:after")
}

// Reset: every Redis connection is reset (RST) and Redis answers again at
// once. The link redials with jittered backoff, resubscribes, and the
// joined room is resynced; /readyz is 200 again.
func TestRedisReset(t *testing.T) {
	t.Parallel()
	s, px, _ := faultStack(t)
	bob := watch(dial(t, s.wsURL(0, "bob", ""), "bob"))
	bob.join("reset:1")
	since := bob.mark()
	px.Cut()
	cut := time.Now()
	f := bob.waitFrame(since, isPushedSnapshot("reset:1"), 10*time.Second, "resync of reset:1 after the reset")
	t.Logf("reset:1 resynced %v after the reset", f.at.Sub(cut))
	recordRecovery(t, "Redis connections reset: room resynced", f.at.Sub(cut))
	waitReadyz(t, s.gateways[0].AdminAddr(), 200, 10*time.Second)
	alice := dial(t, s.wsURL(0, "alice", ""), "alice")
	alice.join("reset:1")
	alice.start("reset:1")
	bob.waitShown("reset:1", "alice", 5*time.Second)
}
