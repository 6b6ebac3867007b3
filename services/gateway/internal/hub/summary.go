package hub

// Summary mode for big rooms (docs/protocol.md, "Summary mode").
//
// # Why
//
// Fan-out costs typists × members: every typing_start and typing_stop is
// written to every local member. A room with more than SummaryMembers
// (ELLIPSIS_ROOM_SUMMARY_MEMBERS, default 500) local members instead gets,
// at most once per SummaryInterval (ELLIPSIS_ROOM_SUMMARY_INTERVAL,
// default 1 s) and only when something changed, one coalesced "typing"
// snapshot frame per member: the first typists up to the snapshot cap
// (ELLIPSIS_SNAPSHOT_MAX) and "total", self-filtered. The SDK already
// treats "typing" as "replace the room's list" (clients/js Room._receive),
// so applications see no difference but the rate.
//
// # Where the state comes from
//
// The summary is the workers' snapshot, read through the shared flights
// (flights.go) after the room turned dirty, not a typist set rebuilt from
// the room's events: events since the subscription cannot tell who was
// typing before it (a typist who started before the first local member
// joined and is still typing sends no new event), and the snapshot is
// already capped and sorted as the frame needs. It costs one snapshot
// request per big room per interval while it changes, shared with any join
// or sync of the room at the same time, and the gateway keeps no
// per-typist state: a room in summary mode holds three flags and a counter,
// whatever the number of typists or events (memory bounded by
// construction).
//
// Exactness: a tick clears the room's dirty flag at t0, then asks for a
// snapshot read after t0. Any event received after t0 sets dirty again, so
// it is in a later summary; any event received before t0 was published
// before the read began, so the read reflects it. The last summary after
// the room stops changing is therefore the room's final state.
//
// # Per room
//
//   - modeEvents: as without summary mode; nothing changes on the wire.
//   - modeSummary: entered in Join when the room has more than
//     SummaryMembers members. fanOut only marks the room dirty (O(1) per
//     event instead of O(members)). Nothing is sent on entering: every
//     member has the exact state from the events so far, and the next
//     summary is the full state. Members held by a join or sync are
//     skipped by summaries (nothing may precede "joined"; their own
//     snapshot is read after their hold began); an event received while
//     one is held makes its release mark the room dirty, so it gets the
//     next summary.
//   - modeLeaving: entered in Leave when members fall below 90 % of
//     SummaryMembers (hysteresis: a room near the threshold does not flap).
//     Events stay suppressed until the next tick, which holds every joined
//     member at once (events are buffered from then on, as for a resync),
//     reads one snapshot after the holds and releases them with it: one
//     last summary of the current state, then the buffered events and
//     events again. Nothing is lost (every event after the holds is
//     buffered and replayed over a snapshot read after them) and no event
//     is sent twice. If that snapshot fails the holds are released and the
//     room is resynced with backoff (resync.go). A room that grows past the
//     threshold again while leaving goes back to modeSummary.
//
// Frames per member: at most one summary per interval, plus the answers
// to its own join and sync (unchanged), plus a resync after a link loss.
//
// # Locks
//
// The summarizer's mutex guards its set of rooms in summary or leaving
// mode. It is a leaf: it may be taken under a room's mutex (Join, Leave),
// and the tick copies the set and drops it before taking any room's.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Defaults of [Options] zero values: the defaults of
// ELLIPSIS_ROOM_SUMMARY_MEMBERS and ELLIPSIS_ROOM_SUMMARY_INTERVAL.
const (
	DefaultSummaryMembers  = 500
	DefaultSummaryInterval = time.Second
)

// summaryConcurrency bounds the summary snapshots in flight per tick; a
// room left out stays dirty and is served on a later tick.
const summaryConcurrency = 16

type roomMode uint8

const (
	modeEvents roomMode = iota
	modeSummary
	modeLeaving
)

// summaryExit is the member count below which a room in summary mode
// goes back to events: 90 % of the threshold (hysteresis).
func summaryExit(threshold int) int { return threshold - threshold/10 }

