// Package backoff computes reconnect and retry delays with "full jitter"
// (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015): the n-th
// delay is uniform in [0, min(Max, Min·2^n)), so that many clients that
// failed together (every gateway after a Redis restart) do not retry in
// lockstep. A floor of Min/2 keeps a tight loop from spinning.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the state of one retry loop. The zero value is not usable:
// set Min and Max (Min > 0, Max >= Min). It is not safe for concurrent use;
// each loop owns its own.
type Backoff struct {
	// Min is the ceiling of the first delay and the unit of growth.
	Min time.Duration
	// Max caps every delay.
	Max time.Duration

	attempt int
}

// New returns a Backoff from min to max.
func New(min, max time.Duration) *Backoff { return &Backoff{Min: min, Max: max} }

// Next returns the delay before the next attempt, in [Min/2, ceiling),
// where ceiling doubles from Min on every call up to Max.
func (b *Backoff) Next() time.Duration {
	ceiling := b.Max
	if b.attempt < 32 {
		if c := b.Min << b.attempt; c > 0 && c < b.Max {
			ceiling = c
		}
	}
	b.attempt++
	floor := b.Min / 2
	if ceiling <= floor {
		return ceiling
	}
	return floor + rand.N(ceiling-floor)
}

// Sleep waits Next() and reports true, or false as soon as ctx ends.
func (b *Backoff) Sleep(ctx context.Context) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Reset starts over from Min (after a success).
func (b *Backoff) Reset() { b.attempt = 0 }
