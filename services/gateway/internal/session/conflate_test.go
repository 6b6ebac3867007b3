package session

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// churn is a model of rooms whose typists change while a reader is
// stalled: the true state, and the frames a writer is given.
//
// Frames (not JSON: the writer never reads them):
//   - "E|room|user|start|seq" or "E|room|user|stop|seq": an event;
//   - "S|room|seq|u1,u2": a snapshot of the room (its true typists);
//   - "R|room|seq": an answer about the room (an error, left).
//
// seq numbers every frame given, so the reader can check that no event
// of a room is written after a later snapshot or answer of that room.
type churn struct {
	truth map[string]map[string]bool // room → user → typing
	seq   int
}

func newChurn() *churn { return &churn{truth: map[string]map[string]bool{}} }

func (c *churn) event(w *writer, room, user string, start bool) {
	c.seq++
	op := "stop"
	if start {
		op = "start"
	}
	if c.truth[room] == nil {
		c.truth[room] = map[string]bool{}
	}
	c.truth[room][user] = start
	w.sendEvent(room, user, fmt.Appendf(nil, "E|%s|%s|%s|%d", room, user, op, c.seq))
}

func (c *churn) typists(room string) []string {
	var us []string
	for u, on := range c.truth[room] {
		if on {
			us = append(us, u)
		}
	}
	slices.Sort(us)
	return us
}

func (c *churn) snapshot(w *writer, room string) {
	c.seq++
	w.sendSnapshot(room, fmt.Appendf(nil, "S|%s|%d|%s", room, c.seq, strings.Join(c.typists(room), ",")))
}

func (c *churn) answer(w *writer, room string) {
	c.seq++
	w.sendReply(room, fmt.Appendf(nil, "R|%s|%d", room, c.seq))
}

// reader applies written frames as a client does (the JS SDK's
// Room._receive: a snapshot replaces the room, an event sets its user)
// and checks the order rule.
type reader struct {
	t       *testing.T
	state   map[string]map[string]bool
	barrier map[string]int // room → seq of its latest snapshot or answer
	frames  int
}

func newReader(t *testing.T) *reader {
	return &reader{t: t, state: map[string]map[string]bool{}, barrier: map[string]int{}}
}

func (r *reader) apply(f string) {
	r.t.Helper()
	r.frames++
	p := strings.Split(f, "|")
	room := p[1]
	if r.state[room] == nil {
		r.state[room] = map[string]bool{}
	}
	switch p[0] {
	case "E":
		seq, _ := strconv.Atoi(p[4])
		if seq < r.barrier[room] {
			r.t.Fatalf("event %q written after a later frame of its room (seq %d)", f, r.barrier[room])
		}
		r.state[room][p[2]] = p[3] == "start"
	case "S":
		r.barrier[room], _ = strconv.Atoi(p[2])
		clear(r.state[room])
		for _, u := range strings.Split(p[3], ",") {
			if u != "" {
				r.state[room][u] = true
			}
		}
	case "R":
		r.barrier[room], _ = strconv.Atoi(p[2])
	}
}

func (r *reader) typists(room string) []string {
	var us []string
	for u, on := range r.state[room] {
		if on {
			us = append(us, u)
		}
	}
	slices.Sort(us)
	return us
}

// drain reads what w writes until it wrote everything and nothing more
// comes.
func (r *reader) drain(tr *fakeTransport, w *writer) {
	r.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f := <-tr.wrote:
			if f.kind == fText {
				r.apply(f.data)
			}
		case <-time.After(50 * time.Millisecond):
			if w.queued() == 0 {
				return
			}
		case <-deadline:
			r.t.Fatalf("still %d frames queued after 10 s", w.queued())
		}
	}
}

