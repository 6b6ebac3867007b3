package loadgen

import (
	"sync"
	"time"
)

// How end-to-end latency is measured.
//
// A room event that reaches a client carries no field of the sender's
// frame: the worker builds it from the command (docs/protocol.md, "Redis"), so a
// send timestamp cannot travel with it. Instead every sender keeps a log of
// what it sent, per typist (one connection = one user = one typist in one
// room), and every receiver matches each event it reads against that log:
//
//   - Each log entry is one typing frame the sender wrote: kindStart (the
//     first typing_start of a burst), kindRefresh (typing_start while the
//     burst goes on) or kindStop (typing_stop), with the monotonic time
//     taken right before the write and the wall clock in unix ms.
//   - Per (room, user) the server keeps order (docs/protocol.md, "Order and loss"), so
//     events arrive in the order of the sends that caused them. Each
//     receiver keeps, per typist, a cursor: the log index its last event
//     matched. A new event only ever matches an entry after the cursor
//     (monotonically increasing expectations), and only an entry of its
//     own kind:
//   - typing_stop (reason stopped) matches the first kindStop after the
//     cursor. Stops of a visible user are always published.
//   - typing_start for a user the receiver does not show matches the first
//     kindStart (or kindRefresh: a refresh reaching a server that had
//     already expired the entry is published as a new start) after the
//     cursor. Starts that make a user visible are always published.
//   - typing_start for a user already shown is a refresh. The server's
//     throttle may have swallowed earlier refreshes (at most one fan-out
//     per throttle window), so the first kindRefresh after the cursor is
//     not necessarily the one that was published: the match is the last
//     kindRefresh of the burst sent no later than the event's ts_ms (the
//     worker's Redis TIME at publish, forwarded as is by the gateway), or
//     the first one when the frame has no ts_ms. Refreshes of one typist
//     are at least the client refresh interval (4 s) apart, so this is
//     unambiguous unless the pipeline lags by seconds.
//   - typing_stop with another reason (expired, disconnected, left) does
//     not come from a send: it is counted by reason and hides the user.
//
// Latency is the receiver's read time minus the matched entry's send time,
// both monotonic in this process. Latencies of state changes (start, stop:
// what makes a name appear or go) and of refreshes are kept apart.
// Expected deliveries are counted per send (the room's other members), so
// lost deliveries show up as expected minus matched.

// kind is what a sent typing frame meant.
type kind uint8

const (
	kindStart kind = iota + 1
	kindRefresh
	kindStop
)

// entry is one typing frame a sender wrote.
type entry struct {
	mono   int64 // ns since the run's base (monotonic)
	wallMs int64 // unix ms (floor)
	kind   kind
}

// typistLog is the send log of one typist (one connection).
type typistLog struct {
	mu      sync.Mutex
	entries []entry
}

func (l *typistLog) add(e entry) {
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

// recvState is one receiver's view of one typist.
type recvState struct {
	cursor int32 // index of the last matched entry, -1 before any
	shown  bool  // the typist is shown (last event was a start)
}

// matchResult is what [match] decided for one event.
type matchResult struct {
	ok      bool
	kind    kind  // kind of the matched entry
	sentAt  int64 // mono ns of the matched entry
	refresh bool  // the event was a refresh (start for a shown user)
}

// match finds the log entry an event of typing_start (start true) or
// typing_stop with reason stopped (start false) answers, for a receiver in
// state st, and advances st. tsMs is the event's ts_ms (0: absent).
func (l *typistLog) match(st *recvState, start bool, tsMs int64) matchResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := int(st.cursor) + 1
	found := -1
	refresh := start && st.shown
	switch {
	case !start:
		for i := from; i < len(l.entries); i++ {
			if l.entries[i].kind == kindStop {
				found = i
				break
			}
		}
	case !refresh:
		for i := from; i < len(l.entries); i++ {
			if k := l.entries[i].kind; k == kindStart || k == kindRefresh {
				found = i
				break
			}
		}
	default:
		for i := from; i < len(l.entries); i++ {
			e := l.entries[i]
			if e.kind == kindStop {
				break // the refresh belongs to the burst before this stop
			}
			if e.kind != kindRefresh {
				continue
			}
			if found < 0 {
				found = i // the first refresh after the cursor
				if tsMs == 0 {
					break
				}
				continue
			}
			if e.wallMs <= tsMs+1 { // +1: ms floors on both sides
				found = i // a later refresh, sent before the publish: the throttle swallowed the earlier
			} else {
				break
			}
		}
	}
	if found < 0 {
		return matchResult{refresh: refresh}
	}
	st.cursor = int32(found)
	st.shown = start
	e := l.entries[found]
	return matchResult{ok: true, kind: e.kind, sentAt: e.mono, refresh: refresh}
}

// clock gives monotonic offsets and wall ms from one base.
type clock struct {
	base     time.Time
	baseWall int64 // unix ns of base
}

func newClock() clock {
	now := time.Now()
	return clock{base: now, baseWall: now.UnixNano()}
}

// now returns ns since base (monotonic) and the wall clock in unix ms.
func (c clock) now() (mono, wallMs int64) {
	mono = int64(time.Since(c.base))
	return mono, (c.baseWall + mono) / int64(time.Millisecond)
}

// mono returns ns since base (monotonic).
func (c clock) mono() int64 { return int64(time.Since(c.base)) }
