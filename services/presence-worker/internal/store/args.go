package store

import (
	"bytes"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Every key a script gets in KEYS is built by shared/names (the layout of
// docs/protocol.md, "Redis"); all of a room's keys share its hash tag
// {enc(room)}, so one script may touch them on Redis Cluster.

// cmdArgs are the inputs of one start or stop script call (one room of a
// disconnect): the one place where the scripts' KEYS and ARGV are built
// (scripts/start.lua documents them).
type cmdArgs struct {
	Room, User string
	// Conn is the connection; "" (stop only) is every connection of User.
	Conn string
	Name string // display name, start only
	// Seq orders the connection's commands; 0 is unordered.
	Seq uint64
	// TsMs is the gateway's send time (protocol.Command.TsMs), 0 unknown.
	TsMs int64
	// Event is the room event to publish, JSON up to "ts_ms":.
	Event []byte
	// Leaves marks a stop as Conn leaving the room (a leave, or one room
	// of its disconnect): the connection's records leave the user hash and
	// its tombstone is left (ARGV[12], scripts/stop.lua).
	Leaves bool
	// Thread is the scope's thread, "" the room itself (docs/protocol.md,
	// "Threads and activities").
	Thread string
	// Activity is a start's activity, never "" (protocol.ActivityTyping).
	Activity string
	// TTLMs is a start's ttl in ms (the standard ttl, or a platform
	// service's own, already checked against ELLIPSIS_SERVICE_MAX_TTL).
	TTLMs int64
}

// startArgs are the start script's inputs for cmd.
// The event's activity is left out for typing, so a typing start's event
// is byte for byte what it was before activities.
func (st *redisStore) startArgs(cmd protocol.Command) cmdArgs {
	act, ttl := cmd.Activity, cmd.TTLMs
	if act == "" {
		act = protocol.ActivityTyping
	}
	if ttl <= 0 {
		ttl = st.ttlMs
	}
	evAct := act
	if evAct == protocol.ActivityTyping {
		evAct = ""
	}
	return cmdArgs{Room: cmd.Room, User: cmd.User, Conn: cmd.Conn, Name: cmd.Name, Seq: cmd.Seq, TsMs: cmd.TsMs,
		Thread: cmd.Thread, Activity: act, TTLMs: ttl,
		Event: protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: cmd.Room, User: cmd.User, Thread: cmd.Thread, Name: cmd.Name, Activity: evAct, TTLMs: ttl})}
}

// stopArgs are the stop script's inputs for cmd in room with reason;
// reasons protocol.ReasonLeft and protocol.ReasonDisconnected make the
// connection leave the room (cmdArgs.Leaves).
// Without Conn the stop ends every connection of the user and its Seq is
// ignored.
func stopArgs(cmd protocol.Command, room, reason string) cmdArgs {
	a := cmdArgs{Room: room, User: cmd.User, Conn: cmd.Conn, Seq: cmd.Seq, TsMs: cmd.TsMs, Event: stopEventIn(room, cmd.User, cmd.Thread, reason),
		Leaves: reason == protocol.ReasonLeft || reason == protocol.ReasonDisconnected, Thread: cmd.Thread}
	if a.Conn == "" {
		a.Seq = 0
	}
	return a
}

// argEvent is the index of cmdArgs.Event (ARGV[11]) in a command call's
// args (events.go reads it back).
const argEvent = 10

// threadUsersKey is the room's thread users zset, typing:users:{R}:threads
// (scripts/start.lua): the users key with a suffix, in the room's slot, and
// never another key's name (the user hashes are typing:user:..., and
// UsersKey ends with the room's hash tag).
func threadUsersKey(n names.Names, room string) string { return n.UsersKey(room) + ":threads" }

// member is the scripts' name of user's typist in a scope: enc(user) for
// the room, enc(user):enc(thread) for a thread (enc escapes ':').
func member(user, thread string) string {
	if thread == "" {
		return names.Enc(user)
	}
	return names.Enc(user) + ":" + names.Enc(thread)
}

// commandCall builds the script call of a (st.lua.start or st.lua.stop).
// A thread's scope has its own user hash and the room's thread users zset,
// and no typist key in either store (the keys store keeps its seed pattern
// for the room itself).
func (st *redisStore) commandCall(script *redis.Script, a cmdArgs) scriptCall {
	n := st.names
	roomUser := n.UserKey(a.Room, a.User)
	user, typist, users := roomUser, st.lay.typistKey(n, a.Room, a.User, roomUser), n.UsersKey(a.Room)
	if a.Thread != "" {
		user = roomUser + ":" + names.Enc(a.Thread)
		typist, users = user, threadUsersKey(n, a.Room)
	}
	keys := []string{user, typist, users, n.PendingKey(a.Room), n.RoomChannel(a.Room),
		n.GoneKey(a.Room), n.GoneSeqKey(a.Room), n.GoneTypedKey(a.Room), n.GoneTypedSeqKey(a.Room), roomUser}
	if !st.indexAfter {
		keys = append(keys, n.SweepKey(names.SweepBucket(a.Room)))
	}
	ttl := a.TTLMs
	if ttl <= 0 {
		ttl = st.ttlMs
	}
	keyPx := st.keyPxMs + max(0, ttl-st.ttlMs)
	head, tail := splitStop(a.Event)
	args := []any{a.Conn, member(a.User, a.Thread), a.Name, strconv.FormatUint(a.Seq, 10), a.TsMs,
		ttl, st.throttleMs, keyPx, st.guardMs, names.Enc(a.Room), a.Event, flag(a.Leaves),
		a.Activity, st.maxThreads, names.Enc(a.Thread), head, tail, st.ttlMs}
	return scriptCall{script, keys, args}
}

// splitStop splits a room-level typing_stop event prefix before its
// "reason" (the stop.lua ARGV[16] and ARGV[17] a leave builds its
// threads' stops from); a start's event gives "" and "".
func splitStop(ev []byte) (head, tail string) {
	i := bytes.LastIndex(ev, []byte(`,"reason":`))
	if i < 0 || !bytes.Contains(ev, []byte(`"type":"typing_stop"`)) {
		return "", ""
	}
	return string(ev[:i]), string(ev[i:])
}

// stopEvent is the typing_stop event of user in room itself, up to "ts_ms":.
func stopEvent(room, user, reason string) []byte { return stopEventIn(room, user, "", reason) }

// stopEventIn is the typing_stop event of user in a thread of room ("" =
// the room itself), up to "ts_ms":.
func stopEventIn(room, user, thread, reason string) []byte {
	return protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: room, User: user, Thread: thread, Reason: reason})
}

// flag is a boolean script argument: "1" or "0".
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
