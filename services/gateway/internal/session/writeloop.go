package session

import "time"

// The write loop: one drain of the queue per socket write, the pings and
// the pongs, the write deadlines (ELLIPSIS_WRITE_STALL, WriteWait, the
// close deadline) and the close sequence. The queue it drains, and what
// fills it, are in writer.go.

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

// maxDrainFrames bounds the frames one drain takes from the queue and
// writes together (Transport.WriteTexts: one socket write); a drain also
// stops once its frames reach maxCorked bytes (it then holds at most
// maxCorked bytes and one frame).
const maxDrainFrames = 64

// drainLocked takes the queued frames (and conflated events) that one
// drain writes, oldest first, into batch; mu is held.
func (w *writer) drainLocked(batch [][]byte) [][]byte {
	size := 0
	for len(batch) < maxDrainFrames && size < maxCorked {
		f, ok := w.dequeueLocked()
		if !ok {
			break
		}
		batch = append(batch, f)
		size += len(f)
	}
	return batch
}

// writeLoop is started by startLocked: it writes the queued frames (a due
// ping first), those queued together in one drain (drainLocked: one
// socket write), and ends once the queue is empty; once a close was
// requested it runs the close sequence instead, and that write loop is
// the last one (writing stays set).
func (w *writer) writeLoop() {
	batch := w.one[:0]
	for {
		w.mu.Lock()
		if w.closing() {
			w.mu.Unlock()
			break
		}
		ping := w.pingDue
		w.pingDue = false
		if !ping {
			if batch = w.drainLocked(batch[:0]); len(batch) == 0 {
				w.writing = false // the next send or ping starts a write loop
				w.mu.Unlock()
				return
			}
		}
		w.mu.Unlock()
		// A write may wait for a peer that stopped reading for
		// WriteStall (ELLIPSIS_WRITE_STALL); then it is closed with 1013.
		now := time.Now()
		stallBy := stallDeadline(now, w.cfg.WriteStall)
		deadline := w.writeDeadline(stallBy)
		var err error
		if ping {
			err = w.tr.WritePing(deadline)
		} else if err = w.tr.WriteTexts(batch, deadline); err == nil {
			done := time.Now() // once per drain: the frames finished together
			for _, f := range batch {
				w.host.written(f, done)
			}
		}
		clear(batch) // the frames are written: drop them until the next drain
		if err != nil {
			if !w.closing() && !time.Now().Before(stallBy) {
				w.host.writeStalled()
			} else {
				w.host.writeFailed()
			}
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
	if w.inConf {
		w.inConf = false
		w.host.conflating(false)
	}
	w.conf, w.confN, w.confPush, w.confSnap = nil, 0, nil, nil // a closing connection writes no event
	w.mu.Unlock()
	if w.closeCode != 0 {
		if w.closeCode != CloseTryAgainLater {
			// Flush what was queued before the close (an error frame
			// explaining it, for one), within closeGrace in all; a slow
			// consumer gets nothing more.
			deadline := time.Now().Add(closeGrace)
			for n := w.queued(); n > 0; n-- {
				f, ok := w.dequeue()
				if !ok || w.tr.WriteTexts([][]byte{f}, w.writeDeadline(deadline)) != nil {
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

// pong answers the peer's ping with data, within the later of WriteWait
// and the stall deadline a drain would get now (it may wait behind a
// stalled write, whose socket deadline it then replaces: never with an
// earlier one, so that write still times out as a stall), and the close
// deadline. Reader only.
func (w *writer) pong(data []byte) error {
	now := time.Now()
	d := stallDeadline(now, w.cfg.WriteStall)
	if ww := now.Add(w.cfg.WriteWait); ww.After(d) {
		d = ww
	}
	return w.tr.WritePong(data, w.writeDeadline(d))
}

// stallDeadline is now + stall rounded up to a multiple of stall/16 (of
// the unix clock): a write waits at least stall and at most 17/16 of it,
// and the drains of one such step all give the socket the same deadline,
// which the corked conn then does not set again (setting it before every
// frame was 4.8% of the gateway's CPU profile at 5,000 changes/s,
// docs/BENCHMARKS.md, "Second pass"). The result is now plus a duration,
// so it keeps now's monotonic clock reading: comparisons with it (the
// stall check) do not follow steps of the wall clock. It never decreases
// as now grows.
func stallDeadline(now time.Time, stall time.Duration) time.Time {
	t := now.Add(stall).UnixNano()
	if g := int64(stall / 16); g > 0 {
		t = (t + g - 1) / g * g
	}
	return now.Add(time.Duration(t - now.UnixNano()))
}

// writeDeadline is d, or the close deadline (closeBy) when a close was
// requested and it is earlier.
func (w *writer) writeDeadline(d time.Time) time.Time {
	if by := w.closeBy.Load(); by != 0 && by < d.UnixNano() {
		return time.Unix(0, by)
	}
	return d
}
