package hub

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// shardCount spreads rooms over this many map shards, so that joins and
// leaves of different rooms rarely share even a map lock.
const shardCount = 64

// shardSeed is fixed for the process: room -> shard must be stable.
var shardSeed = maphash.MakeSeed()

// shard is one part of the room table; mu guards rooms only.
type shard struct {
	mu    sync.Mutex
	rooms map[string]*room
}

// room is one room with local members; mu guards everything below it.
type room struct {
	name    string
	mu      sync.Mutex
	members map[Member]*membership
	// dead: the last member left and the room was taken out of its shard;
	// a later join makes a new room.
	dead bool
	// Summary mode (summary.go): mode, dirty (an event since the last
	// summary's t0), summarizing (a summary snapshot is in flight) and
	// events (events received while not in modeEvents, to tell a
	// releasing member whether it missed one).
	mode        roomMode
	dirty       bool
	summarizing bool
	events      uint64
	// Watchers (watch.go): nil when none; watchDirty, an event since the
	// last watch summary's t0 (the room is then in the ticker's dirty set).
	watchers   map[Watcher]*watch
	watchDirty bool
}

type buffered struct {
	frame []byte
	typ   string
	key   string // EventKey of the event's user and thread
}

// membership is one member in one room; under room.mu.
type membership struct {
	holds    int        // > 0: events are buffered in buf
	buf      []buffered // events received while held, at most PendingLimit
	overflow bool       // buf overflowed (or a resync was skipped): push a snapshot
	// joined: a snapshot frame (the joined answer) was released to the
	// member; resyncs skip members before it.
	joined bool
	// heldAt is room.events when the first of the current holds began:
	// in summary mode, a release that finds room.events past it marks the
	// room dirty (the member missed a change its snapshot may not have).
	heldAt uint64
	// view is what the member sees of the room (filter.View: hidden
	// users, typing off); nil, the common case, sees everything but its
	// own user. Set by each Join; its hidden users are the same for the
	// whole membership (the caller's contract), only Off may change.
	view *filter.View
}

// Hold is an outstanding hold of one member in one room, to be ended with
// [Hub.Release].
type Hold struct {
	rm *room
	m  Member
	ms *membership
	// summary: the frame released is the room's last summary as it
	// leaves summary mode (leaveSummary), sent as a summary
	// (Member.SendRoomSummary), not as an answer.
	summary bool
	// answer: the frame released answers the member's own join or sync;
	// a member whose view is off gets it (empty), and no other snapshot.
	answer bool
	// view is ms.view when the hold was taken (read without the room's
	// lock by syncHolds: its hidden users never change).
	view *filter.View
}

// hold takes one more hold of ms, member m, in rm (locked).
func (ms *membership) hold(rm *room, m Member) *Hold {
	if ms.holds == 0 {
		ms.heldAt = rm.events
	}
	ms.holds++
	return &Hold{rm: rm, m: m, ms: ms, view: ms.view}
}

func (h *Hub) shard(name string) *shard {
	return &h.shards[maphash.String(shardSeed, name)%shardCount]
}

// lookup returns room name, locked and alive, or nil.
func (h *Hub) lookup(name string) *room {
	sh := h.shard(name)
	for {
		sh.mu.Lock()
		rm := sh.rooms[name]
		sh.mu.Unlock()
		if rm == nil {
			return nil
		}
		rm.mu.Lock()
		if !rm.dead {
			return rm
		}
		rm.mu.Unlock()
	}
}

