package session

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// closeGrace is how long the writer waits for the peer's close reply
// after sending a close frame before dropping the TCP connection, and
// bounds every write once a close was requested (the queued frames and
// the close frame), so a peer that stopped reading is let go within
// about a second instead of WriteWait per write. 2*closeGrace after the
// close request the TCP connection is closed whatever the writer does
// (the hard stop: gorilla re-arms the socket's write deadline before each
// write from the one the writer gave it, so a write begun just before the
// close request could otherwise wait WriteWait).
const closeGrace = time.Second

// keepQueueCap is the backing array an empty outbound queue keeps for the
// next frames (a burst of typing events); a larger one is released.
const keepQueueCap = 16

// writerHost is what the writer tells its connection, and asks of it.
type writerHost interface {
	// written reports a text frame written (delivery delay of room events).
	written(frame []byte)
	// writeFailed reports a failed write: the connection ends without a
	// close frame (1006).
	writeFailed()
	// readDone is closed once reading ended (the peer's close reply, or
	// the connection broke).
	readDone() <-chan struct{}
}

// writer is a connection's outbound side: the queue, the write loop, the
// pings and the close sequence. It owns every data write of its
// transport.
//
// The queue holds at most cfg.OutboundQueue frames: out[head:], guarded
// by mu. A sender never blocks: a full queue refuses the frame (the
// connection closes it as a slow consumer). It grows on demand and is
// released when it drains with a large backing array, so an idle
// connection holds (almost) nothing. Queuing a frame starts the write loop's goroutine
// unless one runs (writing); it ends once the queue is empty, or runs
// the close sequence once quit is closed. Pings come from a runtime timer
// (no goroutine) every 9/10 of cfg.PongWait, which starts the write loop.
type writer struct {
	tr   Transport
	host writerHost
	// cfg is the connection's: the writer reads OutboundQueue, PongWait
	// (pings every 9/10 of it) and WriteWait (the bound of every write
	// before a close).
	cfg *Config

	mu      sync.Mutex
	out     [][]byte
	head    int
	live    bool        // start was called: write loops may be started; mu
	writing bool        // a write loop runs, or the last one closed the transport; mu
	pingDue bool        // the ping timer fired: the write loop pings first; mu
	pinger  *time.Timer // set in start under mu

	quit chan struct{} // closed by close
	// closeBy is the write deadline of a closing connection (UnixNano,
	// set before quit is closed; 0 before): no write waits past it
	// (writeDeadline).
	closeBy     atomic.Int64
	hardStop    *time.Timer // aborts the transport 2*closeGrace after close; set before quit is closed
	closeCode   int         // close frame to send; 0: none (peer closed or conn broken)
	closeReason string
	done        chan struct{} // closed when the close sequence ended
}

// init readies w for tr (nil: frames stay queued, as before start) with
// cfg, which must not change afterwards.
func (w *writer) init(tr Transport, host writerHost, cfg *Config) {
	w.tr, w.host, w.cfg = tr, host, cfg
	w.quit = make(chan struct{})
	w.done = make(chan struct{})
}

// start arms the pings and lets write loops run, starting one if frames
// are queued or a close was requested already.
func (w *writer) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Created with a deadline it never reaches and armed after the
	// assignment, so the callback, which re-arms it, always finds it.
	w.pinger = time.AfterFunc(time.Duration(math.MaxInt64), w.pingTick)
	w.pinger.Reset(w.pingPeriod())
	w.live = true
	if len(w.out) > w.head || w.closing() {
		w.startLocked()
	}
}

func (w *writer) closing() bool {
	select {
	case <-w.quit:
		return true
	default:
		return false
	}
}

// close asks for the close sequence: the queued frames are flushed within
// closeGrace (except after 1013), the close frame of code and reason is
// sent (none for code 0), and the transport is closed after the peer's
// reply or closeGrace. Writes are bounded by closeGrace from now on, and
// the transport is aborted 2*closeGrace from now. Called once; it never
// blocks.
func (w *writer) close(code int, reason string) {
	w.closeCode, w.closeReason = code, reason
	// A write in flight may be blocked on a peer that stopped reading
	// (a slow consumer): give it closeGrace at most, not WriteWait.
	// Later writes take closeBy too (writeDeadline); a write that
	// re-armed the socket's deadline just now is cut by the hard stop.
	by := time.Now().Add(closeGrace)
	w.closeBy.Store(by.UnixNano())
	if w.tr != nil {
		w.tr.CutWrites(by)
		w.hardStop = time.AfterFunc(2*closeGrace, w.tr.Abort)
	}
	close(w.quit)
	w.mu.Lock()
	if w.live {
		w.startLocked()
	}
	w.mu.Unlock()
}

