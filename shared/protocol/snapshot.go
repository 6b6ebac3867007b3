package protocol

// Snapshot is who is typing in one room: Users lists at most the snapshot
// cap of typists (ELLIPSIS_SNAPSHOT_MAX), sorted by user, and Total is the
// number of visible typists in the room, so Total >= len(Users); a client
// shows "N people are typing" from Total when the list was cut.
//
// Activities maps a listed user to their activity when it is not typing
// (nil: every listed user types). Threads lists the room's threads with a
// typist, sorted by thread, each a scope of its own (docs/protocol.md,
// "Threads and activities"); Users and Total are the room itself.
type Snapshot struct {
	Users      []Typist
	Total      int
	Activities map[string]string
	Threads    []ThreadSnapshot
}

// Cut reports whether the list holds fewer typists than the room has.
func (s Snapshot) Cut() bool { return s.Total > len(s.Users) }

// WithoutUser returns s without user's entries (the self filter: nobody is
// shown their own typing), never with a nil list. Total drops by one when
// user was listed. When the list was cut and user is not in it, Total may
// still count user: the snapshot does not say whether user types beyond
// the cap, so Total can be one too high in a room of more than the cap.
func (s Snapshot) WithoutUser(user string) Snapshot {
	return s.Without(func(u string) bool { return u == user })
}

// Without returns s without the entries of the users drop reports (the
// self filter, a viewer's hide list: docs/protocol.md, "Per-viewer
// filters"), in the room and in every thread, never with a nil list. Each
// scope's Total drops by the number of its listed entries dropped; a
// dropped user beyond a cut list may still be counted (the snapshot does
// not list them), so Total can be that many too high. A thread left with
// no typist is left out.
func (s Snapshot) Without(drop func(user string) bool) Snapshot {
	out, total := without(s.Users, s.Total, drop)
	var threads []ThreadSnapshot
	for _, t := range s.Threads {
		users, n := without(t.Users, t.Total, drop)
		if n > 0 {
			threads = append(threads, ThreadSnapshot{Thread: t.Thread, Users: users, Activities: t.Activities, Total: n})
		}
	}
	return Snapshot{Users: out, Total: total, Activities: s.Activities, Threads: threads}
}

// without is one scope of [Snapshot.Without]: the list without the
// dropped users and its total, never below the list's length.
func without(users []Typist, total int, drop func(string) bool) ([]Typist, int) {
	out := make([]Typist, 0, len(users))
	for _, t := range users {
		if !drop(t.User) {
			out = append(out, t)
		}
	}
	return out, max(total-(len(users)-len(out)), len(out))
}