// A reader that stops reading while its rooms churn (events, snapshots
// and answers interleaved) is never closed; its conflation state stays
// under rooms × cap and its queue under the high-water mark plus the
// answers; once it reads again it ends with exactly the true typists of
// every room, and no event of a room was written after a later snapshot
// or answer of that room.
func TestWriterConflatesStalledReader(t *testing.T) {
	const rooms, users, queue, roomCap = 12, 40, 256, 100
	w, tr, h := newTestWriter(t, queue, time.Hour, time.Hour)
	w.cfg.ConflateRoomCap = roomCap
	tr.stall.Store(true)
	w.start()
	ch := newChurn()
	rnd := rand.New(rand.NewPCG(1, 2))
	answers := 0
	for i := range 20000 {
		room := "r" + strconv.Itoa(rnd.IntN(rooms))
		switch n := rnd.IntN(1000); {
		case n < 3:
			ch.snapshot(w, room)
			answers++
		case n < 6:
			ch.answer(w, room)
			answers++
		default:
			ch.event(w, room, "u"+strconv.Itoa(rnd.IntN(users)), rnd.IntN(2) == 0)
		}
		if i%500 == 0 {
			r, n := w.conflatedEntries()
			w.mu.Lock()
			q := len(w.out) - w.head
			w.mu.Unlock()
			if r > rooms || n > rooms*min(users, roomCap) {
				t.Fatalf("conflation holds %d rooms, %d entries; bound %d × %d", r, n, rooms, min(users, roomCap))
			}
			// The queue: the high-water mark of events, the answers and
			// the events they moved ahead of them (≤ users each).
			if limit := queue/2 + 1 + answers*(1+users); q > limit {
				t.Fatalf("queue holds %d frames, bound %d", q, limit)
			}
		}
	}
	h.mu.Lock()
	inConf, dropped := h.inConf, h.dropped
	h.mu.Unlock()
	if inConf != 1 || dropped == 0 {
		t.Fatalf("conflating %d, %d events conflated; want 1 and some", inConf, dropped)
	}
	tr.resume()
	r := newReader(t)
	r.drain(tr, w)
	for i := range rooms {
		room := "r" + strconv.Itoa(i)
		if got, want := r.typists(room), ch.typists(room); !slices.Equal(got, want) {
			t.Errorf("room %s: reader shows %v, truly typing %v", room, got, want)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failed != 0 || h.stalled != 0 || h.inConf != 0 {
		t.Fatalf("failed %d, stalled %d, conflating %d after the drain; want 0, 0, 0", h.failed, h.stalled, h.inConf)
	}
	if w.closing() {
		t.Fatal("the reader was closed")
	}
	t.Logf("20000 frames given, %d written, %d events conflated", r.frames, h.dropped)
}

// A room with more conflated users than the cap drops them and asks for
// one snapshot push; its events are dropped until that snapshot comes,
// and the reader ends with the room's true state.
func TestWriterConflationRoomCap(t *testing.T) {
	w, tr, h := newTestWriter(t, 2, time.Hour, time.Hour)
	w.cfg.ConflateRoomCap = 5
	tr.stall.Store(true)
	w.start()
	ch := newChurn()
	for i := range 200 {
		ch.event(w, "big", "u"+strconv.Itoa(i%20), i%3 != 0)
		ch.event(w, "small", "u"+strconv.Itoa(i%3), i%2 == 0)
		if _, n := w.conflatedEntries(); n > 2*5 {
			t.Fatalf("%d entries conflated, bound 2 rooms × 5", n)
		}
	}
	h.mu.Lock()
	pushes := slices.Clone(h.pushes)
	h.mu.Unlock()
	if !slices.Equal(pushes, []string{"big"}) {
		t.Fatalf("pushes %v, want one of room big", pushes)
	}
	ch.snapshot(w, "big") // the push's answer (hub.Hub.Sync, SyncAsked)
	ch.event(w, "big", "late", true)
	tr.resume()
	r := newReader(t)
	r.drain(tr, w)
	for _, room := range []string{"big", "small"} {
		if got, want := r.typists(room), ch.typists(room); !slices.Equal(got, want) {
			t.Errorf("room %s: reader shows %v, truly typing %v", room, got, want)
		}
	}
	if w.closing() {
		t.Fatal("the reader was closed")
	}
}

// The hot path (a room event into a queue under its high-water mark)
// allocates nothing once the queue is warm.
func BenchmarkWriterSendEvent(b *testing.B) {
	w := &writer{}
	w.init(nil, nil, &Config{OutboundQueue: 256})
	frame := []byte(`{"v":1,"type":"typing_start","room":"42","user":"bob","ttl_ms":5000,"ts_ms":1764480000000}`)
	b.ReportAllocs()
	for b.Loop() {
		w.sendEvent("42", "bob", frame)
		w.dequeue()
	}
}
