package worker

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The soak's model (soak_test.go): what the commands generated so far
// should produce, per (room, user), without knowing which worker applies
// a command or when. It keeps, per connection, the command with the
// highest seq: docs/protocol.md ("Typing commands", Ordering) says "a
// command whose seq is not above the last one applied for that (conn,
// room) is stale and ignored, even after a stop removed the entry", so
// once every command is applied a connection's entry is what its last
// command made it, whatever order the workers applied them in.

// roomUser names a typist: a (scope, user) pair, where the scope is a
// room ("r0") or one of its threads ("r0#t1", scopeKey): each is a
// typist of its own (docs/protocol.md, "Threads and activities").
type roomUser struct{ room, user string }

// soakThreads are the scopes of every room: the room itself ("") and two
// threads, within ELLIPSIS_MAX_THREADS_PER_USER.
var soakThreads = []string{"", "t0", "t1"}

// scopeKey is the model's name of thread th of room ("" = the room).
func scopeKey(room, th string) string {
	if th == "" {
		return room
	}
	return room + "#" + th
}

func (k roomUser) String() string { return k.room + "/" + k.user }

// soakEntry is a connection's last command in a room.
type soakEntry struct {
	seq   uint64
	start bool  // the last command is a start (else a stop, leave or disconnect)
	ts    int64 // its ts_ms: when the test generated it, unix ms
}

// entryClass is what a connection's entry is once its commands are applied.
type entryClass int

const (
	classDead      entryClass = iota // ended, or its start is dropped
	classUncertain                   // its start may or may not be superseded
	classLive                        // live until ts + the applying worker's ttl
)

// soakTypist is the model of one (room, user) and what the event stream
// told about it.
type soakTypist struct {
	entries   map[string]soakEntry // by conn
	lastStop  int64                // ts of the latest stop without conn, 0 if none
	lastStart int64                // ts of the latest start of any connection
	lastCmd   int64                // ts of the latest command about the typist
	log       []string             // the latest actions and events, for a failure report

	shown   bool    // the last event was typing_start
	shownTs int64   // ts_ms of the last typing_start published while shown
	events  []int64 // ts_ms of the latest events (the rate bound)
}

// soakLogLen bounds a typist's log.
const soakLogLen = 40

func (ty *soakTypist) note(format string, args ...any) {
	if len(ty.log) == soakLogLen {
		ty.log = slices.Delete(ty.log, 0, 1)
	}
	ty.log = append(ty.log, fmt.Sprintf(format, args...))
}

// class says what entry e becomes. A start is superseded when "its ts_ms
// is ... before (or within 500 ms after) the user's last stop without
// conn in the room" (docs/protocol.md, "Typing commands"); the stop is
// applied (Redis TIME x) at least at its generation time P and, with the
// test's delays, within soakSlack after it, so a start with ts < P + 500 ms
// is dead either way (superseded after the stop, ended by it before), one
// with ts >= P + 500 ms + soakSlack lives, and one between is uncertain.
func (ty *soakTypist) class(e soakEntry) entryClass {
	guard := store.StopGuard.Milliseconds()
	switch {
	case !e.start:
		return classDead
	case ty.lastStop > 0 && e.ts < ty.lastStop+guard:
		return classDead
	case ty.lastStop > 0 && e.ts < ty.lastStop+guard+soakSlack.Milliseconds():
		return classUncertain
	}
	return classLive
}

// allDead reports whether no entry of the typist may be live.
func (ty *soakTypist) allDead() bool {
	for _, e := range ty.entries {
		if ty.class(e) != classDead {
			return false
		}
	}
	return true
}

// liveUntil is the earliest the typist's certainly live entries end
// (ts + the shortest ttl), 0 when none is certainly live.
func (ty *soakTypist) liveUntil(ttlMin int64) int64 {
	var until int64
	for _, e := range ty.entries {
		if ty.class(e) == classLive {
			until = max(until, e.ts+ttlMin)
		}
	}
	return until
}

// soakConn is a connection of the model: a device of a user.
type soakConn struct {
	id, user string
	seq      uint64
	rooms    []string // joined, sorted
}

// soakModel generates the commands (from one seeded source, so a seed
// replays the same actions) and records their effect.
type soakModel struct {
	rnd     *rand.Rand
	users   []string
	rooms   []string
	conns   []*soakConn // open: neither disconnected nor vanished
	made    int         // connections made, for ids
	typists map[roomUser]*soakTypist
}

func newSoakModel(seed int64, users, rooms int) *soakModel {
	m := &soakModel{rnd: rand.New(rand.NewPCG(uint64(seed), 26)), typists: map[roomUser]*soakTypist{}}
	for i := range users {
		m.users = append(m.users, fmt.Sprintf("u%d", i))
	}
	for i := range rooms {
		m.rooms = append(m.rooms, fmt.Sprintf("r%d", i))
	}
	return m
}

func (m *soakModel) typist(room, user string) *soakTypist {
	k := roomUser{room, user}
	ty := m.typists[k]
	if ty == nil {
		ty = &soakTypist{entries: map[string]soakEntry{}}
		m.typists[k] = ty
	}
	return ty
}

// record enters a generated command (at = its ts_ms) into the model.
func (m *soakModel) record(step int, c protocol.Command, at int64) {
	// A leave or a disconnect ends the connection in every scope of its
	// rooms; a start or a stop names one.
	var scopes []string
	switch c.Op {
	case protocol.OpDisconnect, protocol.OpLeave:
		rooms := c.Rooms
		if c.Op == protocol.OpLeave {
			rooms = []string{c.Room}
		}
		for _, r := range rooms {
			for _, th := range soakThreads {
				scopes = append(scopes, scopeKey(r, th))
			}
		}
	default:
		scopes = []string{scopeKey(c.Room, c.Thread)}
	}
	for _, r := range scopes {
		ty := m.typist(r, c.User)
		ty.lastCmd = at
		switch {
		case c.Op == protocol.OpStart:
			ty.lastStart = at
			ty.entries[c.Conn] = soakEntry{seq: c.Seq, start: true, ts: at}
		case c.Conn == "":
			ty.lastStop = at
		default:
			ty.entries[c.Conn] = soakEntry{seq: c.Seq, ts: at}
		}
		ty.note("step %d t=%d gen %s thread=%q conn=%q seq=%d", step, at, c.Op, c.Thread, c.Conn, c.Seq)
	}
}
