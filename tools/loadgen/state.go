package loadgen

import (
	"sync"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// How the delay to the state is measured (the big-room, stalled-readers
// and watch cases of issue 25).
//
// Event latency (track.go) needs one event per change; a member of a room
// in summary mode (docs/protocol.md, "Summary mode") gets no events, only
// `typing` frames that replace the room's list, and a conflated slow
// reader gets only the latest event per typist. What both still promise is
// the state: a tracked connection keeps its view of its room (typist ->
// shown), set by typing_start / typing_stop and replaced by every `typing`
// frame. For each state change a typist sent (start or stop; refreshes do
// not change the state), the delay to the state seen by a sampled member is
// the time from the send to the first frame read after which that member's
// view shows the new state. A change overtaken by the typist's next one
// before the member showed it is counted as superseded, not as a delay.
// At the end of the settle the view of every tracked connection is
// compared with the last state each typist of its room sent: the exact
// final state.

// view is a tracked connection's view of its room: which typists it shows
// and, for a sampled member, up to which change of each typist the delay
// to the state has been recorded. Guarded by mu: the reader goroutine
// writes it, the settle and the final check read it.
type view struct {
	mu     sync.Mutex
	shown  map[int32]bool  // typist idx -> shown
	cursor map[int32]int32 // typist idx -> index of the last change recorded (sampled only)
}

func newView() *view {
	return &view{shown: map[int32]bool{}, cursor: map[int32]int32{}}
}

// lastChange is the last state change (start or stop) in the log after
// index after: its index, whether it turned typing on, its send time and
// how many earlier state changes after index after, sent at since (mono
// ns) or later, it overtook. ok is false when there is none.
func (l *typistLog) lastChange(after int32, since int64) (idx int32, on bool, sentAt int64, skipped int, ok bool) {
	idx, e, skipped, ok := l.lastChangeEntry(after, since)
	return idx, e.kind == kindStart, e.mono, skipped, ok
}

// lastChangeEntry is lastChange with the whole entry.
func (l *typistLog) lastChangeEntry(after int32, since int64) (idx int32, e entry, skipped int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	idx = -1
	for i := len(l.entries) - 1; i > int(after); i-- {
		k := l.entries[i].kind
		if k == kindRefresh {
			continue
		}
		if idx < 0 {
			idx, e, ok = int32(i), l.entries[i], true
			continue
		}
		if l.entries[i].mono >= since {
			skipped++
		}
	}
	return idx, e, skipped, ok
}

// lastState is whether the typist's last sent state change turned typing
// on (false before any).
func (l *typistLog) lastState() bool {
	_, on, _, _, ok := l.lastChange(-1, 0)
	return ok && on
}

// stateStats gathers the delay to the state of the sampled members.
type stateStats struct {
	mu         sync.Mutex
	delay      *hdrhistogram.Histogram // µs
	superseded int64
	partial    int64 // `typing` frames that did not list every typist (total > listed)
}

func newStateStats() *stateStats { return &stateStats{delay: newHist()} }

func (s *stateStats) record(ns int64) {
	us := min(max(ns/microsecond, histMin), histMax)
	s.mu.Lock()
	_ = s.delay.RecordValue(us)
	s.mu.Unlock()
}

// checkState records, for a sampled member c, the delay to typist t's
// latest state change if c's view now shows it. tsMs is the ts_ms of the
// event that set the view (0 for a snapshot): an event published before
// the change was sent (ts_ms, the worker's Redis TIME, below its send
// time) is an older one that happens to show the same state, so a member
// far behind in the stream does not count it as shown. Changes sent
// before c started tracking (a watcher's first watch frame) are neither
// delays nor superseded. Called with c.view.mu held.
func (c *client) checkState(t *client, now, tsMs int64) {
	v := c.view
	cur, seen := v.cursor[int32(t.idx)]
	if !seen {
		cur = -1
	}
	since := c.trackFrom.Load()
	idx, e, skipped, ok := t.log.lastChangeEntry(cur, since)
	on, sentAt := e.kind == kindStart, e.mono
	if !ok || v.shown[int32(t.idx)] != on || (tsMs > 0 && tsMs+1 < e.wallMs) { // +1: ms floors on both sides
		return
	}
	v.cursor[int32(t.idx)] = idx
	s := c.stateOut
	if sentAt >= since {
		s.record(now - sentAt)
	}
	if skipped > 0 {
		s.mu.Lock()
		s.superseded += int64(skipped)
		s.mu.Unlock()
	}
}

// trackEvent applies a room event to c's view.
func (c *client) trackEvent(ev protocol.ServerFrame, now int64) {
	t := c.r.typist(ev.User)
	if t == nil || t == c || t.room != c.room {
		return
	}
	c.view.mu.Lock()
	c.view.shown[int32(t.idx)] = ev.Type == "typing_start"
	if c.sample {
		c.checkState(t, now, ev.TsMs)
	}
	c.view.mu.Unlock()
}

// trackRoom replaces c's view of tracked room index ri by a frame's
// list (users: a `typing` frame, a summary), total its typists.
func (c *client) trackRoom(ri int, users []protocol.Typist, total int, now int64) {
	if total > len(users) {
		c.stateOut.mu.Lock()
		c.stateOut.partial++
		c.stateOut.mu.Unlock()
	}
	listed := make(map[string]bool, len(users))
	for _, u := range users {
		listed[u.User] = true
	}
	c.view.mu.Lock()
	for _, t := range c.r.roomTypists[ri] {
		if t == c {
			continue
		}
		c.view.shown[int32(t.idx)] = listed[t.user]
		if c.sample {
			c.checkState(t, now, 0)
		}
	}
	c.view.mu.Unlock()
}

// exact reports whether c's view shows the last state every other typist
// of its tracked rooms sent.
func (c *client) exact() bool {
	c.view.mu.Lock()
	defer c.view.mu.Unlock()
	for _, ri := range c.tracked {
		for _, t := range c.r.roomTypists[ri] {
			if t != c && c.view.shown[int32(t.idx)] != t.log.lastState() {
				return false
			}
		}
	}
	return true
}

// changesSince counts the state changes (start, stop) in the log sent at
// since (mono ns) or later.
func (l *typistLog) changesSince(since int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, e := range l.entries {
		if e.kind != kindRefresh && e.mono >= since {
			n++
		}
	}
	return n
}

// expectedChanges is how many state changes the sampled clients among cs
// were to show.
func expectedChanges(cs []*client) int64 {
	var n int64
	for _, c := range cs {
		if !c.sample {
			continue
		}
		since := c.trackFrom.Load()
		for _, ri := range c.tracked {
			for _, t := range c.r.roomTypists[ri] {
				if t != c {
					n += t.log.changesSince(since)
				}
			}
		}
	}
	return n
}

// setExpected fills Expected and NeverShown from the sampled clients.
func (s *StateResult) setExpected(cs []*client) {
	s.Expected = expectedChanges(cs)
	s.NeverShown = max(0, s.Expected-s.Delay.Count-s.Superseded)
}

// exactCount counts the tracked clients among cs whose view is the exact
// final state, and how many are tracked; pick selects the clients counted
// (nil: all).
func exactCount(cs []*client, pick func(*client) bool) (exact, tracked int) {
	for _, c := range cs {
		if c.view == nil || (pick != nil && !pick(c)) {
			continue
		}
		tracked++
		if c.exact() {
			exact++
		}
	}
	return exact, tracked
}

// StateResult is the delay to the state of a run with tracked connections
// (Options.StateSample, stalled readers, watchers).
type StateResult struct {
	// Sampled is how many members measured the delay to the state.
	Sampled int `json:"sampled"`
	// Delay: from a typist's send of a state change to the first frame
	// after which a sampled member shows it (an event or a `typing`
	// frame), ms.
	Delay Latency `json:"delay"`
	// Superseded: changes overtaken by the typist's next change before a
	// sampled member showed them (per member).
	Superseded int64 `json:"superseded"`
	// Expected: state changes the sampled members were to show (each
	// change of each typist of their rooms, sent after they started
	// tracking); NeverShown: those neither shown nor superseded by the end
	// of the settle (Expected - Delay.Count - Superseded).
	Expected   int64 `json:"expected"`
	NeverShown int64 `json:"never_shown"`
	// PartialSnapshots: `typing` frames read that did not list every
	// typist (total above the list: ELLIPSIS_SNAPSHOT_MAX).
	PartialSnapshots int64 `json:"partial_snapshots"`
	// Tracked connections, and those whose view at the end of the settle
	// was the exact final state of their room.
	Tracked    int `json:"tracked"`
	ExactFinal int `json:"exact_final"`
}
