package hub

import (
	"context"
	"errors"
	"fmt"

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

// Sync is the one hold → snapshot → self filter → release sequence of the
// gateway: it holds m in room (joining it first for SyncJoin), asks the
// workers for a snapshot, and releases the hold with the "joined" or
// "typing" frame (id echoed) carrying the snapshot without m's own user
// (protocol.Snapshot.WithoutUser). Subscription and snapshot share one
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
func (h *Hub) Sync(ctx context.Context, kind SyncKind, room string, m Member, id string, commit func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, h.opts.ReadyTimeout)
	defer cancel()
	var hd *Hold
	existed := true
	if kind == SyncJoin {
		var err error
		if hd, existed, err = h.Join(ctx, room, m); err != nil {
			return err
		}
	} else if hd = h.Hold(room, m); hd == nil {
		return ErrNotMember
	}
	undo := func() {
		if existed {
			h.Release(hd, nil, "")
		} else {
			h.Leave(room, m)
		}
	}
	snap, err := h.opts.Snapshot(ctx, room)
	if err != nil {
		undo()
		return fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	if commit != nil && !commit() {
		undo()
		return ErrAborted
	}
	snap = snap.WithoutUser(m.User())
	var frame []byte
	typ := protocol.TypeTyping
	if kind == SyncJoin {
		frame, err = protocol.Encode(protocol.NewJoined(room, snap, id))
		typ = protocol.TypeJoined
	} else {
		frame, err = protocol.Encode(protocol.NewTypingSnapshot(room, snap, id))
	}
	if err != nil {
		undo()
		return fmt.Errorf("%w: encode: %w", ErrSnapshot, err)
	}
	if h.Release(hd, frame, typ) {
		h.push(room, m)
	}
	return nil
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
	snap, err := h.opts.Snapshot(ctx, room)
	cancel()
	var frame []byte
	if err == nil {
		frame, err = protocol.Encode(protocol.NewTypingSnapshot(room, snap.WithoutUser(m.User()), ""))
	}
	if h.Release(hd, frame, protocol.TypeTyping) || err != nil {
		h.resync.enqueue(room)
	}
}

// IsUnavailable reports whether err is a subscription or snapshot failure
// (as opposed to ErrNotMember, ErrAborted, ErrClosed).
func IsUnavailable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrSnapshot)
}