// Join adds m to room (if it is not a member yet) with view v (nil: every
// typist but m's own user) and holds it: room events for m are buffered
// until [Hub.Release]. A member already there takes v as its new view
// (a re-join turning "typing" off or on); v must hide the same users as
// its view before. A new member counts one
// subscriber of the room's channel and waits, bounded by ctx, until the
// broker confirmed the subscription. existed reports whether m was a
// member already. On error m is not added (an existing membership is kept
// and its hold released), its subscriber count is dropped (a later join
// subscribes again), and the error wraps [ErrUnavailable] (and
// [ErrRefused] when Redis refused the subscription) or is [ErrClosed].
func (h *Hub) Join(ctx context.Context, name string, m Member, v *filter.View) (hd *Hold, existed bool, err error) {
	if h.closed.Load() {
		return nil, false, ErrClosed
	}
	rm := h.lockRoom(name)
	ms := rm.members[m]
	existed = ms != nil
	if !existed {
		ms = &membership{}
		rm.members[m] = ms
		h.met.JoinedRooms.Inc()
		h.enterSummary(rm)
	}
	ms.view = v
	hd = ms.hold(rm, m)
	rm.mu.Unlock()
	if existed {
		return hd, true, nil
	}
	if err := h.broker.Subscribe(ctx, h.opts.Names.RoomChannel(name)); err != nil {
		h.Leave(name, m)
		return nil, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return hd, false, nil
}

// Hold holds an existing member of room (for sync); nil when m is not a
// member.
func (h *Hub) Hold(name string, m Member) *Hold {
	rm := h.lookup(name)
	if rm == nil {
		return nil
	}
	defer rm.mu.Unlock()
	ms := rm.members[m]
	if ms == nil {
		return nil
	}
	return ms.hold(rm, m)
}

// Release ends a hold. It queues frame (of server frame type typ; nil for
// none) to the member and, if this was its last hold, the events buffered
// meanwhile, all under the room's lock, so no event of the room
// interleaves. It reports whether events were dropped while held (the
// caller pushes a fresh snapshot). A hold whose member left the room
// meanwhile is ignored. A member whose view is off (now) gets only an
// answer's frame, no buffered event, and never reports an overflow.
// Release must be called once per hold.
func (h *Hub) Release(hd *Hold, frame []byte, typ string) (overflowed bool) {
	rm := hd.rm
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.members[hd.m] != hd.ms {
		return false
	}
	ms := hd.ms
	off := ms.view.Off()
	if off && !hd.answer {
		frame = nil // turned off since the hold: no unasked snapshot
	}
	if frame != nil {
		send := hd.m.SendSnapshot
		if hd.summary {
			send = hd.m.SendRoomSummary
		}
		if send(rm.name, frame) {
			h.met.FrameOut(typ, 1)
		} else {
			h.met.EventsDropped.Inc()
		}
		ms.joined = true
	}
	ms.holds--
	if ms.holds > 0 {
		return false
	}
	if rm.mode != modeEvents && rm.events != ms.heldAt {
		rm.dirty = true // the next summary brings it what it missed
	}
	if !off {
		for _, b := range ms.buf {
			h.deliver(hd.m, rm.name, b.key, b.frame, b.typ)
		}
	}
	ms.buf = nil
	overflowed, ms.overflow = ms.overflow && !off, false
	return overflowed
}

// deliver sends m one event of room about key (EventKey); the room's lock
// is held.
func (h *Hub) deliver(m Member, room, key string, frame []byte, typ string) bool {
	if m.SendEvent(room, key, frame) {
		h.met.FrameOut(typ, 1)
		return true
	}
	h.met.EventsDropped.Inc()
	return false
}

// Leave removes m from room; see [Hub.LeaveAll].
func (h *Hub) Leave(name string, m Member) bool {
	return h.LeaveAll(m, name) == 1
}

// LeaveAll removes m from rooms and drops its subscriber count of each
// room's channel; the broker unsubscribes in the background, so this never
// waits on the network. It returns how many of rooms m was a member of.
func (h *Hub) LeaveAll(m Member, rooms ...string) int {
	return h.dropSubscriber(rooms, func(rm *room) bool {
		if _, ok := rm.members[m]; !ok {
			return false
		}
		delete(rm.members, m)
		h.met.JoinedRooms.Dec()
		h.exitSummary(rm)
		return true
	})
}

// dropSubscriber runs remove on each of rooms (shard and room locked);
// for each room it removed a member or watcher from, the room goes once
// it has neither (dropIfEmpty) and the subscriber count of its channel is
// dropped after the locks, so nothing waits on the network. It returns
// how many rooms remove reported.
func (h *Hub) dropSubscriber(rooms []string, remove func(rm *room) bool) int {
	var gone []string
	for _, name := range rooms {
		sh := h.shard(name)
		sh.mu.Lock()
		rm := sh.rooms[name]
		if rm == nil {
			sh.mu.Unlock()
			continue
		}
		rm.mu.Lock()
		if remove(rm) {
			gone = append(gone, name)
			h.dropIfEmpty(sh, rm)
		}
		rm.mu.Unlock()
		sh.mu.Unlock()
	}
	for _, name := range gone {
		h.broker.Unsubscribe(h.opts.Names.RoomChannel(name))
	}
	return len(gone)
}

// Members returns how many local members room has (for tests and metrics).
func (h *Hub) Members(name string) int {
	rm := h.lookup(name)
	if rm == nil {
		return 0
	}
	defer rm.mu.Unlock()
	return len(rm.members)
}

// lockRoom returns room name, made when the shard has none, with its
// mutex held (shard → room, the lock order above).
func (h *Hub) lockRoom(name string) *room {
	sh := h.shard(name)
	sh.mu.Lock()
	rm := sh.rooms[name]
	if rm == nil {
		rm = &room{name: name, members: map[Member]*membership{}}
		sh.rooms[name] = rm
	}
	rm.mu.Lock()
	sh.mu.Unlock()
	return rm
}

// fanOut sends one room event, as received, to every local member of its
// room except those of the event's own user (self filter) and those whose
// view drops it (filter.View: the user hidden, typing off; a member
// without a view pays one nil check), and marks the room dirty for its
// watchers (watch.go). It holds that room's lock only.
func (h *Hub) fanOut(channel, payload string) {
	name, ok := h.opts.Names.RoomFromChannel(channel)
	if !ok {
		return
	}
	ev, err := protocol.DecodeRoomEvent([]byte(payload))
	if err == nil && ev.Room != name {
		err = fmt.Errorf("room %q does not match channel %q", ev.Room, channel)
	}
	if err != nil {
		h.met.EventsDropped.Inc()
		h.badEvent.Warn("invalid-room-event", "dropping invalid room event (logged at most once a minute)", zap.String("channel", channel), zap.Error(err))
		return
	}
	rm := h.lookup(name)
	if rm == nil {
		return
	}
	defer rm.mu.Unlock()
	if ev.Thread == "" {
		h.markWatchDirty(rm) // O(1): the next watch tick summarizes it (a summary is the room scope only)
	}
	if rm.mode != modeEvents {
		// Summary mode (summary.go): the next summary carries it.
		rm.dirty = true
		rm.events++
		return
	}
	frame := []byte(payload) // shared, read-only, by every member's queue
	key := EventKey(ev.User, ev.Thread)
	for m, ms := range rm.members {
		if m.User() == ev.User || ms.view != nil && ms.view.Drops(ev.User) {
			continue
		}
		if ms.holds > 0 {
			if len(ms.buf) < h.opts.PendingLimit {
				ms.buf = append(ms.buf, buffered{frame, ev.Type, key})
			} else {
				ms.overflow = true
			}
			continue
		}
		h.deliver(m, name, key, frame, ev.Type)
	}
}

// EventKey is the scope key of a room event about user in thread ("" =
// the room itself), what [Member.SendEvent] gets as its key: user for the
// room itself, else user + "\x00" + thread. An id holds no control
// character, so two scopes never share a key, and a member conflating by
// key keeps a thread event and a room event of one user apart.
func EventKey(user, thread string) string {
	if thread == "" {
		return user
	}
	return user + "\x00" + thread
}
