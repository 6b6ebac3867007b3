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
	out := make([]Typist, 0, len(s.Users))
	for _, t := range s.Users {
		if t.User != user {
			out = append(out, t)
		}
	}
	total := s.Total - (len(s.Users) - len(out))
	if total < len(out) {
		total = len(out)
	}
	var threads []ThreadSnapshot
	for _, t := range s.Threads {
		ts := Snapshot{Users: t.Users, Total: t.Total}.WithoutUser(user)
		if ts.Total > 0 {
			threads = append(threads, ThreadSnapshot{Thread: t.Thread, Users: ts.Users, Activities: t.Activities, Total: ts.Total})
		}
	}
	return Snapshot{Users: out, Total: total, Activities: s.Activities, Threads: threads}
}
