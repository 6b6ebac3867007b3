package session

import (
	"strings"
	"testing"
)

// A room's latest summary replaces its unwritten one in place; a written
// one, or one queued before a summaryBarrier of its room, is not replaced; other
// frames keep their order around them.
func TestWriterConflatesSummariesPerRoom(t *testing.T) {
	w := &writer{cfg: &Config{OutboundQueue: 1000}}
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
	w.enqueue([]byte("e1"))
	w.sendSummary("a", []byte("a1"))
	w.sendSummary("b", []byte("b1"))
	w.enqueue([]byte("e2"))
	w.sendSummary("a", []byte("a2"))
	w.sendSummary("a", []byte("a3"))
	if got := drain(); got != "e1 a3 b1 e2" {
		t.Fatalf("queue %q, want e1 a3 b1 e2", got)
	}
	// Partly written: the written summary is not touched.
	w.sendSummary("a", []byte("a4"))
	w.enqueue([]byte("e3"))
	if f, _ := w.dequeue(); string(f) != "a4" {
		t.Fatalf("first frame %q", f)
	}
	w.sendSummary("a", []byte("a5"))
	w.sendSummary("b", []byte("b2"))
	w.summaryBarrier("a") // e.g. an "unwatched" answer about a follows
	w.enqueue([]byte("unwatched"))
	w.sendSummary("b", []byte("b3"))
	w.sendSummary("a", []byte("a6"))
	w.sendSummary("b", []byte("b4"))
	if got := drain(); got != "e3 a5 b4 unwatched a6" {
		t.Fatalf("queue %q, want e3 a5 b4 unwatched a6 (the barrier holds a only)", got)
	}
	if w.sums != nil {
		t.Fatalf("drained queue keeps %d summary entries", len(w.sums))
	}
	// Many rounds with the queue compacting under it: at most one summary
	// per room waits, and the last one written is the latest.
	var written []string
	for round := range 50 {
		for r := range 10 {
			w.sendSummary(string(rune('a'+r)), []byte{byte('a' + r), byte('0' + round%10)})
		}
		for range 3 {
			w.enqueue([]byte("x"))
			f, _ := w.dequeue()
			written = append(written, string(f))
		}
	}
	got := drain()
	if n := len(strings.Fields(got)) - strings.Count(got+" ", "x "); n > 10 {
		t.Fatalf("%d summaries queued for 10 rooms: %q", n, got)
	}
	all := append(written, strings.Fields(got)...)
	for r := range 10 {
		last := ""
		for _, f := range all {
			if f != "x" && f[0] == byte('a'+r) {
				last = f
			}
		}
		if want := string([]byte{byte('a' + r), '9'}); last != want {
			t.Fatalf("room %c: last summary written %q, want %s", 'a'+r, last, want)
		}
	}
}
