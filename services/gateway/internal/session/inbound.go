package session

import (
	"time"

	"golang.org/x/time/rate"
)

// Inbound abuse accounting (docs/protocol.md, "Limits"): every client frame,
// WebSocket ping and WebSocket pong takes a token of the connection's
// bucket before anything else is done with it (no UTF-8 check, no JSON
// decoding). A frame without
// a token is rejected: the client hears about it at most once per
// [NoticeInterval] (one rate_limited error frame; the others are dropped
// silently and only counted), and more than Config.MaxRejectedWindow rejected
// frames within [AbuseWindow] close the connection with 1008 (policy
// violation, RFC 6455 section 7.4.1).
//
// The window is counted in whole seconds since the connection opened: the
// current (partial) second and the 10 whole seconds before it, so it spans
// 10 to 11 s. The extra partial second is what makes a steady overload
// reach "more than 50": with the defaults (20 frames/s, burst 40, 50) a
// client at 25 frames/s drains the burst in 40/5 = 8 s and is then rejected
// 5 times a second, exactly 50 per 10 s; a strict 10 s window would hold 50
// or 51 depending on where the frames fall, whereas 10 whole seconds plus
// one frame of the current one hold 51. It is closed about 8 + 10.2 s after
// its first frame; at 100 frames/s after 40/80 + 51/80 ≈ 1.1 s; at 19
// frames/s (below the rate) never, since no frame is ever rejected. The
// slowest steady overload that is closed rejects more than 50/11 ≈ 4.6
// frames/s: about 24.6 frames/s against the default bucket.
const (
	// AbuseWindow is the whole seconds of rejections counted before the
	// current one.
	AbuseWindow = 10 * time.Second
	// NoticeInterval is the least time between two rate_limited error
	// frames to one connection.
	NoticeInterval = time.Second

	abuseSlots = int(AbuseWindow/time.Second) + 1
)

// verdict is what [inboundGuard.admit] decided for one inbound frame.
type verdict uint8

const (
	admitted       verdict = iota // a token was taken: serve the frame
	rejectedNotice                // rate limited: tell the client (rate_limited)
	rejectedSilent                // rate limited: told less than NoticeInterval ago
	rejectedAbuse                 // rate limited, over MaxRejectedWindow in the window: close 1008
)

// inboundGuard is one connection's inbound limit: the token bucket, the
// sliding count of rejected frames and the notice throttle. It is used by
// the connection's reader only (no lock). The rejection window is allocated
// at the first rejection, so a well-behaved connection pays one pointer.
type inboundGuard struct {
	bucket      *rate.Limiter
	maxRejected int
	origin      time.Time     // connection start; slots count whole seconds since
	win         *rejectWindow // nil until the first rejection
	lastNotice  time.Time     // zero: no notice yet
}

// rejectWindow counts rejected frames per whole second since origin:
// slot i holds the count of second sec[i], i = sec % abuseSlots.
type rejectWindow struct {
	sec   [abuseSlots]int64
	count [abuseSlots]int32
}

// newInboundGuard makes the guard of a connection opened at origin, with a
// bucket of perSecond tokens/s and burst tokens, that reports abuse beyond
// maxRejected rejections in the window.
func newInboundGuard(origin time.Time, perSecond float64, burst, maxRejected int) inboundGuard {
	return inboundGuard{
		bucket:      rate.NewLimiter(rate.Limit(perSecond), burst),
		maxRejected: maxRejected,
		origin:      origin,
	}
}

// admit takes a token for one frame arriving at now (monotonic, not before
// origin) and returns the verdict.
func (g *inboundGuard) admit(now time.Time) verdict {
	if g.bucket.AllowN(now, 1) {
		return admitted
	}
	if g.win == nil {
		g.win = &rejectWindow{}
	}
	sec := int64(now.Sub(g.origin) / time.Second)
	if sec < 0 {
		sec = 0
	}
	w := g.win
	i := int(sec % int64(abuseSlots))
	if w.sec[i] != sec {
		w.sec[i], w.count[i] = sec, 0
	}
	if w.count[i] < 1<<30 {
		w.count[i]++
	}
	if g.rejected(sec) > g.maxRejected {
		return rejectedAbuse
	}
	if g.lastNotice.IsZero() || now.Sub(g.lastNotice) >= NoticeInterval {
		g.lastNotice = now
		return rejectedNotice
	}
	return rejectedSilent
}

// rejected is the number of frames rejected in second sec and the
// abuseSlots-1 seconds before it.
func (g *inboundGuard) rejected(sec int64) int {
	if g.win == nil {
		return 0
	}
	n := 0
	for i, s := range g.win.sec {
		if d := sec - s; d >= 0 && d < int64(abuseSlots) {
			n += int(g.win.count[i])
		}
	}
	return n
}
