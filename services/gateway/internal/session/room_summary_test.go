package session

import (
	"strconv"
	"strings"
	"testing"
)

// A room in summary mode: its latest summary replaces its unwritten one in
// place while no other frame of the room was queued after it, supersedes
// the room's conflated events, and is no answer (a reader that stopped
// reading is not closed for its summaries: answerCap is not reached).
func TestWriterRoomSummaryReplacesUnwritten(t *testing.T) {
	h := &fakeHost{read: make(chan struct{})}
	w := &writer{host: h, cfg: &Config{OutboundQueue: 4}}
	h.w = w
	drain := func() string {
		var got []string
		for {
			f, ok := w.dequeue()
			if !ok {
				return strings.Join(got, " ")
			}
			got = append(got, string(f))
		}
	}
	// Many more summaries than answerCap (4) for two rooms, never read:
	// one per room waits, the latest, and nothing overflows.
	for i := range 100 {
		w.sendRoomSummary("a", []byte("a"+string(rune('0'+i%10))))
		w.sendRoomSummary("b", []byte("b"+string(rune('0'+i%10))))
	}
	if h.overflows != 0 {
		t.Fatalf("%d overflows: summaries counted as answers", h.overflows)
	}
	if got := drain(); got != "a9 b9" {
		t.Fatalf("queue %q, want a9 b9", got)
	}

	// Another frame of the room after the summary keeps it: the next
	// summary is queued after that frame (an answer about the room, or a
	// snapshot, or an event sent directly: a queue under its high-water
	// mark).
	w = &writer{host: h, cfg: &Config{OutboundQueue: 1000}}
	h.w = w
	w.sendRoomSummary("a", []byte("s1"))
	w.sendReply("a", []byte("left"))
	w.sendRoomSummary("a", []byte("s2"))
	w.sendSnapshot("a", []byte("joined"))
	w.sendRoomSummary("a", []byte("s3"))
	w.sendEvent("a", "u", []byte("ev"))
	w.sendRoomSummary("a", []byte("s4"))
	w.sendRoomSummary("a", []byte("s5"))
	if got := drain(); got != "s1 left s2 joined s3 ev s5" {
		t.Fatalf("queue %q, want s1 left s2 joined s3 ev s5", got)
	}
	// A written summary is not touched.
	w.sendRoomSummary("a", []byte("s6"))
	if f, _ := w.dequeue(); string(f) != "s6" {
		t.Fatalf("first frame %q", f)
	}
	w.sendRoomSummary("a", []byte("s7"))
	if got := drain(); got != "s7" {
		t.Fatalf("queue %q, want s7", got)
	}
	if w.rsums != nil {
		t.Fatalf("drained queue keeps %d room summary entries", len(w.rsums))
	}
}

// Conflating: a room summary supersedes the room's conflated events (they
// were read before it), whether it is queued or replaces one in place.
func TestWriterRoomSummarySupersedesConflated(t *testing.T) {
	h := &fakeHost{read: make(chan struct{})}
	w := &writer{host: h, cfg: &Config{OutboundQueue: 4, ConflateRoomCap: 100}}
	h.w = w
	for i := range 10 {
		w.sendEvent("a", "u"+string(rune('0'+i)), []byte("e"))
	}
	if !w.inConf {
		t.Fatal("not conflating past the high-water mark")
	}
	w.sendRoomSummary("a", []byte("s1"))
	if _, n := w.conflatedEntries(); n != 0 {
		t.Fatalf("%d conflated entries left under a summary", n)
	}
	w.sendEvent("a", "late", []byte("late")) // conflated, written after the queue
	w.sendRoomSummary("a", []byte("s2"))     // in place of s1: supersedes "late"
	if _, n := w.conflatedEntries(); n != 0 {
		t.Fatalf("%d conflated entries left under the replacing summary", n)
	}
	var got []string
	for {
		f, ok := w.dequeue()
		if !ok {
			break
		}
		got = append(got, string(f))
	}
	if s := strings.Join(got, " "); !strings.HasSuffix(s, "s2") || strings.Contains(s, "s1") || strings.Contains(s, "late") {
		t.Fatalf("written %q: want the queued events, then s2 only", s)
	}
	if w.inConf {
		t.Fatal("still conflating after the drain")
	}
}

// A room whose conflated users overflow while its room summary is still
// queued gets its deferred snapshot push asked once that summary is
// written (a room summary is no answer, but it is a snapshot of the room),
// and a summary replacing one in place ends an awaited push: conflation
// never waits for a push that nobody asks.
func TestWriterRoomSummaryAndDeferredPush(t *testing.T) {
	h := &fakeHost{read: make(chan struct{})}
	w := &writer{host: h, cfg: &Config{OutboundQueue: 4, ConflateRoomCap: 2}}
	h.w = w
	overflow := func() {
		for i := range 3 {
			w.sendEvent("a", "u"+strconv.Itoa(i), []byte("e"))
		}
	}
	w.enqueue([]byte("x"))
	w.enqueue([]byte("y"))
	overflow() // conflating; 3 users > cap 2: push 1 asked
	if len(h.pushes) != 1 {
		t.Fatalf("pushes %v, want one", h.pushes)
	}
	w.sendRoomSummary("a", []byte("s1")) // queued: ends push 1
	overflow()                           // push 2 deferred: s1 still queued
	if len(h.pushes) != 1 {
		t.Fatalf("pushes %v: asked while the room's summary is queued", h.pushes)
	}
	w.sendRoomSummary("a", []byte("s2")) // replaces s1 in place: ends push 2
	if o := w.outbound(); o.PushesAwaited != 0 {
		t.Fatalf("%d pushes awaited after a summary replaced in place", o.PushesAwaited)
	}
	overflow() // push 3 deferred again: s2 still queued
	for {
		if _, ok := w.dequeue(); !ok {
			break
		}
	}
	if len(h.pushes) != 2 {
		t.Fatalf("pushes %v: the deferred push was not asked once the summary was written", h.pushes)
	}
	w.sendSnapshot("a", []byte("pushed")) // the push's answer
	for {
		if _, ok := w.dequeue(); !ok {
			break
		}
	}
	if o := w.outbound(); o.Conflating || o.PushesAwaited != 0 {
		t.Fatalf("after the pushed snapshot: %+v", o)
	}
}
