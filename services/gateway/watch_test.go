package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Watching rooms end to end, on a real Redis and NATS (docs/protocol.md,
// "Watching rooms").

// summaryOf is a summary frame as "room typists/total".
func summaryOf(f frame) string {
	var users []string
	list, _ := f["typing"].([]any)
	for _, u := range list {
		m, _ := u.(map[string]any)
		s, _ := m["user"].(string)
		users = append(users, s)
	}
	total, _ := f["total"].(float64)
	return f.str("room") + " " + strings.Join(users, ",") + "/" + strconv.Itoa(int(total))
}

// watchFrames sends watch frames of rooms, each under the 4096-byte frame
// limit (as the SDK splits), and returns the merged accepted rooms and
// refusals (room:code).
func (c *client) watchAll(rooms []string) (accepted, refused []string) {
	c.t.Helper()
	for len(rooms) > 0 {
		n := 0
		size := len(`{"type":"watch","id":"w","rooms":[]}`)
		for n < len(rooms) && size+len(rooms[n])+3 < 4096 {
			size += len(rooms[n]) + 3
			n++
		}
		c.send(map[string]any{"type": "watch", "id": "w", "rooms": rooms[:n]})
		f := c.read()
		for f.str("type") == protocol.TypeSummary {
			// A room of an earlier frame: its summary may come first.
			c.early = append(c.early, f)
			f = c.read()
		}
		if f.str("type") != protocol.TypeWatching {
			c.t.Fatalf("got frame %v, want type %s", f, protocol.TypeWatching)
		}
		for _, r := range f["rooms"].([]any) {
			accepted = append(accepted, r.(string))
		}
		for _, r := range f["refused"].([]any) {
			m := r.(map[string]any)
			refused = append(refused, m["room"].(string)+":"+m["code"].(string))
		}
		rooms = rooms[n:]
	}
	return accepted, refused
}

// expectSummary reads a summary frame, first those watchAll read early.
func (c *client) expectSummary() frame {
	c.t.Helper()
	if len(c.early) > 0 {
		f := c.early[0]
		c.early = c.early[1:]
		return f
	}
	return c.expect(protocol.TypeSummary)
}

// typists makes a snapshot list.
func typists(users ...string) []protocol.Typist {
	out := make([]protocol.Typist, len(users))
	for i, u := range users {
		out[i] = protocol.Typist{User: u}
	}
	return out
}

func TestWatch500RoomsEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.WatchInterval = 200 * time.Millisecond })
	e.startWorker("")
	rooms := make([]string, 500)
	for i := range rooms {
		rooms[i] = "room-" + strconv.Itoa(i)
		e.setSnapshot(rooms[i])
	}
	e.setSnapshot("room-3", typists("bob")...) // typing before the watch
	// Other connections: members of room-1, room-2 and a second watcher
	// of room-1.
	m1, m2 := e.dial("m1", ""), e.dial("m2", "")
	m1.join("room-1")
	m2.join("room-1")
	m2.join("room-2")
	w := e.dial("w", "")
	accepted, refused := w.watchAll(rooms)
	if len(accepted) != 500 || len(refused) != 0 {
		t.Fatalf("accepted %d, refused %v", len(accepted), refused)
	}
	w2 := e.dial("w2", "")
	if acc, ref := w2.watchAll([]string{"room-1", "room-2"}); len(acc) != 2 || len(ref) != 0 {
		t.Fatalf("w2: accepted %v, refused %v", acc, ref)
	}
	// One initial summary per room, even when nobody types.
	got := map[string]string{}
	for len(got) < 500 {
		f := w.expectSummary()
		s := summaryOf(f)
		if prev, dup := got[f.str("room")]; dup {
			t.Fatalf("second summary %s before every room had one (first %s)", s, prev)
		}
		got[f.str("room")] = s
	}
	if got["room-3"] != "room-3 bob/1" || got["room-0"] != "room-0 /0" {
		t.Fatalf("initial summaries: room-3 %q, room-0 %q", got["room-3"], got["room-0"])
	}
	// One Redis subscription per room per gateway, whatever its members
	// and watchers.
	ctx := context.Background()
	n, err := e.rdb.PubSubNumSub(ctx, e.names.RoomChannel("room-1"), e.names.RoomChannel("room-499")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n[e.names.RoomChannel("room-1")] != 1 || n[e.names.RoomChannel("room-499")] != 1 {
		t.Fatalf("PUBSUB NUMSUB %v, want 1 each", n)
	}
	if s := e.metric("ellipsis_gateway_redis_subscriptions"); s != 500 {
		t.Fatalf("redis_subscriptions %v, want 500", s)
	}
	if v := e.metric("ellipsis_gateway_watches"); v != 502 {
		t.Fatalf("watches %v, want 502", v)
	}
	if v := e.metric("ellipsis_gateway_watched_rooms"); v != 500 {
		t.Fatalf("watched_rooms %v, want 500", v)
	}

	// Changes: room-7 gets 4 typists (the summary lists 3), room-8 has w
	// itself typing (self filtered), room-1 changes for both watchers and
	// its members get the events.
	change := func(room, user string, start bool, now ...string) {
		e.setSnapshot(room, typists(now...)...)
		ev := protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: room, User: user, Reason: protocol.ReasonStopped}
		if start {
			ev = protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: room, User: user, TTLMs: 5000}
		}
		e.publish(ev)
	}
	change("room-7", "a", true, "a")
	change("room-7", "b", true, "a", "b")
	change("room-7", "c", true, "a", "b", "c")
	change("room-7", "d", true, "a", "b", "c", "d")
	change("room-8", "w", true, "w")
	change("room-8", "x", true, "w", "x")
	change("room-1", "m1", true, "m1")
	change("room-3", "bob", false)
	want := map[string]string{"room-7": "room-7 a,b,c/4", "room-8": "room-8 x/1", "room-1": "room-1 m1/1", "room-3": "room-3 /0"}
	last := map[string]string{}
	for !sameMap(last, want) {
		f := w.expectSummary()
		if _, ok := want[f.str("room")]; !ok {
			t.Fatalf("summary of a room that did not change: %v", f)
		}
		last[f.str("room")] = summaryOf(f)
	}
	for s := ""; s != "room-1 m1/1"; {
		s = summaryOf(w2.expectSummary())
	}
	if f := m2.expect(protocol.TypeTypingStart); f.str("user") != "m1" {
		t.Fatalf("member got %v", f)
	}

	// Unwatch room-7: no summary of it afterwards. room-9 changes with it
	// (published after it), twice, each change waited for: the tick that
	// serves room-9 would serve room-7 too.
	w.send(map[string]any{"type": "unwatch", "rooms": []string{"room-7"}, "id": "u"})
	if f := w.expect(protocol.TypeUnwatched); f["watched"] != 499.0 {
		t.Fatalf("unwatched %v", f)
	}
	for i, who := range []string{"p", "q"} {
		change("room-7", who, true, "a", who)
		change("room-9", who, true, who)
		if f := w.expectSummary(); summaryOf(f) != "room-9 "+who+"/1" {
			t.Fatalf("round %d: got %v, want room-9's summary", i, f)
		}
	}
	// Everything ends with the connections: no subscription is left.
	w.ws.Close()
	w2.ws.Close()
	m1.ws.Close()
	m2.ws.Close()
	testkit.WaitFor(t, 10*time.Second, "every room channel unsubscribed", func() bool {
		return e.metric("ellipsis_gateway_redis_subscriptions") == 0 && e.metric("ellipsis_gateway_watches") == 0
	})
	if v := e.metric("ellipsis_gateway_watch_summaries_total"); v < 500 {
		t.Fatalf("watch_summaries_total %v", v)
	}
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestWatchRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.MaxWatchedRooms = 3
		c.Authz = config.AuthzNATS
	})
	e.startWorker("")
	if _, err := e.nc.Subscribe(e.names.AuthzJoinSubject(), func(m *nats.Msg) {
		var req struct{ User, Room string }
		_ = json.Unmarshal(m.Data, &req)
		_ = m.Respond([]byte(fmt.Sprintf(`{"allow":%v}`, !strings.HasPrefix(req.Room, "closed"))))
	}); err != nil {
		t.Fatal(err)
	}
	_ = e.nc.Flush()
	c := e.dial("alice", "")
	c.send(`{"type":"watch","rooms":[],"id":"w0"}`)
	if f := c.expectError(protocol.CodeBadRequest); !strings.HasPrefix(f.str("message"), "rooms: ") || f.str("id") != "w0" {
		t.Fatalf("empty rooms: %v", f)
	}
	c.send(`{"type":"watch","rooms":"a","id":"w0"}`)
	c.expectError(protocol.CodeBadRequest)
	// Limit 3: a, closed-1 (forbidden: its token is spent, as a denied
	// join's), "" (bad_request), b, then c past the limit.
	acc, ref := c.watchAll([]string{"a", "closed-1", "", "b", "c", "d"})
	if strings.Join(acc, ",") != "a,b" || strings.Join(ref, ",") != "closed-1:forbidden,:bad_request,c:watch_limit,d:watch_limit" {
		t.Fatalf("accepted %v, refused %v", acc, ref)
	}
	// The user's budget (3 a minute, on all its connections) is spent: a
	// watch → unwatch → watch loop cannot churn subscriptions.
	c.send(`{"type":"unwatch","id":"u"}`)
	if f := c.expect(protocol.TypeUnwatched); f["watched"] != 0.0 {
		t.Fatalf("unwatched %v", f)
	}
	c2 := e.dial("alice", "")
	acc, ref = c2.watchAll([]string{"e"})
	if len(acc) != 0 || strings.Join(ref, ",") != "e:rate_limited" {
		t.Fatalf("past the budget: accepted %v, refused %v", acc, ref)
	}
	if v := e.metric(`ellipsis_gateway_watch_refusals_total{code="watch_limit"}`); v != 2 {
		t.Fatalf(`watch_refusals_total{code="watch_limit"} %v`, v)
	}
	// Another user has its own budget; the summaries come as usual.
	b := e.dial("bob", "")
	e.setSnapshot("x", typists("alice")...)
	if acc, _ := b.watchAll([]string{"x"}); len(acc) != 1 {
		t.Fatalf("bob: accepted %v", acc)
	}
	if f := b.expectSummary(); summaryOf(f) != "x alice/1" {
		t.Fatalf("bob's summary %v", f)
	}
}

func TestConfigServesWatchLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.MaxWatchedRooms = 42; c.WatchInterval = 1500 * time.Millisecond })
	st, body := httpGet(t, e.httpURL("/v1/config"), nil)
	if st != 200 || body["max_frame_bytes"] != 4096.0 || body["max_watched_rooms"] != 42.0 || body["watch_interval_ms"] != 1500.0 {
		t.Fatalf("config: %d %v", st, body)
	}
}
