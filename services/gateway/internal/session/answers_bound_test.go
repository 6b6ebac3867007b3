package session

import (
	"strconv"
	"testing"
	"time"
)

// gateTransport is a fakeTransport whose text writes each wait for one
// token on allow, frame by frame: a peer that reads, but slower than its answers come.
type gateTransport struct {
	*fakeTransport
	allow chan struct{}
}

func (t *gateTransport) WriteTexts(frames [][]byte, d time.Time) error {
	for _, b := range frames {
		select {
		case <-t.allow:
			if err := t.fakeTransport.WriteTexts([][]byte{b}, d); err != nil {
				return err
			}
		case <-t.closed:
			return errFakeClosed
		case <-time.After(time.Until(d)):
			return errFakeTimeout
		}
	}
	return nil
}

// A peer that keeps reading (no write ever stalls for WriteStall) but
// reads fewer frames than it asks answers for (pings, syncs) must not
// grow the outbound queue without bound: answers are never conflated, so
// once answerCap frames are queued the connection is closed (1013).
func TestWriterSlowReaderAnswersBounded(t *testing.T) {
	const queue = 16
	tr := &gateTransport{fakeTransport: newFakeTransport(), allow: make(chan struct{})}
	h := &fakeHost{read: make(chan struct{})}
	w := &writer{}
	h.w = w
	w.init(tr, h, &Config{OutboundQueue: queue, PongWait: time.Hour, WriteWait: time.Hour, WriteStall: time.Hour})
	t.Cleanup(func() {
		h.close(0, "")
		close(h.read)
		<-w.done
	})
	w.start()
	for round := range 200 {
		for i := range 20 {
			w.send([]byte(`{"type":"pong","id":"` + strconv.Itoa(round*20+i) + `"}`))
		}
		select {
		case tr.allow <- struct{}{}: // the peer reads one frame
		case <-w.done:
		}
		if w.closing() {
			h.mu.Lock()
			n := h.overflows
			h.mu.Unlock()
			if n != 1 {
				t.Fatalf("closed with %d overflow reports, want 1", n)
			}
			return // refused as a slow consumer: bounded
		}
		if q := w.queued(); q > w.answerCap() {
			t.Fatalf("round %d: %d answers queued for a peer that reads 1 frame per 20 answers, OutboundQueue %d; not closed", round, q, queue)
		}
	}
	t.Fatalf("never closed after 4000 answers asked and 200 read (OutboundQueue %d, answerCap %d)", queue, w.answerCap())
}
