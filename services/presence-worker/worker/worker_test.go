package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/admin"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The end-to-end contract: commands on NATS in, events on Redis Pub/Sub and
// snapshot replies out, on both backends.

func TestStartPublishesTypingStart(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe("42")
		before := time.Now().UnixMilli()
		e.send(start("42", "alice", "Alice", "gw-a:1", 1))
		r := s.Expect(protocol.TypeTypingStart, "42", "alice", "", waitLong)
		if r.Ev.V != 1 || r.Ev.Name != "Alice" || r.Ev.TTLMs != testTTL.Milliseconds() {
			t.Fatalf("event %s: want v 1, name Alice, ttl_ms %d", r.Raw, testTTL.Milliseconds())
		}
		// ts_ms is Redis TIME; on this machine it is the same clock.
		if r.Ev.TsMs < before-1000 || r.Ev.TsMs > time.Now().UnixMilli()+1000 {
			t.Fatalf("ts_ms %d not near now %d", r.Ev.TsMs, before)
		}
		want := `{"v":1,"type":"typing_start","room":"42","user":"alice","name":"Alice","ttl_ms":1000,"ts_ms":`
		if !strings.HasPrefix(r.Raw, want) {
			t.Fatalf("raw event %s, want prefix %s", r.Raw, want)
		}
		if got := typists(e.snapshot("42")); !slices.Equal(got, []string{"alice/Alice"}) {
			t.Fatalf("snapshot %v", got)
		}
		if n := e.metric("ellipsis_worker_commands_total", map[string]string{"op": "start", "outcome": "started"}); n != 1 {
			t.Fatalf("commands_total{start,started} = %v", n)
		}
		if n := e.metric("ellipsis_worker_events_published_total", map[string]string{"type": "typing_start"}); n != 1 {
			t.Fatalf("events_published_total{typing_start} = %v", n)
		}
	})
}

func TestRefreshBurstIsThrottledButExtends(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe("r")
		first := time.Now()
		var last time.Time
		for i := range 10 { // 10 starts over ~900 ms
			if i > 0 {
				time.Sleep(100 * time.Millisecond)
			}
			last = time.Now()
			e.send(start("r", "alice", "Alice", "c1", uint64(i+1)))
		}
		// Every start was applied between first and sent (send waits for
		// it): about 900 ms, more when a loaded machine stretches the
		// sleeps, which allows more fan-outs.
		sent := time.Now()
		maxStarts := 1 + int(sent.Sub(first)/testThrottle)
		// By now the first start's entry would have expired (ttl 1 s from
		// the first start); the refreshes extended it.
		time.Sleep(time.Until(first.Add(testTTL + 200*time.Millisecond)))
		if got := typists(e.snapshot("r")); !slices.Equal(got, []string{"alice/Alice"}) {
			t.Fatalf("snapshot after the first entry's ttl: %v (refreshes did not extend it)", got)
		}
		var starts []storetest.Received
		var stopEv *storetest.Received
		for _, r := range s.Drain(time.Until(last.Add(expiryBound))) {
			switch r.Ev.Type {
			case protocol.TypeTypingStart:
				starts = append(starts, r)
			case protocol.TypeTypingStop:
				if stopEv != nil {
					t.Fatalf("second stop %s", r.Raw)
				}
				stopEv = &r
			}
		}
		// At most one fan-out per throttle window: 1 + floor(900/300) = 4
		// when the sleeps took 900 ms.
		if len(starts) < 2 || len(starts) > maxStarts {
			t.Fatalf("%d typing_start events for 10 starts over %s, want 2..%d", len(starts), sent.Sub(first), maxStarts)
		}
		for i := 1; i < len(starts); i++ {
			if gap := starts[i].Ev.TsMs - starts[i-1].Ev.TsMs; gap < testThrottle.Milliseconds() {
				t.Fatalf("typing_start %d and %d only %d ms apart (< throttle)", i-1, i, gap)
			}
		}
		if stopEv == nil || stopEv.Ev.Reason != protocol.ReasonExpired {
			t.Fatalf("want one expired stop within ttl+1s of the last refresh, got %+v", stopEv)
		}
		if stopEv.At.Before(last.Add(testTTL - 50*time.Millisecond)) {
			t.Fatalf("expired %s after the last refresh, before its ttl", stopEv.At.Sub(last))
		}
		if n := e.metric("ellipsis_worker_commands_total", map[string]string{"outcome": "throttled"}); n < float64(9-maxStarts) {
			t.Fatalf("commands_total{throttled} = %v, want >= %d", n, 9-maxStarts)
		}
	})
}

