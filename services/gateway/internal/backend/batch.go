package backend

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Bounds of a command batch (docs/protocol.md, "Command batches").
const (
	// MaxBatchCommands is the most commands one batch carries: a full
	// batch is sent at once, before its window ends. 256 commands of
	// about 160 bytes are about 40 KB, well under NATS's default
	// max_payload (1 MiB).
	MaxBatchCommands = 256
	// MaxBatchBytes is the most bytes of one batch, when the server's
	// max_payload is larger: a command that would take a batch past it
	// (or past max_payload) sends the batch first and starts the next.
	MaxBatchBytes = 64 << 10
	// batchQueue bounds the full batches waiting for the sender goroutine
	// (a NATS write blocked: nats.go's Publish is writing its buffer to a
	// stalled socket). With it full, a command that needs a new batch is
	// refused (ErrUnavailable, reason "NATS write blocked"), answered to
	// its client as a disconnected NATS is: newest refused, nothing
	// queued without bound. At most batchQueue × MaxBatchBytes (1 MiB)
	// wait.
	batchQueue = 16
	// tailBytes is the length of protocol.AppendBatchTail's bytes.
	tailBytes = 2
)

// BatchMetrics counts what the batcher does; the gateway's metrics
// package implements it (ellipsis_gateway_command_batches_total,
// ellipsis_gateway_command_batch_commands,
// ellipsis_gateway_commands_unsent_total).
type BatchMetrics interface {
	// BatchSent counts one batch of n commands handed to NATS.
	BatchSent(n int)
	// BatchFailed counts one batch of n commands NATS refused (the
	// connection was lost while it waited): its commands are lost, as a
	// command published just before a disconnect is.
	BatchFailed(n int)
	// CommandRefused counts one command refused because batchQueue full
	// batches were waiting.
	CommandRefused()
}

// batch is one batch being filled or waiting to be sent: its payload
// (head and commands, no tail yet) and how many commands it holds.
type batch struct {
	data   []byte
	n      int
	single bool // data is one command, sent as it is (too big for a batch)
}

// batcher gathers the commands of all connections published within one
// window into one NATS message on the command subject. Commands enter a
// batch in the order Publish was called (under mu), and batches are sent
// in the order they closed, by one goroutine, so no command overtakes
// another: a connection's commands, published in seq order, reach NATS in
// seq order within and across batches. No lock is held across the NATS
// write: mu guards the batch being filled, the sender writes alone.
type batcher struct {
	window   time.Duration
	maxBytes func() int // the byte bound now (the server's max_payload may change on reconnect)
	send     func(data []byte) error
	m        BatchMetrics

	mu      sync.Mutex
	cur     batch         // being filled; n == 0: none
	gen     uint64        // counts the batches closed, so a late timer closes none
	armed   uint64        // gen of the batch the timer was armed for
	ready   chan batch    // closed batches, in order, for run
	free    chan []byte   // spent buffers for reuse
	timer   *time.Timer   // closes cur when its window ends
	stopped bool          // after stop: Publish sends directly
	queued  uint64        // batches put in ready so far; mu
	sent    atomic.Uint64 // batches run has handed to send (or failed) so far
	// progress is closed (and replaced, under mu) each time run has
	// handed a batch to send, so flush waits for it instead of polling.
	progress chan struct{}
	done     chan struct{} // closed when run returned
}

func newBatcher(window time.Duration, maxBytes func() int, send func([]byte) error, m BatchMetrics) *batcher {
	b := &batcher{
		window: window, maxBytes: maxBytes, send: send, m: m,
		ready: make(chan batch, batchQueue),
		free:  make(chan []byte, batchQueue+1),
		done:  make(chan struct{}),

		progress: make(chan struct{}),
	}
	b.timer = time.AfterFunc(time.Hour, b.expire)
	b.timer.Stop()
	go b.run()
	return b
}

