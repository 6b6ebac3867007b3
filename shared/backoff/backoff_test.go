package backoff

import (
	"testing"
	"time"
)

func TestNextStaysInBoundsAndGrows(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	var maxSeen time.Duration
	for i := 0; i < 200; i++ {
		ceiling := min(100*time.Millisecond<<min(i, 20), time.Second)
		d := b.Next()
		if d < 50*time.Millisecond || d >= ceiling {
			t.Fatalf("attempt %d: %v outside [50ms, %v)", i, d, ceiling)
		}
		maxSeen = max(maxSeen, d)
	}
	if maxSeen < 500*time.Millisecond {
		t.Fatalf("delays never grew: max %v", maxSeen)
	}
	b.Reset()
	if d := b.Next(); d >= 100*time.Millisecond {
		t.Fatalf("after Reset: %v, want < 100ms", d)
	}
}

func TestJitterSpreads(t *testing.T) {
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		b := New(time.Second, 10*time.Second)
		b.Next()
		seen[b.Next()] = true
	}
	if len(seen) < 10 {
		t.Fatalf("50 loops chose only %d distinct delays: no jitter", len(seen))
	}
}
