package session

import (
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