func TestStartStopStartIsNotThrottled(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe("r")
		began := time.Now()
		e.send(start("r", "alice", "", "c1", 1), stop("r", "alice", "c1", 2), start("r", "alice", "", "c1", 3))
		if d := time.Since(began); d > 300*time.Millisecond {
			t.Logf("note: the three commands took %s", d)
		}
		s.Expect(protocol.TypeTypingStart, "r", "alice", "", waitLong)
		s.Expect(protocol.TypeTypingStop, "r", "alice", protocol.ReasonStopped, waitLong)
		s.Expect(protocol.TypeTypingStart, "r", "alice", "", waitLong)
		s.ExpectNone(200 * time.Millisecond)
	})
}

func TestStop(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe("r")
		e.send(start("r", "alice", "Alice", "c1", 1))
		s.Expect(protocol.TypeTypingStart, "r", "alice", "", waitLong)
		e.send(stop("r", "alice", "c1", 2))
		r := s.Expect(protocol.TypeTypingStop, "r", "alice", protocol.ReasonStopped, waitLong)
		want := `{"v":1,"type":"typing_stop","room":"r","user":"alice","reason":"stopped","ts_ms":`
		if !strings.HasPrefix(r.Raw, want) {
			t.Fatalf("raw %s", r.Raw)
		}
		if got := typists(e.snapshot("r")); len(got) != 0 {
			t.Fatalf("snapshot after stop: %v", got)
		}
		// A second stop changes nothing visible.
		e.send(stop("r", "alice", "c1", 3))
		s.ExpectNone(200 * time.Millisecond)
		if n := e.metric("ellipsis_worker_commands_total", map[string]string{"op": "stop", "outcome": "noop"}); n != 1 {
			t.Fatalf("commands_total{stop,noop} = %v", n)
		}
		// Nothing of alice is left in Redis but her user hash (seq, rate limit).
		n := e.names
		if c := e.rdb.Exists(context.Background(), n.UsersKey("r"), n.PendingKey("r")).Val(); c != 0 {
			t.Fatalf("%d room keys left after stop", c)
		}
	})
}

func TestMultiDevice(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe("r")
		e.send(start("r", "alice", "Alice", "phone", 1))
		s.Expect(protocol.TypeTypingStart, "r", "alice", "", waitLong)
		e.send(start("r", "alice", "Alice", "laptop", 1)) // a refresh of a visible user: throttled
		e.send(stop("r", "alice", "phone", 2))
		s.ExpectNone(300 * time.Millisecond)
		if got := typists(e.snapshot("r")); !slices.Equal(got, []string{"alice/Alice"}) {
			t.Fatalf("snapshot with the laptop still typing: %v", got)
		}
		e.send(stop("r", "alice", "laptop", 2))
		s.Expect(protocol.TypeTypingStop, "r", "alice", protocol.ReasonStopped, waitLong)
		s.ExpectNone(200 * time.Millisecond)
	})
}

func TestStopWithoutConnClearsEveryConnection(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe("r")
		e.send(start("r", "alice", "", "phone", 1))
		e.send(start("r", "alice", "", "laptop", 7))
		e.send(start("r", "bob", "", "b1", 1))
		s.Expect(protocol.TypeTypingStart, "r", "alice", "", waitLong)
		s.Expect(protocol.TypeTypingStart, "r", "bob", "", waitLong)
		e.send(stop("r", "alice", "", 0)) // the chat service: alice posted her message
		s.Expect(protocol.TypeTypingStop, "r", "alice", protocol.ReasonStopped, waitLong)
		s.ExpectNone(200 * time.Millisecond)
		if got := typists(e.snapshot("r")); !slices.Equal(got, []string{"bob/"}) {
			t.Fatalf("snapshot: %v", got)
		}
		members := e.rdb.ZRange(context.Background(), e.names.UsersKey("r"), 0, -1).Val()
		if !slices.Equal(members, []string{"bob"}) {
			t.Fatalf("room members %v", members)
		}
	})
}

