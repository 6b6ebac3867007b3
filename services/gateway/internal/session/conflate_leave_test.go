package session

import (
	"context"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// pushRooms is fakeRooms whose unasked snapshot push (SyncAsked) waits
// until the test lets it go, then returns nil without queuing anything:
// what hub.Hub.Sync does when the member left the room while held
// (Release ignores a hold whose membership is gone).
type pushRooms struct {
	fakeRooms
	asked chan struct{} // a push began
	done  chan struct{} // closed by the test: the push returns
}

func (r *pushRooms) Sync(ctx context.Context, kind hub.SyncKind, room string, m hub.Member, v *filter.View, id string, commit func() bool) error {
	if kind != hub.SyncAsked {
		return r.fakeRooms.Sync(ctx, kind, room, m, v, id, commit)
	}
	r.asked <- struct{}{}
	<-r.done
	return nil
}

// A room left while its snapshot push is in flight ends that push: the
// writer stops conflating once its queue drains, instead of waiting
// forever for a snapshot that the hub will never send.
func TestConflationEndsWhenPushedRoomIsLeft(t *testing.T) {
	rooms := &pushRooms{asked: make(chan struct{}, 1), done: make(chan struct{})}
	c := newTestConn(t, rooms)
	c.cfg.OutboundQueue = 2 // high-water mark 1
	c.cfg.ConflateRoomCap = 2
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "j"})
	for _, u := range []string{"u1", "u2", "u3"} { // over the cap: a push
		c.SendEvent("r", u, []byte(`{"type":"typing_start","room":"r","user":"`+u+`"}`))
	}
	select {
	case <-rooms.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot push asked within 10 s")
	}
	c.leave(protocol.ClientFrame{Type: protocol.TypeLeave, Room: "r", ID: "l"})
	close(rooms.done)
	c.drainQueued()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.w.mu.Lock()
		inConf, push := c.w.inConf, len(c.w.confPush)
		c.w.mu.Unlock()
		if !inConf {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still conflating 5 s after room r was left and the queue drained (%d pushes awaited)", push)
		}
		time.Sleep(10 * time.Millisecond)
		c.drainQueued()
	}
}
