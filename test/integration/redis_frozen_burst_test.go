package integration

import (
	"strconv"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/faultproxy"
)

// Issue 12 item 3 for a client that (re)joins several rooms at once, as
// the JS client does after a reconnect: with Redis frozen and the default
// health PING settings, five joins of new rooms and a ping sent at once
// on one connection are each answered (joined or unavailable) within
// ELLIPSIS_SNAPSHOT_TIMEOUT + 1 s of being sent, although the connection
// serves them one after the other.
func TestRedisFrozenJoinBurstOneConnection(t *testing.T) {
	t.Parallel()
	r := startPrivateRedis(t)
	px, err := faultproxy.New(r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	s := newStack(t, 1, 1, func(c *config.Config) { c.RedisURL = "redis://" + px.Addr() })
	bound := s.cfg.SnapshotTimeout + time.Second
	c := dial(t, s.wsURL(0, "carol", ""), "carol")
	c.join("burst:warm")
	px.Freeze(true)
	sent := time.Now()
	for i := 0; i < 5; i++ {
		c.send(map[string]any{"type": "join", "room": "burst:" + strconv.Itoa(i), "id": "j" + strconv.Itoa(i)})
	}
	c.send(map[string]any{"type": "ping", "id": "p"})
	for i := 0; i < 5; i++ {
		f := c.next(isReply("j"+strconv.Itoa(i)), 6*bound, "answer to join "+strconv.Itoa(i))
		took := f.at.Sub(sent)
		t.Logf("join %d with Redis frozen: %s %s after %v", i, f.Type, f.Code, took)
		if f.Type != "joined" && (f.Type != "error" || f.Code != "unavailable") {
			t.Fatalf("join %d: %v", i, f)
		}
		if took > bound {
			t.Fatalf("join %d answered %v after it was sent, want within %v (ELLIPSIS_SNAPSHOT_TIMEOUT + 1 s)", i, took, bound)
		}
	}
	f := c.next(isReply("p"), 6*bound, "pong")
	if took := f.at.Sub(sent); f.Type != "pong" || took > bound {
		t.Fatalf("ping answered with %v after %v, want a pong within %v", f, took, bound)
	}
	px.Freeze(false)
	px.Cut()
	waitReadyz(t, s.gateways[0].AdminAddr(), 200, 15*time.Second)
	c.join("burst:after")
}
