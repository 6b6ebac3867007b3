package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// bigTypists is the snapshot of state k of a room: 3 typists (of k%4+3)
// with 256-byte names that JSON escapes (about 4.6 KB per summary), so a
// frozen reader's socket fills within a few ticks.
func bigTypists(k int) []protocol.Typist {
	name := strings.Repeat("<", 256)
	out := make([]protocol.Typist, k%4+3)
	for i := range out {
		out[i] = protocol.Typist{User: fmt.Sprintf("u%d-%d", k, i), Name: name}
	}
	return out
}

// A reader that stops reading while its 500 watched rooms churn, for many
// watch intervals, and keeps sending watch frames (of rooms it watches
// already, free): at most one summary per watched room waits in its queue
// (docs/protocol.md, "Order and loss"), it is not closed (the write stall
// is far), and once it reads again each room's last summary is the
// room's final state.
func TestFrozenWatcherOf500ChurningRooms(t *testing.T) {
	t.Parallel()
	const n = 500
	e := newEnv(t, func(c *config.Config) {
		c.WatchInterval = 100 * time.Millisecond
		c.WriteStall = 2 * time.Minute
	})
	e.startWorker("")
	rooms := make([]string, n)
	for i := range rooms {
		rooms[i] = fmt.Sprint("w", i)
	}
	px := newFreezeProxy(t, e.srv.HTTPAddr())
	slow := e.dialURL("ws://"+px.addr()+"/v1/ws?user=alice", nil)
	if acc, ref := slow.watchAll(rooms); len(acc) != n || len(ref) != 0 {
		t.Fatalf("accepted %d, refused %v", len(acc), ref)
	}
	for got := 0; got < n; got++ {
		slow.expectSummary()
	}

	px.freeze()
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() { // every room changes every 50 ms
		defer churn.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			pipe := e.rdb.Pipeline()
			for i, r := range rooms {
				e.setSnapshot(r, bigTypists(k+i)...)
				pipe.Publish(context.Background(), e.names.RoomChannel(r), churnEvent(r, fmt.Sprint("u", k), true, "", ""))
			}
			if _, err := pipe.Exec(context.Background()); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	halt := sync.OnceFunc(func() { close(stop); churn.Wait() })
	t.Cleanup(halt)

	// Blocked: the socket is full and frames wait in the queue. Then 3 s
	// more (30 intervals), with a watch frame of 100 watched rooms every
	// 200 ms.
	testkit.WaitFor(t, 30*time.Second, "the frozen watcher's writer to block", func() bool { return e.blocked("alice") || queuedOf(e, "alice") > 100 })
	var list []string
	for _, r := range rooms[:100] {
		list = append(list, fmt.Sprintf("%q", r))
	}
	watchAgain := `{"type":"watch","id":"again","rooms":[` + strings.Join(list, ",") + `]}`
	sent, most := 0, 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		slow.send(watchAgain)
		sent++
		o, ok := e.outboundOf("alice")
		if !ok || e.metric("ellipsis_gateway_slow_consumer_closes_total") != 0 {
			t.Fatalf("the frozen watcher was closed")
		}
		most = max(most, o.Queued-o.Answers)
	}
	if most > n {
		t.Errorf("%d summaries queued for %d watched rooms (after %d watch frames)", most, n, sent)
	}

	// The end state: room i has (i%3) typists or nobody.
	halt()
	final := map[string]string{}
	pipe := e.rdb.Pipeline()
	for i, r := range rooms {
		var ts []protocol.Typist
		var users []string
		for j := range i % 3 {
			ts = append(ts, protocol.Typist{User: fmt.Sprint("f", j)})
			users = append(users, fmt.Sprint("f", j))
		}
		e.setSnapshot(r, ts...)
		final[r] = r + " " + strings.Join(users, ",") + "/" + fmt.Sprint(len(ts))
		pipe.Publish(context.Background(), e.names.RoomChannel(r), churnEvent(r, "end", false, "", protocol.ReasonStopped))
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a few intervals: the final summaries are queued
	if o, ok := e.outboundOf("alice"); !ok || o.Queued-o.Answers > n {
		t.Fatalf("before the thaw: %+v (open %v)", o, ok)
	}
	px.thaw()
	last := map[string]string{}
	answers := 0
	for answers < sent || !sameMap(last, final) {
		f := slow.read()
		switch f.str("type") {
		case protocol.TypeSummary:
			last[f.str("room")] = summaryOf(f)
		case protocol.TypeWatching:
			answers++
		default:
			t.Fatalf("frame %v", f)
		}
	}
	if v := e.metric("ellipsis_gateway_slow_consumer_closes_total"); v != 0 {
		t.Fatalf("slow_consumer_closes_total = %v", v)
	}
	b, _ := json.Marshal(map[string]int{"watch_frames": sent, "most_summaries_queued": most})
	t.Logf("frozen watcher: %s", b)
}

// queuedOf is how many frames wait in user's one connection's queue.
func queuedOf(e *env, user string) int {
	o, _ := e.outboundOf(user)
	return o.Queued
}

// A frozen watcher of churning rooms is closed by the write stall (counted
// 1013, ellipsis_gateway_write_stall_closes_total), not as a slow
// consumer: its summaries are not answers.
func TestFrozenWatcherIsClosedByTheWriteStall(t *testing.T) {
	t.Parallel()
	const n = 200
	e := newEnv(t, func(c *config.Config) {
		c.WatchInterval = 100 * time.Millisecond
		c.WriteStall = 2 * time.Second
	})
	e.startWorker("")
	rooms := make([]string, n)
	for i := range rooms {
		rooms[i] = fmt.Sprint("ws", i)
	}
	px := newFreezeProxy(t, e.srv.HTTPAddr())
	slow := e.dialURL("ws://"+px.addr()+"/v1/ws?user=alice", nil)
	if acc, _ := slow.watchAll(rooms); len(acc) != n {
		t.Fatalf("accepted %d", len(acc))
	}
	px.freeze()
	for k := 0; len(e.srv.OutboundOf("alice")) > 0; k++ {
		if k > 3000 {
			t.Fatalf("churned for 60 s without the frozen watcher being closed")
		}
		pipe := e.rdb.Pipeline()
		for i, r := range rooms {
			e.setSnapshot(r, bigTypists(k+i)...)
			pipe.Publish(context.Background(), e.names.RoomChannel(r), churnEvent(r, fmt.Sprint("u", k), true, "", ""))
		}
		if _, err := pipe.Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	testkit.WaitFor(t, 10*time.Second, "the close counted as a write stall", func() bool {
		return e.metric("ellipsis_gateway_write_stall_closes_total") == 1 && e.metric(`ellipsis_gateway_closes_total{code="1013"}`) == 1
	})
	if v := e.metric("ellipsis_gateway_slow_consumer_closes_total"); v != 0 {
		t.Fatalf("slow_consumer_closes_total = %v", v)
	}
	testkit.WaitFor(t, 10*time.Second, "its watches to end", func() bool { return e.metric("ellipsis_gateway_watches") == 0 })
}
