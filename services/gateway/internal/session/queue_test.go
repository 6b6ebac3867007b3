package session

import (
	"strconv"
	"testing"
)

// enqueue is enqueueLocked taking qmu.
func (c *Conn) enqueue(frame []byte) bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return c.enqueueLocked(frame)
}

// The outbound queue keeps order, holds at most cfg.OutboundQueue frames,
// reuses written room before growing and lets a large backing array go
// once drained.
func TestOutboundQueue(t *testing.T) {
	c := &Conn{cfg: Config{OutboundQueue: 40}}
	next, want := 0, 0
	push := func(n int) {
		t.Helper()
		for range n {
			if !c.enqueue([]byte(strconv.Itoa(next))) {
				t.Fatalf("enqueue %d refused with %d queued", next, c.queued())
			}
			next++
		}
	}
	pop := func(n int) {
		t.Helper()
		for range n {
			f, ok := c.dequeue()
			if !ok || string(f) != strconv.Itoa(want) {
				t.Fatalf("dequeue = %q, %v; want %d", f, ok, want)
			}
			want++
		}
	}
	if _, ok := c.dequeue(); ok {
		t.Fatal("dequeue from an empty queue")
	}
	for round := 0; round < 15; round++ { // interleaved, wrapping
		push(7)
		pop(5)
	}
	pop(c.queued())
	push(40)
	if c.enqueue([]byte("x")) || c.queued() != 40 {
		t.Fatalf("a full queue took a frame (%d queued)", c.queued())
	}
	pop(1)
	push(1) // room made by a write is usable again
	pop(40)
	if _, ok := c.dequeue(); ok || c.out != nil || c.head != 0 {
		t.Fatalf("drained queue kept %d slots (head %d)", cap(c.out), c.head)
	}
	push(1)
	pop(1)
	if cap(c.out) == 0 || cap(c.out) > keepQueueCap {
		t.Fatalf("small drained queue has capacity %d, want 1..%d kept", cap(c.out), keepQueueCap)
	}
}