// send queues frame and starts a write loop unless one runs (or start was
// not called yet). It returns false, queuing nothing, when
// cfg.OutboundQueue frames are queued.
func (w *writer) send(frame []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ok := w.enqueueLocked(frame)
	if ok && w.live {
		w.startLocked()
	}
	return ok
}

// startLocked starts the write loop's goroutine unless one runs; mu is
// held.
func (w *writer) startLocked() {
	if !w.writing {
		w.writing = true
		go w.writeLoop()
	}
}

// pingPeriod is how often the peer is pinged: 9/10 of PongWait.
func (w *writer) pingPeriod() time.Duration { return w.cfg.PongWait * 9 / 10 }

// pingTick runs on the ping timer: it asks the write loop for a ping and
// re-arms the timer. It never blocks.
func (w *writer) pingTick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing() {
		return
	}
	w.pingDue = true
	if w.live {
		w.startLocked()
	}
	w.pinger.Reset(w.pingPeriod())
}

// enqueueLocked appends frame to the queue unless it holds
// cfg.OutboundQueue frames already; mu is held.
func (w *writer) enqueueLocked(frame []byte) bool {
	if len(w.out)-w.head >= w.cfg.OutboundQueue {
		return false
	}
	if w.head > 0 && len(w.out) == cap(w.out) {
		// Reuse the room of frames already written before growing.
		n := copy(w.out, w.out[w.head:])
		clear(w.out[n:])
		w.out, w.head = w.out[:n], 0
	}
	w.out = append(w.out, frame)
	return true
}

// dequeue takes the oldest queued frame; ok is false when none is queued.
func (w *writer) dequeue() (f []byte, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dequeueLocked()
}

// dequeueLocked is dequeue with mu held.
func (w *writer) dequeueLocked() (f []byte, ok bool) {
	if w.head == len(w.out) {
		return nil, false
	}
	f = w.out[w.head]
	w.out[w.head] = nil
	w.head++
	if w.head == len(w.out) {
		if cap(w.out) > keepQueueCap {
			w.out = nil
		} else {
			w.out = w.out[:0]
		}
		w.head = 0
	}
	return f, true
}

// queued is the number of frames in the queue.
func (w *writer) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.out) - w.head
}

// writeLoop is started by startLocked: it writes the queued frames (a due
// ping first) and ends once the queue is empty; once a close was
// requested it runs the close sequence instead, and that write loop is
// the last one (writing stays set).
func (w *writer) writeLoop() {
	for {
		w.mu.Lock()
		if w.closing() {
			w.mu.Unlock()
			break
		}
		ping := w.pingDue
		w.pingDue = false
		var f []byte
		if !ping {
			var ok bool
			if f, ok = w.dequeueLocked(); !ok {
				w.writing = false // the next send or ping starts a write loop
				w.mu.Unlock()
				return
			}
		}
		w.mu.Unlock()
		deadline := w.writeDeadline(time.Now().Add(w.cfg.WriteWait))
		var err error
		if ping {
			err = w.tr.WritePing(deadline)
		} else if err = w.tr.WriteText(f, deadline); err == nil {
			w.host.written(f)
		}
		if err != nil {
			w.host.writeFailed()
			break
		}
	}
	w.closeSequence() // quit is closed (by whoever ended the loop)
}

// closeSequence stops the pings, flushes the queue and writes the close
// frame (when closeCode is set), waits for the peer's reply, and closes
// the transport.
func (w *writer) closeSequence() {
	defer close(w.done)
	w.mu.Lock()
	w.pinger.Stop()
	w.mu.Unlock()
	if w.closeCode != 0 {
		if w.closeCode != CloseTryAgainLater {
			// Flush what was queued before the close (an error frame
			// explaining it, for one), within closeGrace in all; a slow
			// consumer gets nothing more.
			deadline := time.Now().Add(closeGrace)
			for n := w.queued(); n > 0; n-- {
				f, ok := w.dequeue()
				if !ok || w.tr.WriteText(f, w.writeDeadline(deadline)) != nil {
					break
				}
			}
		}
		if w.tr.WriteClose(w.closeCode, w.closeReason, time.Now().Add(closeGrace)) == nil {
			select {
			case <-w.host.readDone():
			case <-time.After(closeGrace):
			}
		}
	}
	_ = w.tr.Close()
	if w.hardStop != nil { // set by close before quit was closed
		w.hardStop.Stop()
	}
}

// pong answers the peer's ping with data, within WriteWait (and the close
// deadline). Reader only.
func (w *writer) pong(data []byte) error {
	return w.tr.WritePong(data, w.writeDeadline(time.Now().Add(w.cfg.WriteWait)))
}

// writeDeadline is d, or the close deadline (closeBy) when a close was
// requested and it is earlier.
func (w *writer) writeDeadline(d time.Time) time.Time {
	if by := w.closeBy.Load(); by != 0 && by < d.UnixNano() {
		return time.Unix(0, by)
	}
	return d
}
