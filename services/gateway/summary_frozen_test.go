package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// A reader that stops reading while its summary-mode rooms churn
// (docs/protocol.md, "Summary mode", "Order and loss"): its unwritten
// summary of a room is replaced by the next one, so at most one per room
// waits; it is not closed (no 1013: summaries are not answers, and the
// write stall is far); half its rooms leave summary mode while it is
// frozen and go on churning as events; once it reads again every room's
// state is exact.
func TestFrozenReaderInSummaryRooms(t *testing.T) {
	t.Parallel()
	const nRooms, nUsers = 20, 20
	e := newEnv(t, func(c *config.Config) {
		c.RoomSummaryMembers = 3
		c.RoomSummaryInterval = 100 * time.Millisecond
		c.WriteStall = 2 * time.Minute
	})
	e.startWorker("")
	name := strings.Repeat("<", 256) // 1.5 KB per typist once escaped
	truth := &churnTruth{e: e, name: name, typing: map[string]map[string]bool{}}
	rooms := make([]string, nRooms)
	for i := range rooms {
		rooms[i] = fmt.Sprint("s", i)
		e.setSnapshot(rooms[i])
	}
	px := newFreezeProxy(t, e.srv.HTTPAddr())
	slow := e.dialURL("ws://"+px.addr()+"/v1/ws?user=alice", nil)
	others := make([]*client, 3)
	for i := range others {
		others[i] = e.dial(fmt.Sprint("m", i), "")
	}
	for _, r := range rooms {
		slow.join(r)
		for _, c := range others {
			c.join(r)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "every room in summary mode", func() bool { return e.metric("ellipsis_gateway_summary_rooms") == nRooms })
	viewers := make([]*viewer, len(others))
	for i, c := range others {
		viewers[i] = watch(c.ws)
	}

	px.freeze()
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() { // every room: one user toggles every 20 ms
		defer churn.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			pipe := e.rdb.Pipeline()
			for i, r := range rooms {
				u := fmt.Sprint("u", (k*7+i)%nUsers)
				on := truth.count(r) < nUsers/2 || k%3 == 0
				truth.set(r, u, on)
				reason := protocol.ReasonStopped
				pipe.Publish(context.Background(), e.names.RoomChannel(r), churnEvent(r, u, on, name, reason))
			}
			if _, err := pipe.Exec(context.Background()); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	halt := sync.OnceFunc(func() { close(stop); churn.Wait() })
	t.Cleanup(halt)

	testkit.WaitFor(t, 30*time.Second, "the frozen reader's writer to block", func() bool {
		for until := time.Now().Add(time.Second); time.Now().Before(until); time.Sleep(10 * time.Millisecond) {
			if queuedOf(e, "alice") == 0 {
				return false
			}
		}
		return true
	})
	most := 0
	check := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			o, ok := e.outboundOf("alice")
			if !ok {
				t.Fatalf("the frozen reader was closed (closes_total{1013} %v)", e.metric(`ellipsis_gateway_closes_total{code="1013"}`))
			}
			most = max(most, o.Queued-o.Answers)
		}
	}
	check(3 * time.Second) // 30 intervals
	if most > nRooms {
		t.Errorf("%d frames other than answers queued for %d summary rooms", most, nRooms)
	}
	// Half the rooms leave summary mode (2 members < 3) while it is frozen.
	for _, c := range others[1:] {
		for _, r := range rooms[:nRooms/2] {
			c.send(map[string]string{"type": "leave", "room": r, "id": "l-" + r})
		}
	}
	testkit.WaitFor(t, 10*time.Second, "half the rooms back to events", func() bool { return e.metric("ellipsis_gateway_summary_rooms") == nRooms/2 })
	check(2 * time.Second)
	if n := e.metric("ellipsis_gateway_slow_consumer_closes_total"); n != 0 {
		t.Fatalf("the frozen reader was closed as a slow consumer (%v)", n) // still listed while its close waits on the stalled write
	}

	halt()
	time.Sleep(500 * time.Millisecond) // the last summaries are queued
	if v := e.metric(`ellipsis_gateway_closes_total{code="1013"}`); v != 0 {
		t.Fatalf("closes_total{1013} = %v while frozen", v)
	}
	px.thaw()
	alice := watch(slow.ws)
	want := truth.state()
	testkit.WaitFor(t, 60*time.Second, "the thawed reader's exact final state", func() bool {
		alice.alive(t, "alice")
		got := alice.state()
		for _, r := range rooms {
			if got[r] != want[r] {
				return false
			}
		}
		return true
	})
	for i, v := range viewers {
		for j, r := range rooms {
			if i == 0 || j >= nRooms/2 { // the others left the first half
				testkit.WaitFor(t, 30*time.Second, "member's exact state of "+r, func() bool { return v.state()[r] == want[r] })
			}
		}
	}
	t.Logf("most frames queued (not answers): %d", most)
}

