package hub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// SyncKind says what a [Hub.Sync] answers.
type SyncKind int

const (
	// SyncJoin joins the room (subscribing it if new) and answers "joined".
	SyncJoin SyncKind = iota
	// SyncAsked answers a client's sync with a "typing" snapshot.
	SyncAsked
)

// Sync holds m in room (joining it first for SyncJoin, with view v: see
// [Hub.Join]; SyncAsked keeps the member's view and ignores v) and answers
// with the room's snapshot through [Hub.syncHolds]: a "joined" or "typing"
// frame (id echoed) carrying the snapshot without m's own user
// (protocol.Snapshot.WithoutUser) and the users its view hides. A member
// whose view is off is answered at once with an empty list and total 0,
// asking no snapshot (docs/protocol.md, "Per-viewer filters"). Subscription and snapshot share one
// deadline: ctx's, capped at ReadyTimeout. commit, when not nil, runs
// after the snapshot succeeded and before the frame is queued; if it
// returns false the join is undone and Sync returns [ErrAborted]. If
// events had to be dropped while m was held, one more (unasked) snapshot
// is pushed.
//
// Errors: [ErrUnavailable] (subscription), [ErrSnapshot] wrapping the
// snapshot's error, [ErrNotMember] (SyncAsked of a room not joined),
// [ErrAborted], [ErrClosed]. On error nothing is queued to m, and a
// membership created by this call is removed.
func (h *Hub) Sync(ctx context.Context, kind SyncKind, room string, m Member, v *filter.View, id string, commit func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, h.opts.ReadyTimeout)
	defer cancel()
	var hd *Hold
	existed := true
	if kind == SyncJoin {
		var err error
		if hd, existed, err = h.Join(ctx, room, m, v); err != nil {
			return err
		}
	} else if hd = h.Hold(room, m); hd == nil {
		return ErrNotMember
	}
	hd.answer = true
	overflowed, err := h.syncHolds(ctx, room, []*Hold{hd}, kind, id, commit)
	if err != nil {
		if existed {
			h.Release(hd, nil, "")
		} else {
			h.Leave(room, m)
		}
		return err
	}
	if overflowed {
		h.push(room, m)
	}
	return nil
}

// syncHolds is the gateway's one snapshot sequence, for a join, a sync,
// the push after an overflow and a room's resync alike: with the members'
// holds taken (Join, Hold), it gets one snapshot of room from a flight
// that started after them (flights.go; bounded by ctx, shared with other
// askers), runs commit (nil: none), and releases every hold with
// a frame of kind ("joined" for SyncJoin, else "typing", id echoed)
// carrying the snapshot without that member's own user, encoded once per
// user, and without the users its view hides (encoded apart only when
// that removes a listed typist); a member whose view is off gets an
// empty frame if the hold is its answer, else none, and when every hold
// is off no snapshot is asked. It reports whether events overflowed while any member was held
// (the caller pushes or resyncs again).
//
// Errors: [ErrSnapshot] wrapping the snapshot's or the encoding's error,
// [ErrAborted] when commit returns false, [ErrClosed]. On error no hold is released:
// the caller releases or undoes them.
func (h *Hub) syncHolds(ctx context.Context, room string, holds []*Hold, kind SyncKind, id string, commit func() bool) (overflowed bool, err error) {
	var snap protocol.Snapshot
	if !allOff(holds) {
		// Every hold was taken (and a joining member's subscription
		// confirmed) before now: a flight started after it read the room
		// after them.
		snap, err = h.flights.get(ctx, room, time.Now())
		if errors.Is(err, ErrClosed) {
			return false, err
		} else if err != nil {
			return false, fmt.Errorf("%w: %w", ErrSnapshot, err)
		}
	}
	if commit != nil && !commit() {
		return false, ErrAborted
	}
	typ := protocol.TypeTyping
	if kind == SyncJoin {
		typ = protocol.TypeJoined
	}
	encode := func(s protocol.Snapshot) ([]byte, error) {
		var f []byte
		var err error
		if kind == SyncJoin {
			f, err = protocol.Encode(protocol.NewJoined(room, s, id))
		} else {
			f, err = protocol.Encode(protocol.NewTypingSnapshot(room, s, id))
		}
		if err != nil {
			return nil, fmt.Errorf("%w: encode: %w", ErrSnapshot, err)
		}
		return f, nil
	}
	frames := make(map[string][]byte, len(holds)) // user -> that user's frame
	own := make([][]byte, len(holds))             // each hold's frame
	for i, hd := range holds {
		if hd.view.Off() {
			if hd.answer {
				if own[i], err = encode(protocol.Snapshot{}); err != nil {
					return false, err
				}
			}
			continue
		}
		u := hd.m.User()
		if frames[u] == nil {
			if frames[u], err = encode(snap.WithoutUser(u)); err != nil {
				return false, err
			}
		}
		own[i] = frames[u]
		if hd.view.HidesListed(snap) {
			viewed, _ := hd.view.Snapshot(snap.WithoutUser(u))
			if own[i], err = encode(viewed); err != nil {
				return false, err
			}
		}
	}
	for i, hd := range holds {
		if h.Release(hd, own[i], typ) {
			overflowed = true
		}
	}
	return overflowed, nil
}

// allOff reports whether every hold's view is off: no snapshot is needed.
func allOff(holds []*Hold) bool {
	for _, hd := range holds {
		if !hd.view.Off() {
			return false
		}
	}
	return true
}

// push sends m an unasked typing snapshot of room, after events for it
// were dropped while it was held; bounded by ReadyTimeout. When that
// snapshot fails, or events overflow again while it is awaited, the room
// is queued for a resync (resync.go: retried with its own backoff), so the
// member is never left without the events it missed.
func (h *Hub) push(room string, m Member) {
	hd := h.Hold(room, m)
	if hd == nil {
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.opts.ReadyTimeout)
	overflowed, err := h.syncHolds(ctx, room, []*Hold{hd}, SyncAsked, "", nil)
	cancel()
	if err != nil {
		h.Release(hd, nil, "")
	}
	if overflowed || err != nil {
		h.resync.enqueue(room)
	}
}

// Snapshot returns room's snapshot (not self-filtered) for an asker with
// no hold (GET /v1/rooms/{room}/typing): it shares any flight of the room
// that started after the call, or the one queued (flights.go). It waits
// until ctx is done, at most ReadyTimeout.
//
// Errors: [ErrSnapshot] wrapping the snapshot's error (backend.Reason
// tells why), [ErrClosed].
func (h *Hub) Snapshot(ctx context.Context, room string) (protocol.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, h.opts.ReadyTimeout)
	defer cancel()
	snap, err := h.flights.get(ctx, room, time.Now())
	switch {
	case errors.Is(err, ErrClosed):
		return protocol.Snapshot{}, err
	case err != nil:
		return protocol.Snapshot{}, fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	return snap, nil
}