func TestLeave(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe("r")
		e.send(start("r", "alice", "", "c1", 1))
		s.Expect(protocol.TypeTypingStart, "r", "alice", "", waitLong)
		e.send(protocol.Command{V: 1, Op: protocol.OpLeave, Room: "r", User: "alice", Conn: "c1", Seq: 2})
		s.Expect(protocol.TypeTypingStop, "r", "alice", protocol.ReasonLeft, waitLong)
	})
}

func TestDisconnectStopsEveryRoom(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe("r1", "r2", "r3")
		e.send(start("r1", "alice", "", "c1", 1), start("r2", "alice", "", "c1", 2))
		got := map[string]bool{}
		for range 2 {
			r, ok := s.Next(waitLong)
			if !ok || r.Ev.Type != protocol.TypeTypingStart {
				t.Fatalf("want two starts, got %s", r.Raw)
			}
			got[r.Ev.Room] = true
		}
		e.send(protocol.Command{V: 1, Op: protocol.OpDisconnect, Rooms: []string{"r1", "r2", "r3"}, User: "alice", Conn: "c1", Seq: 3})
		stops := map[string]bool{}
		for range 2 {
			r, ok := s.Next(waitLong)
			if !ok || r.Ev.Type != protocol.TypeTypingStop || r.Ev.Reason != protocol.ReasonDisconnected || r.Ev.User != "alice" {
				t.Fatalf("want disconnected stops, got %s", r.Raw)
			}
			stops[r.Ev.Room] = true
		}
		if !stops["r1"] || !stops["r2"] {
			t.Fatalf("stops in %v, want r1 and r2", stops)
		}
		s.ExpectNone(200 * time.Millisecond) // nothing for r3, where alice never typed
		if n := e.metric("ellipsis_worker_commands_total", map[string]string{"op": "disconnect", "outcome": "stopped"}); n != 1 {
			t.Fatalf("commands_total{disconnect,stopped} = %v", n)
		}
		// A start from before the disconnect, arriving late, stays ignored.
		e.send(start("r1", "alice", "", "c1", 2))
		s.ExpectNone(200 * time.Millisecond)
	})
}

func TestStaleSeqIsIgnored(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe("a", "b")
		// start seq 2, then a late stop seq 1: still typing.
		e.send(start("a", "alice", "", "c1", 2), stop("a", "alice", "c1", 1))
		s.Expect(protocol.TypeTypingStart, "a", "alice", "", waitLong)
		s.ExpectNone(200 * time.Millisecond)
		if got := typists(e.snapshot("a")); !slices.Equal(got, []string{"alice/"}) {
			t.Fatalf("room a after a stale stop: %v", got)
		}
		// stop seq 2, then a late start seq 1: not typing.
		e.send(stop("b", "alice", "c1", 2), start("b", "alice", "", "c1", 1))
		s.ExpectNone(200 * time.Millisecond)
		if got := typists(e.snapshot("b")); len(got) != 0 {
			t.Fatalf("room b after a stale start: %v", got)
		}
		if n := e.metric("ellipsis_worker_commands_total", map[string]string{"outcome": "stale"}); n != 2 {
			t.Fatalf("commands_total{stale} = %v", n)
		}
	})
}

// With two workers the queue group splits a connection's commands, so the
// order of application is anyone's; seq still decides the end state.
func TestStaleSeqAcrossWorkers(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		e.startWorker()
		for i := range 10 {
			ra, rb := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
			e.send(start(ra, "alice", "", "c1", 2), stop(ra, "alice", "c1", 1), stop(rb, "alice", "c1", 2), start(rb, "alice", "", "c1", 1))
			if got := typists(e.snapshot(ra)); !slices.Equal(got, []string{"alice/"}) {
				t.Fatalf("%s: %v, want alice typing", ra, got)
			}
			if got := typists(e.snapshot(rb)); len(got) != 0 {
				t.Fatalf("%s: %v, want nobody", rb, got)
			}
		}
	})
}

