package session

import (
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The guard's clock is the now passed to admit: these tests drive it by
// hand. The gateway's defaults: 20 frames/s, burst 40, 50 tolerated
// (ELLIPSIS_INBOUND_RATE, ELLIPSIS_INBOUND_BURST, ELLIPSIS_INBOUND_MAX_REJECTED).
const (
	testRate  = 20
	testBurst = 40
	testMax   = 50
)

var origin = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// flood sends frames at perSecond, evenly spaced, for at most d, and
// returns when the guard first answered rejectedAbuse (-1: never), how many
// notices and rejections it gave before that.
func flood(g *inboundGuard, perSecond float64, d time.Duration) (closedAt time.Duration, notices, rejected int) {
	step := time.Duration(float64(time.Second) / perSecond)
	for t := time.Duration(0); t <= d; t += step {
		switch g.admit(origin.Add(t)) {
		case rejectedAbuse:
			return t, notices, rejected + 1
		case rejectedNotice:
			notices++
			rejected++
		case rejectedSilent:
			rejected++
		}
	}
	return -1, notices, rejected
}

func TestInboundGuardRates(t *testing.T) {
	for _, tc := range []struct {
		rate     float64
		min, max time.Duration // closed within [min, max]; max 0: never closed
	}{
		// 40/80 s to drain the burst, then 51 rejections at 80/s.
		{rate: 100, min: time.Second, max: 1200 * time.Millisecond},
		// 8 s to drain the burst at 5/s net, then 5 rejections a second:
		// 10 whole seconds of 5 plus one in the current second.
		{rate: 25, min: 17 * time.Second, max: 19 * time.Second},
		{rate: 24.7, min: 15 * time.Second, max: 60 * time.Second},
		{rate: 24, max: 0},
		{rate: 19, max: 0},
		{rate: 20, max: 0},
	} {
		g := newInboundGuard(origin, testRate, testBurst, testMax)
		closedAt, notices, rejected := flood(&g, tc.rate, 5*time.Minute)
		switch {
		case tc.max == 0 && closedAt >= 0:
			t.Errorf("%g frames/s: closed after %v, want never", tc.rate, closedAt)
		case tc.max > 0 && (closedAt < tc.min || closedAt > tc.max):
			t.Errorf("%g frames/s: closed after %v (%d rejected), want within [%v, %v]", tc.rate, closedAt, rejected, tc.min, tc.max)
		}
		if tc.rate <= testRate && rejected > 0 {
			t.Errorf("%g frames/s: %d rejected under the rate", tc.rate, rejected)
		}
		// At most one notice per second of rejections.
		if span := closedAt; span > 0 && float64(notices) > span.Seconds()+1 {
			t.Errorf("%g frames/s: %d notices in %v", tc.rate, notices, span)
		}
		t.Logf("%g frames/s: closed at %v, %d rejected, %d notices", tc.rate, closedAt, rejected, notices)
	}
}

func TestInboundGuardNoticeOncePerSecond(t *testing.T) {
	g := newInboundGuard(origin, 0.5, 1, 1000) // a token every 2 s
	if v := g.admit(origin); v != admitted {
		t.Fatalf("first frame: %v", v)
	}
	var got []verdict
	for i := 1; i <= 5; i++ { // 5 rejections within 50 ms
		got = append(got, g.admit(origin.Add(time.Duration(i)*10*time.Millisecond)))
	}
	want := []verdict{rejectedNotice, rejectedSilent, rejectedSilent, rejectedSilent, rejectedSilent}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("verdicts %v, want %v", got, want)
		}
	}
	steps := []struct {
		at   time.Duration
		want verdict
	}{
		{1009 * time.Millisecond, rejectedSilent}, // 999 ms after the notice
		{1010 * time.Millisecond, rejectedNotice}, // a second after it
		{1500 * time.Millisecond, rejectedSilent},
		{2000 * time.Millisecond, admitted}, // a token came back
		{2100 * time.Millisecond, rejectedNotice},
	}
	for _, s := range steps {
		if v := g.admit(origin.Add(s.at)); v != s.want {
			t.Fatalf("at %v: %v, want %v", s.at, v, s.want)
		}
	}
}

// The window slides: rejections older than the current second and the 10
// before it are forgotten, so bursts spread out never add up.
func TestInboundGuardWindowSlides(t *testing.T) {
	g := newInboundGuard(origin, 1, 1, 50)
	g.admit(origin) // the only token
	// 50 rejections in second 0: at the limit, not over it.
	for i := range 50 {
		if v := g.admit(origin.Add(time.Duration(i) * time.Millisecond)); v == rejectedAbuse {
			t.Fatalf("closed at rejection %d of 50", i+1)
		}
	}
	if n := g.rejected(0); n != 50 {
		t.Fatalf("rejected(0) = %d", n)
	}
	// Second 10 still counts second 0: one more is over.
	h := g
	h.win = &rejectWindow{}
	*h.win = *g.win
	h.bucket = newInboundGuard(origin, 0.001, 1, 50).bucket // no token ever comes back
	h.bucket.AllowN(origin, 1)
	if v := h.admit(origin.Add(10*time.Second + 999*time.Millisecond)); v != rejectedAbuse {
		t.Fatalf("51st rejection in second 10: %v, want abuse", v)
	}
	// Second 11 no longer counts second 0.
	h2 := newInboundGuard(origin, 0.001, 1, 50)
	h2.admit(origin)
	h2.win = &rejectWindow{}
	*h2.win = *g.win
	if v := h2.admit(origin.Add(11 * time.Second)); v == rejectedAbuse {
		t.Fatal("second 0's rejections still counted in second 11")
	}
	if n := h2.rejected(11); n != 1 {
		t.Fatalf("rejected(11) = %d, want 1", n)
	}
	// A slot reused after a full turn starts from zero.
	if v := h2.admit(origin.Add(22 * time.Second)); v == rejectedAbuse {
		t.Fatal("a reused slot kept its old count")
	}
	if n := h2.rejected(22); n != 1 {
		t.Fatalf("rejected(22) = %d, want 1 (slot 0 reused)", n)
	}
}

// A well-behaved connection never allocates the window.
func TestInboundGuardLazyWindow(t *testing.T) {
	g := newInboundGuard(origin, testRate, testBurst, testMax)
	if closedAt, _, rejected := flood(&g, 19, time.Minute); closedAt >= 0 || rejected != 0 {
		t.Fatalf("19/s: closed at %v, %d rejected", closedAt, rejected)
	}
	if g.win != nil {
		t.Fatal("window allocated without a rejection")
	}
}

// The cost of a frame over the limit (admit's reject path, the window
// allocated already) against decoding the same frame, which is what a
// limit checked after decoding would cost. docs/BENCHMARKS.md has the numbers.
func BenchmarkInboundReject(b *testing.B) {
	g := newInboundGuard(origin, 1e-9, 1, 1<<30)
	g.admit(origin)
	now := origin
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		if g.admit(now) == admitted {
			b.Fatal("admitted")
		}
	}
}

func BenchmarkInboundDecodeInstead(b *testing.B) {
	frame := []byte(`{"type":"typing_start","room":"room:42","id":"c17"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := protocol.DecodeClientFrame(frame); err != nil {
			b.Fatal(err)
		}
	}
}
