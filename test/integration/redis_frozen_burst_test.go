package integration

import (
	"strconv"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/faultproxy"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Join answers for a client that (re)joins several rooms at once, as
// the JS client does after a reconnect: with Redis frozen and the default
// health PING settings, five joins of new rooms and a ping sent at once
// on one connection are each answered (joined or unavailable) within
// ELLIPSIS_SNAPSHOT_TIMEOUT + 1 s of being sent.
func TestRedisFrozenJoinBurstOneConnection(t *testing.T) {
	t.Parallel()
	r := testkit.StartRedis(t, "")
	px, err := faultproxy.New(r.Addr())
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
	burstAnswers(t, c, sent, bound, false)
	px.Freeze(false)
	px.Cut()
	// /readyz can still read 200 for a moment after the cut, before the
	// link notices it: the join retries on unavailable, as clients do.
	waitReadyz(t, s.gateways[0].AdminAddr(), 200, 15*time.Second)
	c.joinRetrying("burst:after", 15*time.Second)
}

// The same burst into rooms already subscribed on the gateway (another
// client joined them first), so every join waits for the workers'
// snapshot, which Redis being frozen holds up to ELLIPSIS_SNAPSHOT_TIMEOUT:
// the joins run at the same time in their rooms' lanes, so each is
// answered within ELLIPSIS_SNAPSHOT_TIMEOUT + 1 s of being sent (served one
// after the other they took 2, 4, 6, 8, 10 s), and the ping sent after
// them is answered before any of them.
func TestRedisFrozenJoinBurstSubscribedRooms(t *testing.T) {
	t.Parallel()
	r := testkit.StartRedis(t, "")
	px, err := faultproxy.New(r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	s := newStack(t, 1, 1, func(c *config.Config) { c.RedisURL = "redis://" + px.Addr() })
	bound := s.cfg.SnapshotTimeout + time.Second
	other := dial(t, s.wsURL(0, "dave", ""), "dave")
	for i := 0; i < 5; i++ {
		other.join("ex:" + strconv.Itoa(i))
	}
	c := dial(t, s.wsURL(0, "erin", ""), "erin")
	px.Freeze(true)
	sent := time.Now()
	for i := 0; i < 5; i++ {
		c.send(map[string]any{"type": "join", "room": "ex:" + strconv.Itoa(i), "id": "j" + strconv.Itoa(i)})
	}
	c.send(map[string]any{"type": "ping", "id": "p"})
	burstAnswers(t, c, sent, bound, true)
	px.Freeze(false)
	px.Cut()
	// /readyz can still read 200 for a moment after the cut, before the
	// link notices it: the join retries on unavailable, as clients do.
	waitReadyz(t, s.gateways[0].AdminAddr(), 200, 15*time.Second)
	c.joinRetrying("ex:0", 15*time.Second)
}

// burstAnswers reads the answers to joins j0..j4 and ping p, sent at sent,
// in whatever order they come (answers of different rooms may: each
// carries its room and id): each join is answered joined or unavailable,
// and everything within bound of sent. pongFirst: the pong must come
// before every join's answer (the joins wait on the network, the ping
// never waits behind them).
func burstAnswers(t *testing.T, c *client, sent time.Time, bound time.Duration, pongFirst bool) {
	t.Helper()
	ids := map[string]bool{"p": true, "j0": true, "j1": true, "j2": true, "j3": true, "j4": true}
	for n := 0; n < 6; n++ {
		f := c.next(func(f frame) bool { return ids[f.ID] }, 6*bound, "answers to 5 joins and a ping")
		delete(ids, f.ID)
		took := f.at.Sub(sent)
		t.Logf("%s with Redis frozen: %s %s after %v", f.ID, f.Type, f.Code, took)
		switch {
		case f.ID == "p" && f.Type != "pong":
			t.Fatalf("ping answered %v", f)
		case f.ID == "p" && pongFirst && n != 0:
			t.Fatalf("pong came after %d join answers, want it first", n)
		case f.ID != "p" && f.Type != "joined" && (f.Type != "error" || f.Code != "unavailable"):
			t.Fatalf("join answered %v", f)
		case took > bound:
			t.Fatalf("%s answered %v after it was sent, want within %v (ELLIPSIS_SNAPSHOT_TIMEOUT + 1 s)", f.ID, took, bound)
		}
	}
}
