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
