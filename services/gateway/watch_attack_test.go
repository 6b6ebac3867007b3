package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Hostile watch frames (docs/protocol.md, "Watching rooms").

// answerTo sends raw and reads until the answer of type typ with id comes
// (summaries, typing frames and events of the rooms come in between).
func (c *client) answerTo(raw, id string, typ ...string) frame {
	c.t.Helper()
	c.send(raw)
	for {
		f := c.read()
		if f.str("id") != id {
			continue
		}
		for _, ty := range typ {
			if f.str("type") == ty {
				return f
			}
		}
		c.t.Fatalf("answer to %.200s: %v, want %v", raw, f, typ)
	}
}

// maxWatchFrame is a watch frame of 1- and 2-byte room ids, escapes
// included, as long as the frame limit allows (4096 bytes).
func maxWatchFrame(id string) (string, int) {
	var ids []string
	size := len(`{"type":"watch","id":"` + id + `","rooms":[]}`)
	for i := 0; ; i++ {
		var r string
		if i < 94 {
			r = string(rune('!' + i)) // every printable ASCII byte but space, " and \ included
		} else {
			r = string(rune('!'+(i-94)%94)) + string(rune('!'+(i-94)/94%94))
		}
		b, _ := json.Marshal(r)
		if size+len(b)+1 > 4096 {
			break
		}
		size += len(b) + 1
		ids = append(ids, string(b))
	}
	return `{"type":"watch","id":"` + id + `","rooms":[` + strings.Join(ids, ",") + `]}`, len(ids)
}