func TestExpiryPushesOneStopWithTwoSweepers(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		e.startWorker()
		s := e.subscribe("r1", "r2")
		sent := time.Now()
		e.send(start("r1", "alice", "Alice", "a1", 1), start("r1", "bob", "", "b1", 1), start("r1", "bob", "", "b2", 1), start("r2", "café ☕", "", "x", 1))
		want := map[string]bool{"r1/alice": true, "r1/bob": true, "r2/café ☕": true}
		startsSeen, stopsSeen := map[string]int{}, map[string]int{}
		deadline := sent.Add(expiryBound)
		for len(stopsSeen) < len(want) {
			r, ok := s.Next(time.Until(deadline))
			if !ok {
				t.Fatalf("expired stops seen %v within ttl+1s, want %v", stopsSeen, want)
			}
			k := r.Ev.Room + "/" + r.Ev.User
			if !want[k] {
				t.Fatalf("event for %s: %s", k, r.Raw)
			}
			switch r.Ev.Type {
			case protocol.TypeTypingStart:
				startsSeen[k]++
			case protocol.TypeTypingStop:
				if r.Ev.Reason != protocol.ReasonExpired {
					t.Fatalf("stop %s, want reason expired", r.Raw)
				}
				stopsSeen[k]++
				if stopsSeen[k] > 1 {
					t.Fatalf("second expired stop for %s", k)
				}
				if d := r.At.Sub(sent); d < testTTL-50*time.Millisecond {
					t.Fatalf("%s expired after %s, before its ttl", k, d)
				}
			}
		}
		// Several sweep intervals later, still exactly one stop each.
		s.ExpectNone(5 * testSweep)
		if n := e.metric("ellipsis_worker_expired_stops_total", nil); n != 3 {
			t.Fatalf("expired_stops_total over both workers = %v, want 3", n)
		}
		if n := e.metric("ellipsis_worker_sweep_lag_seconds", nil); n < 2 {
			t.Fatalf("sweep_lag_seconds has %v samples", n)
		}
		// The rooms are gone from the sweep index and their sets are empty.
		for _, k := range e.names.SweepKeys() {
			if c := e.rdb.ZCard(context.Background(), k).Val(); c != 0 {
				t.Fatalf("sweep bucket %s holds %d rooms", k, c)
			}
		}
	})
}

func TestSnapshot(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		// No sweeper in time: an expired entry stays in Redis, and the
		// snapshot must leave it out by its score.
		e.startWorkerWith(Options{sweepInterval: time.Hour})
		e.send(start("r", "carol", "Carol", "c", 1))
		users := func() int64 { return e.rdb.ZCard(context.Background(), e.names.UsersKey("r")).Val() }
		e.eventually("carol's start applied", func() bool { return users() == 1 })
		carolDone := time.Now() // applied: her entry expires before carolDone + ttl
		// Bob and alice get a service ttl of 30 ttls, so that however late
		// a loaded machine serves the snapshot, they are live and carol is
		// the only entry that expired.
		long := func(c protocol.Command) protocol.Command { c.TTLMs = 30 * testTTL.Milliseconds(); return c }
		e.send(long(start("r", "bob", "", "b", 1)), long(start("r", "alice", "Alice", "a1", 1)), long(start("r", "alice", "Alice", "a2", 1)))
		e.eventually("bob's and alice's starts applied", func() bool { return users() == 3 })
		time.Sleep(time.Until(carolDone.Add(testTTL + 50*time.Millisecond)))
		if c := e.rdb.ZCard(context.Background(), e.names.UsersKey("r")).Val(); c != 3 {
			t.Fatalf("room holds %d users, want 3 (carol's expired entry unswept)", c)
		}
		r := e.snapshot("r")
		if r.V != 1 || r.Room != "r" || r.Error != nil {
			t.Fatalf("reply %+v", r)
		}
		if got := typists(r); !slices.Equal(got, []string{"alice/Alice", "bob/"}) {
			t.Fatalf("snapshot %v, want alice/Alice and bob/ (sorted, carol expired)", got)
		}
		if got := typists(e.snapshot("empty")); len(got) != 0 {
			t.Fatalf("empty room: %v", got)
		}
		// Raw reply shape of an empty room: users present as [].
		if raw := mustRequest(t, e, `{"v":1,"room":"empty"}`); string(raw) != `{"v":1,"room":"empty","users":[],"total":0}` {
			t.Fatalf("raw empty reply %s", raw)
		}
		for _, bad := range []string{`garbage`, `{"v":2,"room":"r"}`, `{"v":1}`, `{"v":1,"room":"` + strings.Repeat("x", 300) + `"}`} {
			msg, err := e.nc.Request(e.names.SnapshotSubject(), []byte(bad), waitLong)
			if err != nil {
				t.Fatal(err)
			}
			_, err = protocol.DecodeSnapshotReply(msg.Data)
			var re *protocol.ReplyError
			if !errors.As(err, &re) || re.Code != protocol.CodeBadRequest || re.Message == "" {
				t.Fatalf("request %.40s: reply %s, want bad_request", bad, msg.Data)
			}
			if !strings.HasPrefix(string(msg.Data), `{"v":1,"error":{"code":"bad_request","message":`) {
				t.Fatalf("raw error reply %s", msg.Data)
			}
		}
	})
}

