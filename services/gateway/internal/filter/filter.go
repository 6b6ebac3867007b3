// Package filter is what one connection sees of one room (docs/protocol.md,
// "Per-viewer filters"): the users it hides (the token's hide_typing_from
// claim and the join authoriser's hide_typing_from for the room) and
// whether it asked for the room's typing at all (the join option
// "typing":false).
//
// A connection with neither has a nil [*View]: the hub's fan-out pays one
// nil check per event for it. Sets and views are immutable once made, so
// they are shared without locks (a connection's claim set by all its
// rooms, a room's authoriser set by every connection of the user that the
// cached answer serves).
package filter

import "github.com/ellipsis-chat/ellipsis/shared/protocol"

// Set is an immutable set of user ids; the zero Set is empty. Memory:
// about 50 bytes per id beyond the id's own bytes (a map entry).
type Set struct{ m map[string]struct{} }

// NewSet returns the set of ids (duplicates taken once); the zero Set when
// ids is empty. The caller has validated them (protocol.DecodeUserIDs).
func NewSet(ids []string) Set {
	if len(ids) == 0 {
		return Set{}
	}
	m := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		m[id] = struct{}{}
	}
	return Set{m}
}

// Has reports whether user is in s.
func (s Set) Has(user string) bool {
	_, ok := s.m[user]
	return ok
}

// Len is the number of distinct ids in s.
func (s Set) Len() int { return len(s.m) }

// View is one connection's filter in one room; nil hides nothing and
// takes the room's typing.
type View struct {
	claim, room Set // hidden: the union of both
	off         bool
}

// New returns the view of a connection whose token hides claim, whose
// authoriser hides room in this room, and that joined with typing (false:
// "typing":false). It is nil when nothing is hidden and typing is on.
func New(claim, room Set, typing bool) *View {
	if claim.Len() == 0 && room.Len() == 0 && typing {
		return nil
	}
	return &View{claim: claim, room: room, off: !typing}
}

// Off reports whether the view takes none of the room's typing (the join
// option "typing":false). A nil View is on.
func (v *View) Off() bool { return v != nil && v.off }

// Hides reports whether user's typing is hidden from the view: in the
// claim's set or the room's. A nil View hides nobody.
func (v *View) Hides(user string) bool {
	return v != nil && (v.claim.Has(user) || v.room.Has(user))
}

// Drops reports whether an event about user must not reach the view: it
// is off, or hides user. This is the fan-out's check (after its nil
// check): at most two map lookups.
func (v *View) Drops(user string) bool { return v.off || v.claim.Has(user) || v.room.Has(user) }

// Hiding reports whether the view hides anyone.
func (v *View) Hiding() bool { return v != nil && (v.claim.Len() > 0 || v.room.Len() > 0) }

// Snapshot returns s without the hidden users' entries (room and threads:
// protocol.Snapshot.Without), and whether it removed any; s as it is when
// it did not (so callers share the frame of the unfiltered snapshot).
// Total drops by the listed entries removed; hidden users beyond a cut
// list may still be counted (docs/protocol.md, "Per-viewer filters"). Off
// is not applied here: the caller sends an off view no snapshot, or an
// empty one.
func (v *View) Snapshot(s protocol.Snapshot) (protocol.Snapshot, bool) {
	if !v.HidesListed(s) {
		return s, false
	}
	return s.Without(v.Hides), true
}

// HidesListed reports whether the view hides a user listed in s (room or
// thread): whether [View.Snapshot] would change it. It allocates nothing.
func (v *View) HidesListed(s protocol.Snapshot) bool {
	if !v.Hiding() {
		return false
	}
	for _, t := range s.Users {
		if v.Hides(t.User) {
			return true
		}
	}
	for _, th := range s.Threads {
		for _, t := range th.Users {
			if v.Hides(t.User) {
				return true
			}
		}
	}
	return false
}
