package backoff

import (
	"context"
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

// Sleep waits its delay, and returns false at once when ctx ends first.
func TestSleepStopsWithContext(t *testing.T) {
	b := New(time.Millisecond, time.Millisecond)
	if !b.Sleep(context.Background()) {
		t.Fatal("Sleep with a live context returned false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	long := New(time.Hour, time.Hour)
	done := make(chan bool, 1)
	go func() { done <- long.Sleep(ctx) }()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("Sleep with an ended context returned true")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Sleep did not return when its context ended")
	}
}