// A watch → join → unwatch → leave churn in every order across many rooms
// changing meanwhile, with maximal, duplicate, invalid and mistyped watch
// frames, by four users, leaks nothing once they are gone: no watch, room,
// Redis subscription or goroutine more than before, no gauge below 0.
// Not parallel: it counts goroutines.
func TestWatchChurnLeaksNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: churns watches over 4 connections for a few seconds; make test runs it")
	}
	e := newEnv(t, func(c *config.Config) {
		c.InboundRate, c.InboundBurst = 10000, 10000
		c.WatchInterval = 100 * time.Millisecond
		c.MaxRoomsPerConn = 100
	})
	e.startWorker("")
	warm := e.dial("warm", "")
	warm.join("warm")
	warm.answerTo(`{"type":"watch","id":"w","rooms":["warm2"]}`, "w", protocol.TypeWatching)
	warm.ws.Close()
	testkit.WaitFor(t, 5*time.Second, "the warm-up connection to end", func() bool { return e.metric("ellipsis_gateway_connections") == 0 })
	time.Sleep(200 * time.Millisecond)
	before := runtime.NumGoroutine()

	// The rooms change all along.
	stop := make(chan struct{})
	var pubs sync.WaitGroup
	pubs.Add(1)
	go func() {
		defer pubs.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			room, user := fmt.Sprint("r", i%50), fmt.Sprint("t", i%7)
			if i%2 == 0 {
				e.setSnapshot(room, typists(user)...)
			} else {
				e.setSnapshot(room)
			}
			// Not e.publish: no t.Fatal off the test's goroutine.
			if err := e.rdb.Publish(context.Background(), e.names.RoomChannel(room), churnEvent(room, user, i%2 == 0, "", protocol.ReasonStopped)).Err(); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	const users = 4
	clients := make([]*client, users)
	var refused atomic.Int64
	var wg sync.WaitGroup
	for u := range users {
		clients[u] = e.dial(fmt.Sprint("user", u), "")
		wg.Add(1)
		go func(c *client) {
			defer wg.Done()
			max, n := maxWatchFrame("max")
			f := c.answerTo(max, "max", protocol.TypeWatching)
			if got := len(f["rooms"].([]any)) + len(f["refused"].([]any)); got != n {
				t.Errorf("maximal frame of %d rooms answered for %d", n, got)
			}
			c.answerTo(`{"type":"unwatch","id":"u"}`, "u", protocol.TypeUnwatched)
			for _, raw := range []string{
				`{"type":"watch","id":"x","rooms":["a","a","","` + strings.Repeat("z", 300) + `","\u0001","b","a"]}`,
				`{"type":"watch","id":"x","rooms":"a"}`,
				`{"type":"watch","id":"x","rooms":[1,2]}`,
				`{"type":"watch","id":"x","rooms":[["a"]]}`,
				`{"type":"watch","id":"x","rooms":[null,"c"]}`,
				`{"type":"watch","id":"x","rooms":null}`,
				`{"type":"watch","id":"x","rooms":{}}`,
				`{"type":"watch","id":"x","rooms":[{"room":"a"}]}`,
				`{"type":"unwatch","id":"x","rooms":[1]}`,
				`{"type":"unwatch","id":"x","rooms":["never","watched","never"]}`,
				`{"type":"watch","id":"x","room":"d","rooms":["d"]}`,
			} {
				c.answerTo(raw, "x", protocol.TypeWatching, protocol.TypeUnwatched, protocol.TypeError)
			}
			for round := range 20 {
				var rooms []string
				for i := range 50 {
					rooms = append(rooms, fmt.Sprintf("%q", fmt.Sprint("r", (i+round)%50)))
				}
				f := c.answerTo(`{"type":"watch","id":"w","rooms":[`+strings.Join(rooms, ",")+`]}`, "w", protocol.TypeWatching)
				refused.Add(int64(len(f["refused"].([]any))))
				for i := range 5 {
					room := fmt.Sprint("r", (i*7+round)%50)
					c.answerTo(`{"type":"join","id":"j","room":"`+room+`"}`, "j", protocol.TypeJoined, protocol.TypeError)
					if round%2 == 0 {
						c.answerTo(`{"type":"unwatch","id":"u","rooms":["`+room+`"]}`, "u", protocol.TypeUnwatched)
						c.answerTo(`{"type":"leave","id":"l","room":"`+room+`"}`, "l", protocol.TypeLeft, protocol.TypeError)
					} else {
						c.answerTo(`{"type":"leave","id":"l","room":"`+room+`"}`, "l", protocol.TypeLeft, protocol.TypeError)
					}
				}
				if round%3 == 0 {
					c.answerTo(`{"type":"unwatch","id":"u"}`, "u", protocol.TypeUnwatched)
				} else {
					c.answerTo(`{"type":"unwatch","id":"u","rooms":[`+strings.Join(rooms[:25], ",")+`]}`, "u", protocol.TypeUnwatched)
				}
			}
		}(clients[u])
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if refused.Load() == 0 {
		t.Errorf("no room refused: the churn never met the watch budget")
	}
	for u, c := range clients {
		if u%2 == 0 {
			_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		}
		c.ws.Close()
	}
	close(stop)
	pubs.Wait()
	testkit.WaitFor(t, 10*time.Second, "every connection to end", func() bool { return e.metric("ellipsis_gateway_connections") == 0 })
	for _, g := range []string{"ellipsis_gateway_joined_rooms", "ellipsis_gateway_watched_rooms", "ellipsis_gateway_watches", "ellipsis_gateway_redis_subscriptions", "ellipsis_gateway_summary_rooms", "ellipsis_gateway_conflating_connections"} {
		testkit.WaitFor(t, 10*time.Second, g+" back to 0", func() bool { return e.metric(g) == 0 })
	}
	testkit.WaitFor(t, 10*time.Second, "no room channel subscribed", func() bool { return len(pubsubChannels(t, e)) == 0 })
	var after int
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if after = runtime.NumGoroutine(); after <= before+5 {
			break
		}
	}
	if after > before+5 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after every watcher ended:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
	t.Logf("goroutines: %d before, %d after; %d rooms refused in the churn", before, after, refused.Load())
}

