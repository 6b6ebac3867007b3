package integration

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// A late refresh behind a stop, with a real worker process frozen by SIGSTOP. Worker 0,
// alone in the queue group, is given alice's refresh (sent before the
// platform's stop) and frozen before it applies it; worker 1 then applies
// the chat service's stop without conn ("message posted"). Resumed with
// SIGCONT, worker 0 applies the held start late: it is dropped
// (superseded, counted on worker 0) and alice never shows after the stop,
// not in an event and not in a snapshot. A start sent a second after the
// stop shows as usual.
func TestFrozenWorkerProcessStaleStartNeverShows(t *testing.T) {
	t.Parallel()
	// A long ttl: alice's first entry must not expire (and be swept by
	// worker 1) while worker 0 is frozen, or the stop would find her hidden
	// already and the test would show nothing.
	ps := newProcStack(t, map[string]string{"ELLIPSIS_TYPING_TTL": "30s"})
	cfg := ps.s.cfg
	n := names.New(cfg.KeyPrefix, cfg.SubjectPrefix)
	const room = "frozen-worker"

	re := subscribeRoomEvents(t, ps.s.rdb, n.RoomChannel(room))
	next, expect := re.next, re.expect

	w0 := ps.startWorker(nil)
	nc := connectNATS(t, cfg.NATSURL)
	aliceStart := func(seq uint64) protocol.Command {
		return protocol.Command{Op: protocol.OpStart, Room: room, User: "alice", Name: "Alice", Conn: "gw:1", Seq: seq, TsMs: time.Now().UnixMilli()}
	}
	publishCommand(t, nc, cfg.SubjectPrefix, aliceStart(1))
	expect(protocol.TypeTypingStart, "", 10*time.Second)

	// Worker 0 is frozen with alice's refresh delivered to it (it is the
	// only member of the queue group), not applied.
	w0.freeze(t)
	publishCommand(t, nc, cfg.SubjectPrefix, aliceStart(2))
	time.Sleep(20 * time.Millisecond) // the stop is published after the start was sent

	// Worker 1 applies the platform's stop. The queue group may hand a copy
	// to the frozen worker (which only holds it), so the stop is published
	// until a live worker has applied it; repeats are harmless (a stop
	// without conn of a hidden user is a noop).
	ps.startWorker(nil)
	publishStopUntilApplied(t, nc, cfg.SubjectPrefix, room, next)

	w0.kill(syscall.SIGCONT)
	waitSuperseded(t, w0)
	if ev, ok := next(time.Second); ok {
		t.Fatalf("after the stop, with worker 0 resumed: %+v, want nothing", ev)
	}
	if snap := snapshotOf(t, nc, n, room); snap.Total != 0 || len(snap.Users) != 0 {
		t.Fatalf("snapshot after the stop: %+v, want nobody", snap)
	}

	// A start sent a second or more after the stop shows as usual.
	time.Sleep(time.Second)
	publishCommand(t, nc, cfg.SubjectPrefix, aliceStart(3))
	expect(protocol.TypeTypingStart, "", 10*time.Second)
}

// roomEvents is a Pub/Sub subscription to one room's channel, read as
// room events (protocol.DecodeRoomEvent).
type roomEvents struct {
	t      *testing.T
	events <-chan *redis.Message
}

// subscribeRoomEvents subscribes channel on rdb, closed at the test's end.
func subscribeRoomEvents(t *testing.T, rdb *redis.Client, channel string) *roomEvents {
	t.Helper()
	ctx := context.Background()
	sub := rdb.Subscribe(ctx, channel)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	return &roomEvents{t: t, events: sub.Channel()}
}

// next returns the next room event within d, or false.
func (re *roomEvents) next(d time.Duration) (protocol.RoomEvent, bool) {
	t, events := re.t, re.events
	select {
	case m := <-events:
		ev, err := protocol.DecodeRoomEvent([]byte(m.Payload))
		if err != nil {
			t.Fatalf("bad room event %q: %v", m.Payload, err)
		}
		return ev, true
	case <-time.After(d):
		return protocol.RoomEvent{}, false
	}
}

// expect fails unless the next event within is alice's typ with reason.
func (re *roomEvents) expect(typ, reason string, within time.Duration) {
	t, next := re.t, re.next
	t.Helper()
	ev, ok := next(within)
	if !ok || ev.Type != typ || ev.User != "alice" || ev.Reason != reason {
		t.Fatalf("want %s %s of alice within %v, got %+v (ok %v)", typ, reason, within, ev, ok)
	}
}

// publishStopUntilApplied publishes the platform's stop of alice (no conn)
// until a live worker has applied it (20 s): the queue group may hand a
// copy to the frozen worker (which only holds it); repeats are harmless (a
// stop without conn of a hidden user is a noop). Any other event fails.
func publishStopUntilApplied(t *testing.T, nc *nats.Conn, subjectPrefix, room string, next func(time.Duration) (protocol.RoomEvent, bool)) {
	t.Helper()
	stopped := false
	for deadline := time.Now().Add(20 * time.Second); !stopped && time.Now().Before(deadline); {
		publishCommand(t, nc, subjectPrefix, protocol.Command{Op: protocol.OpStop, Room: room, User: "alice"})
		if ev, ok := next(time.Second); ok {
			if ev.Type != protocol.TypeTypingStop || ev.User != "alice" || ev.Reason != protocol.ReasonStopped {
				t.Fatalf("while worker 0 is frozen: %+v, want alice's typing_stop (stopped)", ev)
			}
			stopped = true
		}
	}
	if !stopped {
		t.Fatal("no typing_stop of alice from the live worker")
	}
}

// waitSuperseded waits (20 s) until the resumed worker w0 dropped the start
// it held as superseded.
func waitSuperseded(t *testing.T, w0 *proc) {
	t.Helper()
	superseded := func() float64 {
		return metric(t, w0.adminAddr, "ellipsis_worker_commands_total", `op="start"`, `outcome="superseded"`)
	}
	for deadline := time.Now().Add(20 * time.Second); superseded() < 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("worker 0 did not drop the held start as superseded: commands %v",
				metric(t, w0.adminAddr, "ellipsis_worker_commands_total", `op="start"`))
		}
	}
}

// snapshotOf asks the workers who is typing in room over NATS.
func snapshotOf(t *testing.T, nc *nats.Conn, n names.Names, room string) protocol.SnapshotReply {
	t.Helper()
	req, _ := json.Marshal(protocol.SnapshotRequest{V: protocol.Version, Room: room})
	m, err := nc.Request(n.SnapshotSubject(), req, 5*time.Second)
	if err != nil {
		t.Fatalf("snapshot of %q: %v", room, err)
	}
	var r protocol.SnapshotReply
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Error != nil {
		t.Fatalf("snapshot of %q: %s (%v)", room, m.Data, err)
	}
	return r
}
