package session

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// refusingBackend refuses every publish while refuse is set (a NATS write
// blocked: the batcher's "NATS write blocked"), and records what it took.
type refusingBackend struct {
	fakeBackend
	mu     sync.Mutex
	refuse bool
	took   []protocol.Command
}

func (b *refusingBackend) Publish(cmd *protocol.Command) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refuse {
		return errors.New("NATS write blocked")
	}
	b.took = append(b.took, *cmd)
	return nil
}

func (b *refusingBackend) setRefuse(on bool) {
	b.mu.Lock()
	b.refuse = on
	b.mu.Unlock()
}

// A thread start whose command was refused (answered unavailable) holds no
// slot of MaxThreads: after DefaultMaxThreads refused starts in as many
// threads, a start in yet another thread is published, not
// too_many_threads; and a refused refresh of a thread published before
// keeps that thread counted.
func TestRefusedThreadStartHoldsNoSlot(t *testing.T) {
	be := &refusingBackend{}
	c := newTestConnWith(t, &fakeRooms{}, be)
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "r", ID: "j"})
	c.drainQueued()

	// One published thread, then its refused refresh: still counted.
	c.typing(protocol.ClientFrame{Type: protocol.TypeTypingStart, Room: "r", Thread: "kept"})
	be.setRefuse(true)
	c.typing(protocol.ClientFrame{Type: protocol.TypeTypingStart, Room: "r", Thread: "kept"})
	for i := range DefaultMaxThreads {
		c.typing(protocol.ClientFrame{Type: protocol.TypeTypingStart, Room: "r", Thread: fmt.Sprint("t", i)})
	}
	for _, f := range c.drainQueued() {
		if !strings.Contains(f, `"code":"unavailable"`) {
			t.Fatalf("refused start answered %s, want unavailable", f)
		}
	}
	be.setRefuse(false)

	// DefaultMaxThreads-1 more threads fit beside "kept"; one more does not.
	for i := range DefaultMaxThreads - 1 {
		c.typing(protocol.ClientFrame{Type: protocol.TypeTypingStart, Room: "r", Thread: fmt.Sprint("u", i)})
	}
	if got := c.drainQueued(); len(got) != 0 {
		t.Fatalf("starts within the limit answered %q; refused starts still hold slots", got)
	}
	c.typing(protocol.ClientFrame{Type: protocol.TypeTypingStart, Room: "r", Thread: "over", ID: "o"})
	got := c.drainQueued()
	if len(got) != 1 || !strings.Contains(got[0], `"code":"`+protocol.CodeTooManyThreads+`"`) {
		t.Fatalf("start past the limit answered %q, want too_many_threads ('kept' lost its slot to a refused refresh?)", got)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if n := len(be.took); n != DefaultMaxThreads {
		t.Fatalf("%d commands published, want %d (kept, then %d new threads)", n, DefaultMaxThreads, DefaultMaxThreads-1)
	}
}
