package loadgen

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The stalled-readers case (issue 25): a share of the connections
// (Options.StallShare) stop calling read on their socket for
// Options.StallFor while their rooms churn, then read again. The gateway
// sees their sockets fill (their receive buffer is small:
// Options.StallRcvBuf, and their segments an Ethernet path's: stallMSS)
// and conflates their room events (docs/protocol.md,
// "Order and loss"); it closes a connection only when a write did not
// finish for ELLIPSIS_WRITE_STALL; such a connection reconnects and joins
// again, as the SDK does (client.rejoin). Measured: how many connections were
// closed (stalled and healthy), whether each ends with the exact final
// state of its room (every connection keeps a view, state.go), and the
// healthy readers' state-change latency for events sent before, during and
// after the stall, side by side.

// Stall periods of a send, for the healthy readers' latency.
const (
	stallBefore = iota
	stallDuring
	stallAfter
	stallPeriods
)

// stallWindow is when the stalled connections do not read, in ns of the
// run's clock; to 0 while none is set.
type stallWindow struct {
	from, to atomic.Int64

	mu   sync.Mutex
	hist [stallPeriods]*hdrhistogram.Histogram // healthy readers' state-change latency by the send's period, µs

	closedStalled, closedHealthy, rejoined atomic.Int64
}

// set fixes the window [from, to) (mono ns).
func (w *stallWindow) set(from, to int64) {
	w.from.Store(from)
	w.to.Store(to)
}

// period is the stall period of a send at mono ns t.
func (w *stallWindow) period(t int64) int {
	from, to := w.from.Load(), w.to.Load()
	switch {
	case to == 0 || t < from:
		return stallBefore
	case t < to:
		return stallDuring
	}
	return stallAfter
}

// record adds a healthy reader's state-change latency (ns) of an event
// sent at sentAt.
func (w *stallWindow) record(sentAt, ns int64) {
	us := min(max(ns/microsecond, histMin), histMax)
	p := w.period(sentAt)
	w.mu.Lock()
	if w.hist[p] == nil {
		w.hist[p] = newHist()
	}
	_ = w.hist[p].RecordValue(us)
	w.mu.Unlock()
}

// wait blocks a stalled reader while now (mono ns) is inside the window.
func (w *stallWindow) wait(c clock) {
	from, to := w.from.Load(), w.to.Load()
	if to == 0 {
		return
	}
	if now := c.mono(); now >= from && now < to {
		time.Sleep(time.Duration(to - now))
	}
}

// latencies summarises the three periods.
func (w *stallWindow) latencies() (before, during, after Latency) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out [stallPeriods]Latency
	for i, h := range w.hist {
		if h != nil {
			out[i] = summarize(h)
		}
	}
	return out[stallBefore], out[stallDuring], out[stallAfter]
}

// pickShare reports whether index i of n is among the share of them
// picked, spread evenly ((i*k) mod n < k with k = share*n rounded).
func pickShare(i, n int, share float64) bool {
	k := int64(share*float64(n) + 0.5)
	return k > 0 && (int64(i)*k)%int64(n) < k
}

// stallMSS is the TCP maximum segment size the stalled connections
// announce (TCP_MAXSEG before the connect): an Ethernet path's. On
// loopback the MSS is about 64 KiB, and Linux sizes a socket's send
// buffer from it (about 2 × 10 segments at the start), so the gateway's
// kernel would take over a megabyte for a reader that stopped reading
// before its writes block, which no real network path gives it.
const stallMSS = 1448

// stallControl returns a dialer Control that sets SO_RCVBUF to rcvBuf
// bytes (when above 0; the TCP window is sized by it) and TCP_MAXSEG to
// stallMSS before the connect.
func stallControl(rcvBuf int) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if rcvBuf > 0 {
				serr = setRcvBuf(fd, rcvBuf)
			}
			if serr == nil {
				serr = setMSS(fd, stallMSS)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}
}

// StallResult is the stalled-readers case of a run.
type StallResult struct {
	Stalled    int     `json:"stalled"`
	Healthy    int     `json:"healthy"`
	AtSeconds  float64 `json:"at_s"`
	ForSeconds float64 `json:"for_s"`
	RcvBuf     int     `json:"rcvbuf_bytes"`
	// Closed connections (by the gateway, or cut) before the end of the
	// settle.
	ClosedStalled int64 `json:"closed_stalled"`
	ClosedHealthy int64 `json:"closed_healthy"`
	// Rejoined: closed connections that reconnected and joined again (as
	// the SDK does), their view replaced by the `joined` snapshot.
	Rejoined int64 `json:"rejoined"`
	// Connections whose view at the end of the settle was the exact final
	// state of their room.
	ExactStalled int `json:"exact_stalled"`
	ExactHealthy int `json:"exact_healthy"`
	// The healthy readers' state-change latency of events sent before,
	// during and after the stall.
	HealthyBefore Latency `json:"healthy_before"`
	HealthyDuring Latency `json:"healthy_during"`
	HealthyAfter  Latency `json:"healthy_after"`
}