func TestInvalidPayloadsAreCountedAndDropped(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe("r")
		rooms := make([]string, 5000)
		for i := range rooms {
			rooms[i] = fmt.Sprintf("room-%d", i)
		}
		many, _ := json.Marshal(protocol.Command{V: 1, Op: "disconnect", Rooms: rooms, User: "u", Conn: "c"})
		payloads := map[string][]byte{
			"garbage":      []byte("\x00\xffnot json at all"),
			"empty":        nil,
			"array":        []byte(`[1,2,3]`),
			"wrong v":      []byte(`{"v":2,"op":"start","room":"r","user":"u","conn":"c"}`),
			"no v":         []byte(`{"op":"start","room":"r","user":"u","conn":"c"}`),
			"no user":      []byte(`{"v":1,"op":"start","room":"r","conn":"c"}`),
			"no room":      []byte(`{"v":1,"op":"stop","user":"u","conn":"c"}`),
			"no conn":      []byte(`{"v":1,"op":"start","room":"r","user":"u"}`),
			"unknown op":   []byte(`{"v":1,"op":"dance","room":"r","user":"u","conn":"c"}`),
			"no op":        []byte(`{"v":1,"room":"r","user":"u","conn":"c"}`),
			"5000 rooms":   many,
			"control char": []byte(`{"v":1,"op":"start","room":"r\u0007","user":"u","conn":"c"}`),
			"bad rooms[1]": []byte(`{"v":1,"op":"disconnect","rooms":["a",""],"user":"u","conn":"c"}`),
			"huge name":    []byte(`{"v":1,"op":"start","room":"r","user":"u","conn":"c","name":"` + strings.Repeat("n", 300) + `"}`),
		}
		var all [][]byte
		for _, p := range payloads {
			all = append(all, p)
		}
		e.sendRaw(all...)
		wantField := map[string]float64{"json": 3, "v": 2, "user": 1, "room": 2, "conn": 1, "op": 2, "rooms": 2, "name": 1}
		for f, n := range wantField {
			if got := e.metric("ellipsis_worker_invalid_payloads_total", map[string]string{"field": f}); got != n {
				t.Errorf("invalid_payloads_total{field=%q} = %v, want %v", f, got, n)
			}
		}
		if got := e.metric("ellipsis_worker_commands_total", map[string]string{"outcome": "invalid"}); got != float64(len(payloads)) {
			t.Errorf("commands_total{invalid} = %v, want %d", got, len(payloads))
		}
		s.ExpectNone(100 * time.Millisecond)
		// The worker keeps working.
		e.send(start("r", "u", "", "c", 1))
		s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
	})
}