// A connection that drops while its watch frame waits on a slow
// authoriser (authz=nats), and a gateway shut down (lame duck) with
// watchers and a watch in flight, leave nothing behind: every watch and
// subscription ends, Shutdown returns in time, no goroutine is left.
// Not parallel: it counts goroutines.
func TestWatchSlowAuthzDisconnectAndShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits on a slow authoriser; make test runs it")
	}
	cfg := func(c *config.Config) {
		c.Authz = config.AuthzNATS
		c.SnapshotTimeout = 2 * time.Second
		c.LameDuck = 500 * time.Millisecond
		c.ShutdownDrain = 100 * time.Millisecond
		c.WatchInterval = 100 * time.Millisecond
	}
	// The test shuts the gateway down itself (newEnv's cleanup does it
	// again: a no-op).
	e := newEnv(t, cfg)
	e.startWorker("")
	var slow atomic.Int64 // ms each authorisation takes
	if _, err := e.nc.Subscribe(e.names.AuthzJoinSubject(), func(m *nats.Msg) {
		go func() {
			time.Sleep(time.Duration(slow.Load()) * time.Millisecond)
			_ = m.Respond([]byte(`{"allow":true}`))
		}()
	}); err != nil {
		t.Fatal(err)
	}
	_ = e.nc.Flush()
	warm := e.dial("warm", "")
	warm.answerTo(`{"type":"watch","id":"w","rooms":["warm"]}`, "w", protocol.TypeWatching)
	warm.ws.Close()
	testkit.WaitFor(t, 5*time.Second, "the warm-up connection to end", func() bool { return e.metric("ellipsis_gateway_connections") == 0 })
	time.Sleep(200 * time.Millisecond)
	before := runtime.NumGoroutine()

	rooms := func(prefix string, n int) string {
		var ids []string
		for i := range n {
			ids = append(ids, fmt.Sprintf("%q", fmt.Sprint(prefix, i)))
		}
		return strings.Join(ids, ",")
	}
	slow.Store(700)
	// Dropped mid-watch: the frame is being served when TCP goes.
	x := e.dial("xavier", "")
	x.send(`{"type":"watch","id":"w","rooms":[` + rooms("x", 100) + `]}`)
	time.Sleep(300 * time.Millisecond)
	x.ws.Close()
	testkit.WaitFor(t, 10*time.Second, "the dropped connection to end", func() bool { return e.metric("ellipsis_gateway_connections") == 0 })
	for _, g := range []string{"ellipsis_gateway_watched_rooms", "ellipsis_gateway_watches", "ellipsis_gateway_redis_subscriptions"} {
		testkit.WaitFor(t, 10*time.Second, g+" back to 0 after the drop", func() bool { return e.metric(g) == 0 })
	}
	testkit.WaitFor(t, 10*time.Second, "no room channel subscribed after the drop", func() bool { return len(pubsubChannels(t, e)) == 0 })

	// Shutdown with a watcher and a watch in flight.
	slow.Store(50)
	y := e.dial("yvonne", "")
	if f := y.answerTo(`{"type":"watch","id":"w","rooms":[`+rooms("y", 40)+`]}`, "w", protocol.TypeWatching); len(f["rooms"].([]any)) != 40 {
		t.Fatalf("watching %v", f)
	}
	slow.Store(1500)
	z := e.dial("zoe", "")
	z.send(`{"type":"watch","id":"w","rooms":[` + rooms("z", 60) + `]}`)
	time.Sleep(100 * time.Millisecond)
	done := make(chan error, 1)
	began := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(ctx)
	}()
	for _, c := range []*client{y, z} {
		_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			_, b, err := c.ws.ReadMessage()
			if err != nil {
				var ce *websocket.CloseError
				if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
					t.Errorf("watcher ended with %v, want close 1001", err)
				}
				break
			}
			_ = b
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown with watchers: %v (after %v)", err, time.Since(began))
	}
	t.Logf("Shutdown with watchers took %v", time.Since(began))
	testkit.WaitFor(t, 10*time.Second, "no room channel subscribed after Shutdown", func() bool { return len(pubsubChannels(t, e)) == 0 })
	var after int
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if after = runtime.NumGoroutine(); after <= before+5 {
			break
		}
	}
	if after > before+5 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after Shutdown:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// A room joined and watched on one connection: joined gives its events,