// add appends cmd (its JSON encoding, enc) to the batch being filled,
// closing that batch first when enc would take it past MaxBatchCommands or
// the byte bound. It returns false, with nothing added, when a batch had
// to close and batchQueue batches were already waiting, and when the
// batcher is stopped (the caller then sends cmd alone).
func (b *batcher) add(enc []byte) (added, stopped bool) {
	limit := min(b.maxBytes(), MaxBatchBytes)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return false, true
	}
	if b.cur.n > 0 && (b.cur.n >= MaxBatchCommands || len(b.cur.data)+1+len(enc)+tailBytes > limit) {
		if !b.closeLocked() {
			b.m.CommandRefused()
			return false, false
		}
	}
	if protocol.BatchOverhead+len(enc) > limit {
		// Too big for any batch (a disconnect of many long room ids): it
		// goes alone, in its place in the order.
		if len(b.ready) == cap(b.ready) { // no send below ever waits under mu
			b.m.CommandRefused()
			return false, false
		}
		b.ready <- batch{data: append([]byte(nil), enc...), n: 1, single: true}
		b.queued++
		return true, false
	}
	if b.cur.n == 0 {
		select {
		case buf := <-b.free:
			b.cur.data = protocol.AppendBatchHead(buf[:0])
		default:
			b.cur.data = protocol.AppendBatchHead(make([]byte, 0, 4096))
		}
		b.armed = b.gen
		b.timer.Reset(b.window)
	} else {
		b.cur.data = append(b.cur.data, ',')
	}
	b.cur.data = append(b.cur.data, enc...)
	b.cur.n++
	return true, false
}

// closeLocked hands the batch being filled to run; false when batchQueue
// batches wait already (cur is then kept). b.mu is held.
func (b *batcher) closeLocked() bool {
	if b.cur.n == 0 {
		return true
	}
	select {
	case b.ready <- b.cur:
	default:
		return false
	}
	b.cur = batch{}
	b.gen++
	b.queued++
	return true
}

// expire closes the batch the timer was armed for when its window ends.
// When that batch closed already (full), the timer belongs to the next
// one, which re-armed it; a firing that races with the re-arm may close
// the next batch early, which only shortens its wait.
func (b *batcher) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.armed != b.gen || b.stopped {
		return
	}
	if !b.closeLocked() {
		// run is behind: try again once it may have made room; Publish
		// refuses what no batch has room for meanwhile.
		b.timer.Reset(b.window)
	}
}

// run sends the closed batches in order until ready is closed.
func (b *batcher) run() {
	defer close(b.done)
	for bt := range b.ready {
		data := bt.data
		if !bt.single {
			data = protocol.AppendBatchTail(data)
		}
		if err := b.send(data); err != nil {
			b.m.BatchFailed(bt.n)
		} else {
			b.m.BatchSent(bt.n)
		}
		b.sent.Add(1)
		b.mu.Lock()
		close(b.progress)
		b.progress = make(chan struct{})
		b.mu.Unlock()
		if !bt.single {
			select {
			case b.free <- data:
			default:
			}
		}
	}
}

// flush closes the batch being filled and waits until it and every batch
// closed before it were handed to NATS (sent or failed), woken by run's
// progress, until deadline; false when deadline came first (the sender is
// blocked on a stalled socket, or batchQueue batches kept the one being
// filled from closing). No lock is held while it waits; batches closed
// after the one it closed are not waited for.
func (b *batcher) flush(deadline time.Time) bool {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var target uint64
	closed := false
	for {
		b.mu.Lock()
		if !closed {
			closed = b.stopped || b.closeLocked()
			target = b.queued
		}
		wake := b.progress
		b.mu.Unlock()
		if closed && b.sent.Load() >= target {
			return true
		}
		select {
		case <-wake:
		case <-timer.C:
			return false
		}
	}
}

// stop closes the batch being filled, waits until every closed batch was
// handed to NATS (or until deadline), and makes later adds fail (their
// callers send alone). Safe to call twice. mu is held only to mark the
// batcher stopped and take the batch being filled: once stopped, no add
// or expire puts anything in ready, so stop alone may wait for room there
// (bounded by deadline) and close it, while adds find it stopped at once.
func (b *batcher) stop(deadline <-chan struct{}) {
	b.mu.Lock()
	first := !b.stopped
	b.stopped = true
	b.timer.Stop()
	last := b.cur
	b.cur = batch{}
	b.mu.Unlock()
	if first {
		if last.n > 0 {
			// ready has room unless run is stuck; then the batch waits
			// for it here, bounded by deadline.
			select {
			case b.ready <- last:
			case <-deadline:
				b.m.BatchFailed(last.n)
			}
		}
		close(b.ready)
	}
	select {
	case <-b.done:
	case <-deadline:
	}
}