// The ids of docs/protocol.md ("Terms and ids") work end to end, and distinct ids never
// share keys, even ids that look like another's encoding.
func TestIDsEndToEnd(t *testing.T) {
	ids := []string{"42", "room:42", "!abc:matrix.org", "a*b?c[d]", "{x}", "café ☕", "a b",
		// look-alikes of the above after encoding or tag parsing:
		"x", "a%20b", "a%2520b", "room%3A42", "%7Bx%7D", "a\\b", `q"uote`}
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe(ids...)
		var cmds []protocol.Command
		for i, id := range ids {
			// In room id, the typist is user id, from connection "id:i".
			cmds = append(cmds, start(id, id, "N "+id, fmt.Sprintf("%s:%d", id, i), 1))
		}
		sent := time.Now()
		e.send(cmds...)
		seen := map[string]bool{}
		for range ids {
			r, ok := s.Next(waitLong)
			if !ok || r.Ev.Type != protocol.TypeTypingStart || r.Ev.User != r.Ev.Room || r.Ev.Name != "N "+r.Ev.Room {
				t.Fatalf("start event %s", r.Raw)
			}
			seen[r.Ev.Room] = true
		}
		if len(seen) != len(ids) {
			t.Fatalf("starts for %d rooms, want %d", len(seen), len(ids))
		}
		for _, id := range ids {
			if got := typists(e.snapshot(id)); !slices.Equal(got, []string{id + "/N " + id}) {
				t.Fatalf("snapshot of %q: %v", id, got)
			}
		}
		// Every key holds one room's hash tag, and each room has the same
		// set of keys: the users set and the typist's user hash.
		perRoom := map[string]int{}
		iter := e.rdb.Scan(context.Background(), 0, e.cfg.KeyPrefix+"*", 1000).Iterator()
		for iter.Next(context.Background()) {
			k := iter.Val()
			if strings.HasPrefix(k, e.cfg.KeyPrefix+"typing:sweep:{") {
				continue // a sweep bucket
			}
			i, j := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
			if i < 0 || j < i {
				t.Fatalf("key %q has no hash tag", k)
			}
			room, err := names.Dec(k[i+1 : j])
			if err != nil {
				t.Fatalf("key %q: hash tag: %v", k, err)
			}
			perRoom[room]++
		}
		for _, id := range ids {
			if perRoom[id] != 2 {
				t.Fatalf("room %q has %d keys, want 2 (%v)", id, perRoom[id], perRoom)
			}
		}
		// Expiry, built in Lua from enc(user): exact users and rooms.
		stops := map[string]bool{}
		for range ids {
			r, ok := s.Next(time.Until(sent.Add(expiryBound)))
			if !ok || r.Ev.Type != protocol.TypeTypingStop || r.Ev.Reason != protocol.ReasonExpired || r.Ev.User != r.Ev.Room {
				t.Fatalf("expired stop event %s (ok %v)", r.Raw, ok)
			}
			stops[r.Ev.Room] = true
		}
		if len(stops) != len(ids) {
			t.Fatalf("expired stops for %d rooms, want %d", len(stops), len(ids))
		}
	})
}

func TestAdminEndpoints(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be, func(c *config.Config) { c.AdminAddr = "127.0.0.1:0" })
		w := e.startWorker()
		base := "http://" + w.AdminAddr()
		if w.AdminAddr() == "" || strings.HasSuffix(w.AdminAddr(), ":0") {
			t.Fatalf("AdminAddr %q", w.AdminAddr())
		}
		code, body := httpGet(t, base+"/healthz")
		if code != 200 || strings.TrimSpace(body) != `{"status":"ok"}` {
			t.Fatalf("healthz %d %s", code, body)
		}
		code, body = waitReady(t, base)
		if code != 200 || strings.TrimSpace(body) != `{"ready":true,"checks":{"nats":"ok","redis":"ok"}}` {
			t.Fatalf("readyz %d %s", code, body)
		}
		e.send(start("r", "u", "", "c", 1))
		code, body = httpGet(t, base+"/metrics")
		if code != 200 || !strings.Contains(body, `ellipsis_worker_commands_total{op="start",outcome="started"} 1`) ||
			!strings.Contains(body, "ellipsis_worker_script_duration_seconds_bucket") ||
			!strings.Contains(body, `ellipsis_ready{service="presence-worker"} 1`) {
			t.Fatalf("metrics %d:\n%.2000s", code, body)
		}
		if err := w.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		// ellipsis_ready leaves the registry with the worker, so another
		// worker on the same registry can export its own.
		mfs, err := w.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "ellipsis_ready" {
				t.Fatalf("ellipsis_ready still registered after Shutdown: %v", mf)
			}
		}
		if _, err := http.Get(base + "/healthz"); err == nil {
			t.Fatal("admin listener still serving after Shutdown")
		}
	})
}