// watched its summaries, independently, whatever the order of join,
// watch, leave and unwatch (docs/protocol.md, "Watching rooms").
func TestWatchAndJoinSameRoomInEveryOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.WatchInterval = 100 * time.Millisecond })
	e.startWorker("")
	e.setSnapshot("R")
	e.setSnapshot("S")
	c := e.dial("alice", "")
	// S is watched all along: its summary, published after R's change,
	// comes from the same or a later tick than R's would.
	c.answerTo(`{"type":"watch","id":"s","rooms":["S"]}`, "s", protocol.TypeWatching)
	if f := c.expect(protocol.TypeSummary); f.str("room") != "S" {
		t.Fatalf("first summary %v", f)
	}
	k := 0
	// change publishes a change of R, then of S, waits for S's summary,
	// then changes S again and waits for that summary: a tick serves its
	// rooms concurrently but ends before the next, so every frame of R's
	// change comes before the second. It returns R's frames.
	change := func() []string {
		k++
		u := fmt.Sprint("u", k)
		e.setSnapshot("R", typists(u)...)
		ev := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "R", User: u, TTLMs: 5000})
		var got []string
		for round := range 2 {
			su := fmt.Sprint(u, "-", round)
			e.setSnapshot("S", typists(su)...)
			e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "S", User: su, TTLMs: 5000})
			for done := false; !done; {
				b := c.readRaw()
				var f frame
				_ = json.Unmarshal(b, &f)
				switch {
				case f.str("type") == protocol.TypeSummary && f.str("room") == "S":
					done = summaryOf(f) == "S "+su+"/1"
				case string(b) == ev:
					got = append(got, "event")
				case f.str("type") == protocol.TypeSummary && f.str("room") == "R":
					if s := summaryOf(f); s != "R "+u+"/1" {
						t.Fatalf("summary %s, want R %s/1", s, u)
					}
					got = append(got, "summary")
				default:
					t.Fatalf("frame %s", b)
				}
			}
		}
		return got
	}
	expect := func(step string, want ...string) {
		t.Helper()
		if got := change(); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: R gave %v, want %v", step, got, want)
		}
	}
	join := func() { c.answerTo(`{"type":"join","id":"j","room":"R"}`, "j", protocol.TypeJoined) }
	leave := func() { c.answerTo(`{"type":"leave","id":"l","room":"R"}`, "l", protocol.TypeLeft) }
	watchR := func() {
		c.answerTo(`{"type":"watch","id":"w","rooms":["R"]}`, "w", protocol.TypeWatching)
		if f := c.expect(protocol.TypeSummary); f.str("room") != "R" {
			t.Fatalf("first summary %v", f)
		}
	}
	unwatch := func() { c.answerTo(`{"type":"unwatch","id":"u","rooms":["R"]}`, "u", protocol.TypeUnwatched) }

	join()
	watchR()
	expect("joined and watched", "event", "summary")
	unwatch()
	expect("joined, unwatched", "event")
	watchR()
	leave()
	expect("watched, left", "summary")
	join()
	expect("watched, joined again", "event", "summary")
	leave()
	unwatch()
	expect("left and unwatched")
	watchR()
	join()
	unwatch()
	leave()
	expect("watched, joined, unwatched, left")
	c.answerTo(`{"type":"unwatch","id":"u"}`, "u", protocol.TypeUnwatched)
	for _, g := range []string{"ellipsis_gateway_joined_rooms", "ellipsis_gateway_watches", "ellipsis_gateway_watched_rooms", "ellipsis_gateway_redis_subscriptions"} {
		testkit.WaitFor(t, 10*time.Second, g+" back to 0", func() bool { return e.metric(g) == 0 })
	}
}