// summarizer ticks every SummaryInterval over the rooms not in
// modeEvents; mu guards rooms only (a leaf lock, see above).
type summarizer struct {
	h     *Hub
	mu    sync.Mutex
	rooms map[string]struct{}
}

func newSummarizer(h *Hub) *summarizer {
	return &summarizer{h: h, rooms: map[string]struct{}{}}
}

func (s *summarizer) add(room string) {
	s.mu.Lock()
	s.rooms[room] = struct{}{}
	s.mu.Unlock()
}

func (s *summarizer) remove(room string) {
	s.mu.Lock()
	delete(s.rooms, room)
	s.mu.Unlock()
}

// Summarizing returns how many rooms are in summary mode or leaving it
// (for tests and metrics).
func (h *Hub) Summarizing() int {
	h.summary.mu.Lock()
	defer h.summary.mu.Unlock()
	return len(h.summary.rooms)
}

// run ticks until the hub closes; the tick's snapshots end before it
// returns.
func (s *summarizer) run() {
	h := s.h
	defer h.wg.Done()
	t := time.NewTicker(h.opts.SummaryInterval)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
		s.tick()
	}
}

// tick serves every dirty room in summary mode and every leaving room,
// summaryConcurrency at a time, and waits for them.
func (s *summarizer) tick() {
	s.mu.Lock()
	rooms := make([]string, 0, len(s.rooms))
	for r := range s.rooms {
		rooms = append(rooms, r)
	}
	s.mu.Unlock()
	sem := make(chan struct{}, summaryConcurrency)
	var wg sync.WaitGroup
	for _, r := range rooms {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.h.summarizeRoom(r)
		}()
	}
	wg.Wait()
}

// summarizeRoom does room's part of one tick: a summary if it is dirty in
// summary mode, the last summary and the switch back to events if it is
// leaving.
func (h *Hub) summarizeRoom(name string) {
	rm := h.lookup(name)
	if rm == nil {
		return // its last member left: exitSummary removed it
	}
	switch {
	case rm.mode == modeLeaving:
		h.leaveSummary(rm) // unlocks
		return
	case rm.mode != modeSummary || !rm.dirty || rm.summarizing:
		rm.mu.Unlock()
		return
	}
	rm.dirty, rm.summarizing = false, true
	t0 := time.Now()
	rm.mu.Unlock()

	ctx, cancel := context.WithTimeout(h.ctx, h.opts.ReadyTimeout)
	snap, err := h.flights.get(ctx, name, t0)
	cancel()
	var frames summaryFrames
	if err == nil {
		frames, err = newSummaryFrames(name, snap)
	}

	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.summarizing = false
	if rm.dead || rm.mode != modeSummary {
		return // gone, or leaving: its own last summary follows
	}
	if err != nil {
		rm.dirty = true // tried again next tick
		h.badEvent.Warn("summary-failed", "room summary snapshot failed; retrying next interval (logged at most once a minute)", zap.String("room", name), zap.Error(err))
		return
	}
	h.met.RoomSummaries.Inc()
	n := 0
	for m, ms := range rm.members {
		if ms.holds > 0 || !ms.joined || ms.view.Off() {
			continue // its own snapshot comes with its release; or it takes no typing
		}
		frame := frames.of(m.User())
		if ms.view != nil {
			if frame, err = frames.viewed(name, snap, m.User(), ms.view); err != nil {
				h.log.Error("encode summary", zap.String("room", name), zap.Error(err))
				return
			}
		}
		if m.SendRoomSummary(name, frame) {
			n++
		} else {
			h.met.EventsDropped.Inc()
		}
	}
	h.met.FrameOut(protocol.TypeTyping, n)
}