func TestReadyzNamesWhatIsDown(t *testing.T) {
	requireServices(t)
	t.Parallel()
	for _, tc := range []struct {
		name, down string
		mod        func(*config.Config)
	}{
		{"redis down", "redis", func(c *config.Config) { c.RedisURL = "redis://127.0.0.1:1" }},
		{"nats down", "nats", func(c *config.Config) { c.NATSURL = "nats://127.0.0.1:1" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, storetest.Backend{Name: "redis", PubSub: storetest.PubSub}, func(c *config.Config) { c.AdminAddr = "127.0.0.1:0" })
			w := e.startWorker(tc.mod) // Start succeeds with a backend down
			// NATS connects in the background after Start (natsconn.Connect
			// returns at once): until it has, "nats" may be down beside
			// the backend this case took down.
			var (
				code int
				body string
				v    admin.Readiness
			)
			for deadline := time.Now().Add(waitLong); ; time.Sleep(20 * time.Millisecond) {
				code, body = httpGet(t, "http://"+w.AdminAddr()+"/readyz")
				v = admin.Readiness{}
				if err := json.Unmarshal([]byte(body), &v); err != nil {
					t.Fatalf("readyz %d %s: %v", code, body, err)
				}
				if len(v.Down) != 2 || tc.down == "nats" || time.Now().After(deadline) {
					break
				}
				if !slices.Equal(v.Down, []string{"nats", tc.down}) {
					t.Fatalf("readyz %d %s, want down [nats %s] while NATS connects", code, body, tc.down)
				}
			}
			if code != 503 || v.Ready || len(v.Down) != 1 || v.Down[0] != tc.down ||
				v.Checks[tc.down] == "" || v.Checks[tc.down] == "ok" {
				t.Fatalf("readyz %d %s, want 503 naming %s only", code, body, tc.down)
			}
		})
	}
}

// TestReadyzWhileStarting: before Start has finished, /readyz says
// "start" (what is not ready yet), never "shutdown".
func TestReadyzWhileStarting(t *testing.T) {
	requireServices(t)
	t.Parallel()
	e := newEnv(t, storetest.Backend{Name: "redis", PubSub: storetest.PubSub}, func(c *config.Config) { c.AdminAddr = "127.0.0.1:0" })
	w := e.startWorker()
	if code, body := waitReady(t, "http://"+w.AdminAddr()); code != 200 {
		t.Fatalf("readyz once started %d %s", code, body)
	}
	w.ready.Store(false) // as between startAdmin and the end of Start
	code, body := httpGet(t, "http://"+w.AdminAddr()+"/readyz")
	var v admin.Readiness
	if err := json.Unmarshal([]byte(body), &v); err != nil || code != 503 || len(v.Down) != 1 || v.Down[0] != admin.StartCheck || v.Checks["nats"] != "ok" {
		t.Fatalf("readyz while starting %d %s, want 503 down [start]", code, body)
	}
	w.ready.Store(true)
	if code, body := httpGet(t, "http://"+w.AdminAddr()+"/readyz"); code != 200 {
		t.Fatalf("readyz once started %d %s", code, body)
	}
}

func TestRedisDownCommandsFailAndSnapshotsSayUnavailable(t *testing.T) {
	requireServices(t)
	t.Parallel()
	e := newEnv(t, storetest.Backend{Name: "redis", PubSub: storetest.PubSub}, func(c *config.Config) { c.RedisURL = "redis://127.0.0.1:1" })
	e.startWorker()
	e.send(start("r", "u", "", "c", 1)) // retried with backoff, then dropped
	if n := e.metric("ellipsis_worker_commands_total", map[string]string{"op": "start", "outcome": "error"}); n != 1 {
		t.Fatalf("commands_total{start,error} = %v", n)
	}
	if n := e.metric("ellipsis_worker_redis_errors_total", nil); n < store.RedisAttempts {
		t.Fatalf("redis_errors_total = %v, want >= %d (one per attempt)", n, store.RedisAttempts)
	}
	_, err := protocol.DecodeSnapshotReply(mustRequest(t, e, `{"v":1,"room":"r"}`))
	var re *protocol.ReplyError
	if !errors.As(err, &re) || re.Code != protocol.CodeUnavailable {
		t.Fatalf("snapshot with Redis down: %v, want unavailable", err)
	}
}

func mustRequest(t *testing.T, e *env, req string) []byte {
	t.Helper()
	msg, err := e.nc.Request(e.names.SnapshotSubject(), []byte(req), waitLong)
	if err != nil {
		t.Fatal(err)
	}
	return msg.Data
}

