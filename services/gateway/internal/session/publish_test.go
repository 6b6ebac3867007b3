package session

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// blockingBackend holds every typing publish until release is closed (a
// NATS write stuck on a full socket), and records every command.
type blockingBackend struct {
	release chan struct{}
	entered chan struct{} // one value per held publish, once it is held

	mu   sync.Mutex
	cmds []protocol.Command
}

func (b *blockingBackend) Connected() bool { return true }
func (b *blockingBackend) Publish(cmd *protocol.Command) error {
	if cmd.Op == protocol.OpStart {
		b.entered <- struct{}{}
		<-b.release
	}
	b.mu.Lock()
	b.cmds = append(b.cmds, *cmd)
	b.mu.Unlock()
	return nil
}
func (b *blockingBackend) Snapshot(context.Context, string) (protocol.Snapshot, error) {
	return protocol.Snapshot{}, nil
}

// A publish that blocks (NATS write stuck) holds no lock of the connection:
// Disconnect, which the gateway calls for every connection at shutdown,
// returns while the typing publish is still stuck, and its command carries
// a higher seq than the stuck start, so a worker that gets the start last
// drops it as stale.
func TestStuckPublishDoesNotHoldDisconnect(t *testing.T) {
	be := &blockingBackend{release: make(chan struct{}), entered: make(chan struct{}, 1)}
	c := newTestConnWith(t, &fakeRooms{}, be)
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "j"})
	c.drainQueued()

	typed := make(chan struct{})
	go func() {
		defer close(typed)
		c.typing(protocol.ClientFrame{Type: protocol.TypeTypingStart, Room: "r"})
	}()
	<-be.entered

	disconnected := make(chan struct{})
	go func() {
		defer close(disconnected)
		c.Disconnect()
	}()
	select {
	case <-disconnected:
	case <-time.After(5 * time.Second):
		close(be.release)
		t.Fatal("Disconnect waited for a stuck typing publish")
	}
	close(be.release)
	<-typed

	be.mu.Lock()
	defer be.mu.Unlock()
	if len(be.cmds) != 2 || be.cmds[0].Op != protocol.OpDisconnect || be.cmds[1].Op != protocol.OpStart {
		t.Fatalf("commands %+v, want the disconnect, then the stuck start", be.cmds)
	}
	if be.cmds[1].Seq >= be.cmds[0].Seq {
		t.Fatalf("stuck start seq %d, disconnect seq %d: the start must be older", be.cmds[1].Seq, be.cmds[0].Seq)
	}
}
