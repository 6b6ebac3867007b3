package hub

// Watching rooms (docs/protocol.md, "Watching rooms").
//
// # What
//
// A connection may watch rooms it has not joined (a room list showing
// "typing…" per room): a watcher gets, per watched room, at most one
// "summary" frame per WatchInterval (ELLIPSIS_WATCH_INTERVAL, default 2 s),
// and only when the summary it would get differs from the last one it got:
// the first protocol.SummaryTypists typists of the room's snapshot and
// their total, self filtered. A newly watched room gets one summary (even
// when nobody types) within one interval once [Hub.Arm] was called.
//
// # Cost
//
// A watcher counts one subscriber of the room's channel in the broker, as
// a member does, so a room has one Redis subscription per gateway whatever
// its members and watchers. fanOut does O(1) for a room's watchers: it
// sets the room's watchDirty flag and, when the flag was clear, adds the
// room to the ticker's dirty set (a leaf lock). Each tick serves only the
// dirty rooms, watchConcurrency at a time: one snapshot per room through
// the shared flights (flights.go: shared with the joins, syncs and summary
// mode of the same room), encoded once per distinct self filter (the
// watchers whose user is among the listed typists, plus one for all the
// others), then one SendSummary per watcher whose summary changed.
//
// Exactness, as summary mode (summary.go): the tick clears watchDirty at
// t0 and reads a snapshot after t0; an event after t0 sets it again, so
// the last summary once a room stops changing is its final state. A
// resync of the room (a Redis link restored, NATS reconnected: resync.go)
// marks it dirty, so the next tick re-reads it.
//
// # Memory
//
// Per (watcher, room): one map entry and a [watch] (two flags and a 64-bit
// hash of the last summary sent, not the frame), about 100 bytes. Per
// watched room: the room's entry (shared with its members) and at most one
// entry of the dirty set. The frames of one tick live until that room's
// watchers queued them; a watcher's queue keeps at most one unwritten
// summary per room (session's writer conflates them). So memory is
// O(watches), bounded by ELLIPSIS_MAX_CONNS × ELLIPSIS_MAX_WATCHED_ROOMS.
//
// # Locks
//
// room.watchers, room.watchDirty and every watch are under the room's
// mutex. The ticker's mutex guards its dirty set only; it is a leaf, taken
// under a room's mutex (fanOut, Arm, resync) and never while taking
// another. Watcher.SendSummary is called under the room's mutex and must
// not call back into the hub; no hub mutex is held across Subscribe or a
// snapshot.

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// DefaultWatchInterval is [Options.WatchInterval]'s zero value: the
// default of ELLIPSIS_WATCH_INTERVAL.
const DefaultWatchInterval = 2 * time.Second

// watchConcurrency bounds the watched rooms' snapshots in flight per
// tick; the others wait for a slot within the same tick.
const watchConcurrency = 16

// Watcher is one local connection watching rooms.
type Watcher interface {
	// User is the watcher's user id, for the self filter; it must not
	// change and must be cheap (called under a room's lock).
	User() string
	// SendSummary queues one summary frame of room without blocking and
	// reports whether it was taken; a summary of room not yet written may
	// be replaced by it. It must never call back into the hub.
	SendSummary(room string, frame []byte) bool
}

// watch is one watcher of one room; under room.mu.
type watch struct {
	armed bool         // Arm was called: summaries may be sent
	sent  bool         // a summary was sent (sum is set)
	sum   uint64       // maphash of the last summary frame sent
	view  *filter.View // the users hidden from the watcher (nil: none); never off
}

// watchTicker serves the dirty watched rooms every WatchInterval; mu
// guards dirty only (a leaf lock).
type watchTicker struct {
	h     *Hub
	mu    sync.Mutex
	dirty map[string]struct{} // watched rooms with watchDirty set
	// seed hashes summary frames for "changed since the last one"; a
	// collision (2^-64 per comparison) would skip one summary until the
	// next change. Set once.
	seed maphash.Seed
}

func newWatchTicker(h *Hub) *watchTicker {
	return &watchTicker{h: h, dirty: map[string]struct{}{}, seed: maphash.MakeSeed()}
}

// markWatchDirty marks rm (locked) as changed for its watchers: O(1), the
// ticker's lock taken only when the flag was clear.
func (h *Hub) markWatchDirty(rm *room) {
	if rm.watchDirty || len(rm.watchers) == 0 {
		return
	}
	rm.watchDirty = true
	t := h.watch
	t.mu.Lock()
	t.dirty[rm.name] = struct{}{}
	t.mu.Unlock()
}