// waitReady polls base's /readyz until it answers 200 (at most waitLong)
// and returns its last answer. Start returns before the NATS status has
// been read: NATS connects in the background (shared/natsconn.Connect)
// and readiness reports the status observed by a poll every 100 ms, so
// on a loaded machine /readyz can say "nats": "not connected
// (CONNECTING)" just after Start. Until ready, every answer must be a
// 503 that names only nats as down.
func waitReady(t *testing.T, base string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		code, body := httpGet(t, base+"/readyz")
		if code == 200 || time.Now().After(deadline) {
			return code, body
		}
		var v admin.Readiness
		if err := json.Unmarshal([]byte(body), &v); err != nil || code != 503 || !slices.Equal(v.Down, []string{"nats"}) {
			t.Fatalf("readyz just after Start %d %s, want 200, or 503 down [nats] while NATS connects", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); strings.HasSuffix(u, "z") && ct != "application/json" {
		t.Fatalf("GET %s: Content-Type %q", u, ct)
	}
	return resp.StatusCode, string(b)
}

func TestLifecycle(t *testing.T) {
	requireServices(t)
	t.Parallel()
	e := newEnv(t, storetest.Backend{Name: "redis", PubSub: storetest.PubSub})
	cfg := e.cfg

	// Shutdown before Start, twice; Start afterwards is refused.
	w, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Shutdown: %v, want ErrClosed", err)
	}

	// Start twice is refused; Shutdown twice is fine.
	w2 := e.startWorker()
	if err := w2.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}

	// In-flight commands are finished on Shutdown.
	var ps [][]byte
	for i := range 300 {
		b, _ := json.Marshal(start(fmt.Sprintf("r%d", i%7), fmt.Sprintf("u%d", i), "", fmt.Sprintf("c%d", i), 1))
		ps = append(ps, b)
	}
	e.publishRaw(ps...)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := w2.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := w2.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if n := e.processed(); n != 300 {
		t.Fatalf("%v of 300 published commands processed before Shutdown returned", n)
	}
	if n := e.metric("ellipsis_worker_commands_total", map[string]string{"outcome": "started"}); n != 300 {
		t.Fatalf("%v commands started, want 300", n)
	}
	if err := w2.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Shutdown: %v", err)
	}
}

func TestPrivateRegistry(t *testing.T) {
	cfg := config.Dev()
	w, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if n := storetest.GatherSum(t, w.reg, "go_goroutines", nil); n == 0 {
		t.Fatal("a private registry has no Go runtime metrics")
	}
	// Two workers on one shared registry share the collectors.
	reg := prometheus.NewRegistry()
	for range 2 {
		if _, err := New(Options{Config: cfg, Registry: reg}); err != nil {
			t.Fatalf("second worker on a shared registry: %v", err)
		}
	}
	if n := storetest.GatherSum(t, reg, "go_goroutines", nil); n != 0 {
		t.Fatal("a shared registry got the Go collector from the worker")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	cfg := config.Dev()
	cfg.TypingTTL = time.Second
	cfg.TypingThrottle = 2 * time.Second
	cfg.WorkerShards = -1
	cfg.RedisURL = "http://x"
	cfg.SubjectPrefix = "a.b"
	cfg.SweepInterval = 30 * time.Second // past ttl + 1 s (docs/protocol.md, "Timing")
	_, err := New(Options{Config: cfg})
	if err == nil {
		t.Fatal("New accepted a bad config")
	}
	for _, want := range []string{"ELLIPSIS_TYPING_THROTTLE", "ELLIPSIS_WORKER_SHARDS", "ELLIPSIS_SUBJECT_PREFIX", "ELLIPSIS_SWEEP_INTERVAL: must be 10ms..500ms, got 30s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	cfg = config.Dev()
	cfg.RedisURL = "http://x"
	if _, err := New(Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "ELLIPSIS_REDIS_URL") {
		t.Fatalf("bad Redis URL: %v", err)
	}
	// The worker needs no JWT secret even when auth is jwt.
	cfg = config.Default()
	if _, err := New(Options{Config: cfg}); err != nil {
		t.Fatalf("default config: %v", err)
	}
}