// Rooms that switch in and out of summary mode again and again (other
// users join and leave them) around a frozen reader: each switch back to
// events brings it one last summary of the room, which is a summary, not
// an answer (docs/protocol.md, "Order and loss": "these summaries are not
// answers: a reader that stopped reading is closed by the write stall"),
// so it is not closed with 1013 at ELLIPSIS_OUTBOUND_QUEUE switches, and
// it still ends exact.
func TestFrozenReaderInOscillatingSummaryRooms(t *testing.T) {
	t.Parallel()
	const nRooms = 10
	e := newEnv(t, func(c *config.Config) {
		c.RoomSummaryMembers = 3
		c.RoomSummaryInterval = 50 * time.Millisecond
		c.WriteStall = 2 * time.Minute
		c.OutboundQueue = 32 // 32 answers: a few switches of 10 rooms
		c.InboundRate, c.InboundBurst = 1000, 1000
		c.SnapshotRate, c.SnapshotBurst = 1000, 1000
	})
	e.startWorker("")
	truth := &churnTruth{e: e, name: strings.Repeat("<", 256), typing: map[string]map[string]bool{}}
	rooms := make([]string, nRooms)
	for i := range rooms {
		rooms[i] = fmt.Sprint("o", i)
		e.setSnapshot(rooms[i])
	}
	px := newFreezeProxy(t, e.srv.HTTPAddr())
	slow := e.dialURL("ws://"+px.addr()+"/v1/ws?user=alice", nil)
	m := []*client{e.dial("m0", ""), e.dial("m1", ""), e.dial("m2", "")}
	for _, r := range rooms {
		slow.join(r)
		m[0].join(r)
		m[1].join(r)
	}
	// Fill the frozen reader's socket first: big events in every room.
	px.freeze()
	k := 0
	churnOnce := func() {
		pipe := e.rdb.Pipeline()
		for i, r := range rooms {
			u := fmt.Sprint("u", (k*3+i)%12)
			on := k%4 != 3
			truth.set(r, u, on)
			pipe.Publish(context.Background(), e.names.RoomChannel(r), churnEvent(r, u, on, truth.name, protocol.ReasonStopped))
		}
		k++
		if _, err := pipe.Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "the frozen reader's writer to block", func() bool {
		churnOnce()
		return e.blocked("alice")
	})
	for range 400 { // 6 MB more: past any socket buffer the kernel may grow
		churnOnce()
	}
	testkit.WaitFor(t, 30*time.Second, "the frozen reader's writer to block for good", func() bool { return e.blocked("alice") })
	m0 := watch(m[0].ws) // m0 reads all along
	// 6 cycles over the 10 rooms: m2 joins (4 members > 3: summary mode),
	// m2 and m1 leave (2 < 3, 90 % of 3: back to events at the next
	// interval, with one last summary), m1 joins again; 60 last summaries
	// in all, with events between, to a reader with room for 32 answers.
	for cycle := range 6 {
		for _, r := range rooms {
			m[2].answerTo(`{"type":"join","id":"j","room":"`+r+`"}`, "j", protocol.TypeJoined)
		}
		testkit.WaitFor(t, 10*time.Second, "every room in summary mode", func() bool { return e.metric("ellipsis_gateway_summary_rooms") == nRooms })
		churnOnce()
		time.Sleep(150 * time.Millisecond) // summaries of the rooms
		for _, r := range rooms {
			m[2].answerTo(`{"type":"leave","id":"l","room":"`+r+`"}`, "l", protocol.TypeLeft)
			m[1].answerTo(`{"type":"leave","id":"l","room":"`+r+`"}`, "l", protocol.TypeLeft)
		}
		testkit.WaitFor(t, 10*time.Second, "every room back to events", func() bool { return e.metric("ellipsis_gateway_summary_rooms") == 0 })
		churnOnce()
		for _, r := range rooms {
			m[1].answerTo(`{"type":"join","id":"j","room":"`+r+`"}`, "j", protocol.TypeJoined)
		}
		m0.alive(t, "m0")
		if n := e.metric("ellipsis_gateway_slow_consumer_closes_total"); n != 0 {
			o, _ := e.outboundOf("alice")
			t.Fatalf("cycle %d: the frozen reader was closed as a slow consumer (%v closes; outbound %+v)", cycle, n, o)
		}
	}
	// A final state no earlier one had: every churned user stops, fin
	// starts.
	pipe := e.rdb.Pipeline()
	for _, r := range rooms {
		for u := range 12 {
			user := fmt.Sprint("u", u)
			truth.set(r, user, false)
			pipe.Publish(context.Background(), e.names.RoomChannel(r), churnEvent(r, user, false, "", protocol.ReasonStopped))
		}
		truth.set(r, "fin", true)
		pipe.Publish(context.Background(), e.names.RoomChannel(r), churnEvent(r, "fin", true, "", ""))
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	px.thaw()
	alice := watch(slow.ws)
	want := truth.state()
	testkit.WaitFor(t, 60*time.Second, "the thawed reader's exact final state", func() bool {
		alice.alive(t, "alice")
		got := alice.state()
		for _, r := range rooms {
			if got[r] != want[r] {
				return false
			}
		}
		return true
	})
}
