package loadgen

import (
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
)

// The transition throttle's bucket (docs/protocol.md, "Throttle"): every
// event about a (room, user) takes a token of a bucket that refills
// throttleTokensPerWindow tokens per throttle window and holds at most
// throttleBurst; an event without a token is held back and coalesced
// with the user's next, and only the user's final state is published.
const (
	throttleBurst           = 4
	throttleTokensPerWindow = 2
)

// ThrottleLoad is how a rate-mode run's typing compares with the
// transition throttle of an Ellipsis gateway and worker.
type ThrottleLoad struct {
	// PerTypist is the state changes (starts + stops) each typing
	// connection sent over the run, on average.
	PerTypist float64
	// Through is how many of them the bucket lets through at once over
	// the run's duration: throttleBurst + throttleTokensPerWindow per
	// throttle window.
	Through float64
}

// Outruns reports whether the run's typists sent more state changes than
// the throttle lets through: Ellipsis then holds back and coalesces the
// surplus by contract, so the run's missing deliveries and its tail are
// the throttle's, not the system's capacity.
func (t ThrottleLoad) Outruns() bool { return t.PerTypist > t.Through }

// throttleLoad compares r with a throttle window of throttle (the
// protocol's default, config.Default().TypingThrottle, when the gateway
// runs with it: GET /v1/config does not tell it). ok is false for runs
// it does not apply to: not Ellipsis, not rate mode, no typists, or no
// duration.
func throttleLoad(r *Result, throttle time.Duration) (t ThrottleLoad, ok bool) {
	if r.System != SystemEllipsis || r.Mode != ModeRate || r.TypingConns <= 0 || r.DurationSeconds <= 0 || throttle <= 0 {
		return ThrottleLoad{}, false
	}
	t.PerTypist = float64(r.Sent.Starts+r.Sent.Stops) / float64(r.TypingConns)
	t.Through = throttleBurst + throttleTokensPerWindow*r.DurationSeconds/throttle.Seconds()
	return t, true
}

// defaultThrottleLoad is throttleLoad at the protocol's default throttle
// (2 s), which tools/loadgen/peers.sh runs Ellipsis with.
func defaultThrottleLoad(r *Result) (ThrottleLoad, bool) {
	return throttleLoad(r, defaultThrottle())
}

// defaultThrottle is the protocol's default ELLIPSIS_TYPING_THROTTLE.
func defaultThrottle() time.Duration { return config.Default().TypingThrottle }
