package session

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// lateRooms is fakeRooms whose unasked snapshot push (SyncAsked) starts
// late: it waits until the test lets it go, then does what hub.Hub.Sync
// does for the member's membership of that moment (the room joined
// again): it runs commit after the snapshot was read and, unless commit
// refused, queues its snapshot, here a stale one (a typist "ghost" that
// the new join's snapshot does not list: read before the new
// membership's subscription). Each push's error goes to ended.
type lateRooms struct {
	fakeRooms
	asked chan struct{} // a push began
	start chan struct{} // closed by the test: the push goes on
	ended chan error    // a push returned
}

func (r *lateRooms) Sync(ctx context.Context, kind hub.SyncKind, room string, m hub.Member, v *filter.View, id string, commit func() bool) error {
	if kind != hub.SyncAsked {
		return r.fakeRooms.Sync(ctx, kind, room, m, v, id, commit)
	}
	r.asked <- struct{}{}
	<-r.start
	err := func() error {
		if commit != nil && !commit() {
			return hub.ErrAborted
		}
		f, _ := protocol.Encode(protocol.NewTypingSnapshot(room, protocol.Snapshot{Users: []protocol.Typist{{User: "ghost"}}}, ""))
		m.SendSnapshot(room, f)
		return nil
	}()
	r.ended <- err
	return err
}

// A snapshot push of a room overtaken by a leave and a new join of the
// room queues nothing: the new join's snapshot is the room's state, and
// no older one is written after it (writer.pushAwaited).
func TestPushOvertakenByRejoinQueuesNothing(t *testing.T) {
	rooms := &lateRooms{asked: make(chan struct{}, 1), start: make(chan struct{}), ended: make(chan error, 1)}
	c := newTestConn(t, rooms)
	c.cfg.OutboundQueue = 4 // high-water mark 2: the joined frame and u1's event; room for 4 answers
	c.cfg.ConflateRoomCap = 2
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "j1"})
	for _, u := range []string{"u1", "u2", "u3", "u4"} { // u4 is over the cap: a push
		c.SendEvent("r", u, []byte(`{"type":"typing_start","room":"r","user":"`+u+`"}`))
	}
	select {
	case <-rooms.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot push asked within 10 s")
	}
	c.leave(protocol.ClientFrame{Type: protocol.TypeLeave, Room: "r", ID: "l"})
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "j2"})
	close(rooms.start)
	select {
	case err := <-rooms.ended:
		if err != hub.ErrAborted {
			t.Fatalf("the overtaken push returned %v, want hub.ErrAborted (its commit refused)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the push did not return within 10 s")
	}
	var got []string
	for _, f := range c.drainQueued() {
		got = append(got, f)
		if strings.Contains(f, "ghost") {
			t.Fatalf("the overtaken push's snapshot was queued: %q", got)
		}
	}
	if n := len(got); n < 2 || !strings.Contains(got[n-1], `"id":"j2"`) {
		t.Fatalf("frames %q, want the new join's joined frame last", got)
	}
	c.w.mu.Lock()
	inConf := c.w.inConf
	c.w.mu.Unlock()
	if inConf {
		t.Fatal("still conflating once the queue drained")
	}
}

// A push that the hub reports as of a room not joined ends only itself:
// a later push of the room (joined again, overflowed again) stays
// awaited, and its room's events stay dropped until its snapshot.
func TestStalePushEndDoesNotEndALaterPush(t *testing.T) {
	h := &fakeHost{read: make(chan struct{})}
	w := &writer{}
	h.w = w
	w.init(nil, h, &Config{OutboundQueue: 2, ConflateRoomCap: 1}) // no transport: frames stay queued
	w.send([]byte("answer"))                                      // at the high-water mark: events conflate
	w.sendEvent("r", "u1", []byte("e1"))
	w.sendEvent("r", "u2", []byte("e2")) // over the cap: push 1
	w.pushEnded("r", 0)                  // the room was left
	w.sendEvent("r", "u1", []byte("e3")) // joined again (conflating)
	w.sendEvent("r", "u2", []byte("e4")) // push 2
	if len(h.pushes) != 2 {
		t.Fatalf("pushes %v, want two", h.pushes)
	}
	w.pushEnded("r", 1) // push 1's hub answer (not a member) comes late
	if !w.pushAwaited("r", 2) {
		t.Fatal("push 2 ended by push 1's end")
	}
	if w.pushAwaited("r", 1) {
		t.Fatal("push 1 still awaited")
	}
	w.sendEvent("r", "u3", []byte("e5"))
	if _, n := w.conflatedEntries(); n != 0 {
		t.Fatalf("%d events of a room awaiting its push kept, want them dropped", n)
	}
	w.sendSnapshot("r", []byte("snapshot"))
	if w.pushAwaited("r", 2) {
		t.Fatal("push 2 awaited after the room's snapshot")
	}
}

// A room that overflows its cap again while its pushed snapshot is still
// queued (a reader that does not read) asks its next push only once that
// snapshot is written: one pushed snapshot per room waits, not one per
// overflow; the room's events stay dropped meanwhile.
func TestPushDeferredWhileRoomSnapshotQueued(t *testing.T) {
	h := &fakeHost{read: make(chan struct{})}
	w := &writer{}
	h.w = w
	w.init(nil, h, &Config{OutboundQueue: 2, ConflateRoomCap: 1}) // no transport: frames stay queued
	pushes := func() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.pushes) }
	w.send([]byte("answer")) // at the high-water mark: events conflate
	w.sendEvent("r", "u1", []byte("e1"))
	w.sendEvent("r", "u2", []byte("e2")) // over the cap: push 1, asked
	w.sendSnapshot("r", []byte("s1"))    // push 1's snapshot, queued
	for i := range 50 {                  // overflow after overflow
		w.sendEvent("r", "u"+strconv.Itoa(i), []byte("e"))
	}
	if n := pushes(); n != 1 {
		t.Fatalf("%d pushes asked while the room's snapshot is queued, want 1", n)
	}
	if o := w.outbound(); o.Answers != 2 || o.PushesAwaited != 1 {
		t.Fatalf("outbound %+v, want 2 answers queued and a push awaited", o)
	}
	var got []string
	for {
		f, ok := w.dequeue()
		if !ok {
			break
		}
		got = append(got, string(f))
		if string(f) == "s1" && pushes() != 2 {
			t.Fatalf("the deferred push was not asked once s1 was written (%d pushes)", pushes())
		}
	}
	if !slices.Equal(got, []string{"answer", "s1"}) {
		t.Fatalf("written %q, want the answer and s1 (the room's events dropped for the push)", got)
	}
	if !w.pushAwaited("r", 2) {
		t.Fatal("the deferred push (2) is not awaited")
	}
	w.sendSnapshot("r", []byte("s2"))
	if f, _ := w.dequeue(); string(f) != "s2" {
		t.Fatalf("wrote %q, want s2", f)
	}
	if o := w.outbound(); o.Conflating || o.PushesAwaited != 0 || o.Queued != 0 {
		t.Fatalf("outbound %+v after the push's snapshot, want conflation ended", o)
	}
}