// leaveSummary switches rm (locked, modeLeaving) back to events: every
// joined member is held at once, then one snapshot read after the holds
// is released to them with the events buffered meanwhile (syncHolds), as
// their last summary of the room (Member.SendRoomSummary: not an answer,
// and it replaces their unwritten summary). It unlocks rm.
func (h *Hub) leaveSummary(rm *room) {
	rm.mode = modeEvents
	h.summary.remove(rm.name)
	h.met.SummaryRooms.Dec()
	holds := make([]*Hold, 0, len(rm.members))
	for m, ms := range rm.members {
		if !ms.joined {
			// Still joining: its "joined" is read after its hold began
			// and events are buffered for it from now on. An event that
			// summary mode suppressed since its hold began may be missing
			// from that snapshot and no summary will follow: its release
			// reports an overflow, so it is pushed a fresh snapshot.
			if ms.holds > 0 && rm.events != ms.heldAt {
				ms.overflow = true
			}
			continue
		}
		if ms.view.Off() {
			continue // no summary for it
		}
		// Its last summary, not an answer: a frozen reader in rooms that
		// switch again and again is not closed for them (1013).
		hd := ms.hold(rm, m)
		hd.summary = true
		holds = append(holds, hd)
	}
	name := rm.name
	rm.mu.Unlock()
	if len(holds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.opts.ReadyTimeout)
	overflowed, err := h.syncHolds(ctx, name, holds, SyncAsked, "", nil)
	cancel()
	if err != nil {
		for _, hd := range holds {
			h.Release(hd, nil, "")
		}
	}
	if err != nil || overflowed {
		h.resync.enqueue(name)
	}
}

// enterSummary is Join's check, rm locked: a room past the threshold
// turns to (or back to) summary mode.
func (h *Hub) enterSummary(rm *room) {
	if len(rm.members) <= h.opts.SummaryMembers || rm.mode == modeSummary {
		return
	}
	if rm.mode == modeEvents {
		h.summary.add(rm.name)
		h.met.SummaryRooms.Inc()
	}
	// From leaving: the members have had no event since the room became
	// dirty; the next summary brings them up to date.
	rm.mode = modeSummary
}

// exitSummary is Leave's check, rm locked: a room in summary mode below
// the exit threshold is left at the next tick.
func (h *Hub) exitSummary(rm *room) {
	if rm.mode == modeEvents || len(rm.members) >= summaryExit(h.opts.SummaryMembers) {
		return
	}
	if len(rm.members) == 0 {
		rm.mode = modeEvents
		h.summary.remove(rm.name)
		h.met.SummaryRooms.Dec()
		return
	}
	rm.mode = modeLeaving
}

// summaryFrames is one summary encoded once for the members whose user
// it does not list, and once per typist listed in the room or a thread
// (the self filter): at most twice the snapshot cap + 1 encodings (the
// room's list and the threads' lists are each capped), whatever the
// number of members.
type summaryFrames struct {
	all  []byte
	self map[string][]byte
}

func newSummaryFrames(room string, snap protocol.Snapshot) (summaryFrames, error) {
	all, err := protocol.Encode(protocol.NewTypingSnapshot(room, snap, ""))
	if err != nil {
		return summaryFrames{}, fmt.Errorf("encode: %w", err)
	}
	f := summaryFrames{all: all}
	self := func(users []protocol.Typist) error {
		for _, t := range users {
			if f.self == nil {
				f.self = make(map[string][]byte, len(snap.Users))
			}
			if f.self[t.User] != nil {
				continue
			}
			if f.self[t.User], err = protocol.Encode(protocol.NewTypingSnapshot(room, snap.WithoutUser(t.User), "")); err != nil {
				return fmt.Errorf("encode: %w", err)
			}
		}
		return nil
	}
	if err := self(snap.Users); err != nil {
		return summaryFrames{}, err
	}
	for _, th := range snap.Threads {
		if err := self(th.Users); err != nil {
			return summaryFrames{}, err
		}
	}
	return f, nil
}

// viewed is the frame of a member of user with view v (not off): the
// shared one when v hides nobody snap lists, else its own encoding.
func (f summaryFrames) viewed(room string, snap protocol.Snapshot, user string, v *filter.View) ([]byte, error) {
	if !v.HidesListed(snap) {
		return f.of(user), nil
	}
	own, _ := v.Snapshot(snap.WithoutUser(user))
	return protocol.Encode(protocol.NewTypingSnapshot(room, own, ""))
}

func (f summaryFrames) of(user string) []byte {
	if b, ok := f.self[user]; ok {
		return b
	}
	return f.all
}