// Watch adds w as a watcher of room with view v (the users hidden from
// it: nil for none; its Off is not used, a watch always gets summaries;
// not armed yet: no summary until
// [Hub.Arm]) and waits, bounded by ctx, until the broker confirmed the
// room's subscription. A room w watches already returns nil at once (the
// caller serves one watch of a connection at a time, each room once). On
// error w does not watch room and the error wraps [ErrUnavailable] (and
// [ErrRefused]) or is [ErrClosed].
func (h *Hub) Watch(ctx context.Context, name string, w Watcher, v *filter.View) error {
	if h.closed.Load() {
		return ErrClosed
	}
	rm := h.lockRoom(name)
	if rm.watchers[w] != nil {
		rm.mu.Unlock()
		return nil
	}
	if rm.watchers == nil {
		rm.watchers = map[Watcher]*watch{}
		h.met.WatchedRooms.Inc()
	}
	rm.watchers[w] = &watch{view: v}
	h.met.Watches.Inc()
	rm.mu.Unlock()
	if err := h.broker.Subscribe(ctx, h.opts.Names.RoomChannel(name)); err != nil {
		h.Unwatch(w, name)
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// Arm lets w's summaries of rooms (watched with [Hub.Watch]) be sent,
// once the caller queued its answer: each room is marked dirty, so w gets
// its first summary at the next tick (about one interval). A tick under
// way may give it one read just before Arm; the room stays dirty, so the
// next tick re-reads it and the last summary is still the final state.
func (h *Hub) Arm(w Watcher, rooms ...string) {
	for _, name := range rooms {
		rm := h.lookup(name)
		if rm == nil {
			continue
		}
		if ws := rm.watchers[w]; ws != nil && !ws.armed {
			ws.armed = true
			rm.watchDirty = false // set again below: a read after now
			h.markWatchDirty(rm)
		}
		rm.mu.Unlock()
	}
}

// Unwatch ends w's watch of rooms and drops its subscriber count of each
// room's channel (never waiting on the network). No summary of a room is
// sent to w once Unwatch returns. It returns how many of rooms w watched.
func (h *Hub) Unwatch(w Watcher, rooms ...string) int {
	return h.dropSubscriber(rooms, func(rm *room) bool {
		if rm.watchers[w] == nil {
			return false
		}
		delete(rm.watchers, w)
		h.met.Watches.Dec()
		if len(rm.watchers) == 0 {
			rm.watchers, rm.watchDirty = nil, false
			h.met.WatchedRooms.Dec()
		}
		return true
	})
}

// dropIfEmpty takes rm out of sh (both locked) once it has neither
// members nor watchers; a later join or watch makes a new room.
func (h *Hub) dropIfEmpty(sh *shard, rm *room) {
	if len(rm.members) == 0 && len(rm.watchers) == 0 {
		rm.dead = true
		delete(sh.rooms, rm.name)
	}
}

// Watchers returns how many local watchers room has (tests).
func (h *Hub) Watchers(name string) int {
	rm := h.lookup(name)
	if rm == nil {
		return 0
	}
	defer rm.mu.Unlock()
	return len(rm.watchers)
}

// run ticks until the hub closes, an interval after the end of the tick
// before; a tick's snapshots end before it returns.
func (t *watchTicker) run() {
	h := t.h
	defer h.wg.Done()
	tk := time.NewTicker(h.opts.WatchInterval)
	defer tk.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-tk.C:
		}
		t.tick()
		// The next tick a whole interval after this one ended: a room
		// served late in a long tick is not served again early in the
		// next (at most one summary per room and interval).
		tk.Reset(h.opts.WatchInterval)
	}
}

// tick serves the rooms dirty now, watchConcurrency at a time, and waits
// for them; a room marked dirty meanwhile waits for the next tick.
func (t *watchTicker) tick() {
	t.mu.Lock()
	rooms := make([]string, 0, len(t.dirty))
	for r := range t.dirty {
		rooms = append(rooms, r)
	}
	clear(t.dirty)
	t.mu.Unlock()
	sem := make(chan struct{}, watchConcurrency)
	var wg sync.WaitGroup
	for _, r := range rooms {
		select {
		case sem <- struct{}{}:
		case <-t.h.ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			t.h.summarizeWatched(r)
		}()
	}
	wg.Wait()
}

// summarizeWatched does room's part of one watch tick: one snapshot read
// after its dirty flag was cleared, and a summary to each armed watcher
// whose summary changed (or that has had none yet).
func (h *Hub) summarizeWatched(name string) {
	rm := h.lookup(name)
	if rm == nil {
		return
	}
	if !rm.watchDirty || len(rm.watchers) == 0 {
		rm.mu.Unlock()
		return
	}
	rm.watchDirty = false
	t0 := time.Now()
	rm.mu.Unlock()

	ctx, cancel := context.WithTimeout(h.ctx, h.opts.ReadyTimeout)
	snap, err := h.flights.get(ctx, name, t0)
	cancel()

	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.dead || len(rm.watchers) == 0 {
		return
	}
	if err != nil {
		h.markWatchDirty(rm) // tried again next tick
		h.badEvent.Warn("watch-summary-failed", "watched room snapshot failed; retrying next interval (logged at most once a minute)", zap.String("room", name), zap.Error(err))
		return
	}
	listed := make(map[string]bool, len(snap.Users))
	for _, t := range snap.Users {
		listed[t.User] = true
	}
	type encoded struct {
		frame []byte
		sum   uint64
	}
	frames := map[string]encoded{} // self filter ("" for none) -> frame
	n := 0
	for w, ws := range rm.watchers {
		if !ws.armed {
			continue
		}
		self := w.User()
		if !listed[self] {
			self = ""
		}
		e, ok := frames[self]
		if ws.view.HidesListed(snap) {
			// Its own summary: its hidden users are among those listed.
			own, _ := ws.view.Snapshot(snap.WithoutUser(w.User()))
			b, err := protocol.Encode(protocol.NewSummary(name, own))
			if err != nil {
				h.log.Error("encode summary", zap.String("room", name), zap.Error(err))
				return
			}
			e, ok = encoded{b, maphash.Bytes(h.watch.seed, b)}, true
		}
		if !ok {
			b, err := protocol.Encode(protocol.NewSummary(name, snap.WithoutUser(self)))
			if err != nil {
				h.log.Error("encode summary", zap.String("room", name), zap.Error(err))
				return
			}
			e = encoded{b, maphash.Bytes(h.watch.seed, b)}
			frames[self] = e
		}
		if ws.sent && ws.sum == e.sum {
			continue
		}
		if w.SendSummary(name, e.frame) {
			ws.sent, ws.sum = true, e.sum
			n++
		}
	}
	h.met.WatchSummaries.Add(float64(n))
	h.met.FrameOut(protocol.TypeSummary, n)
}
