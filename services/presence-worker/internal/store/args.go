package store

import (
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Keys of the typing state besides those of shared/names (see
// docs/ARCHITECTURE.md, "Typing state"); all of a room's keys share its
// hash tag {enc(room)}, so one script may touch them on Redis Cluster.
//
//	typing:user:{R}:enc(user)  hash: the user's state in the room (scripts/lib.lua)
//	typing:users:{R}           sorted set: enc(user) -> latest expiry (unix ms)
//	typing:pending:{R}         sorted set: enc(user) -> when the sweeper settles
//	                           a coalesced transition (unix ms)
//	typing:gone:{R}            sorted set: conn -> when its tombstone ends
//	                           (unix ms): readers' tombstones, of connections
//	                           that left the room or disconnected without a
//	                           record in the user hash
//	typing:goneseq:{R}         hash: conn -> its seq when it left or
//	                           disconnected (the tombstone)
//	typing:gonetyped:{R}       the same two for typists' tombstones, of
//	typing:gonetypedseq:{R}    connections that had a record (they commanded
//	                           in the room); each class is capped on its own
//	                           (scripts/lib.lua, bury)

// userKeyPrefix is typing:user:{R}: , to which enc(user) is appended.
func userKeyPrefix(n names.Names, room string) string {
	return n.KeyPrefix() + "typing:user:" + names.RoomTag(room) + ":"
}

// UsersKey is typing:users:{R}, the room's users sorted set.
func UsersKey(n names.Names, room string) string {
	return n.KeyPrefix() + "typing:users:" + names.RoomTag(room)
}

// PendingKey is typing:pending:{R}, the room's held transitions.
func PendingKey(n names.Names, room string) string {
	return n.KeyPrefix() + "typing:pending:" + names.RoomTag(room)
}

// GoneKey is typing:gone:{R}, when the room's readers' tombstones end:
// of connections that left it or disconnected without a record in their
// user hash (scripts/lib.lua, bury).
func GoneKey(n names.Names, room string) string {
	return n.KeyPrefix() + "typing:gone:" + names.RoomTag(room)
}

// GoneSeqKey is typing:goneseq:{R}, the seq of each of the room's readers'
// tombstones (scripts/lib.lua, gone).
func GoneSeqKey(n names.Names, room string) string {
	return n.KeyPrefix() + "typing:goneseq:" + names.RoomTag(room)
}

// GoneTypedKey is typing:gonetyped:{R}, when the room's typists'
// tombstones end: of connections that had a record (a seq record or an
// entry) in their user hash when they left or disconnected.
func GoneTypedKey(n names.Names, room string) string {
	return n.KeyPrefix() + "typing:gonetyped:" + names.RoomTag(room)
}

// GoneTypedSeqKey is typing:gonetypedseq:{R}, the seq of each of the
// room's typists' tombstones.
func GoneTypedSeqKey(n names.Names, room string) string {
	return n.KeyPrefix() + "typing:gonetypedseq:" + names.RoomTag(room)
}

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
}

// startArgs are the start script's inputs for cmd.
func (st *redisStore) startArgs(cmd protocol.Command) cmdArgs {
	return cmdArgs{Room: cmd.Room, User: cmd.User, Conn: cmd.Conn, Name: cmd.Name, Seq: cmd.Seq, TsMs: cmd.TsMs,
		Event: protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: cmd.Room, User: cmd.User, Name: cmd.Name, TTLMs: st.ttlMs})}
}

// stopArgs are the stop script's inputs for cmd in room with reason;
// reasons protocol.ReasonLeft and protocol.ReasonDisconnected make the
// connection leave the room (cmdArgs.Leaves).
// Without Conn the stop ends every connection of the user and its Seq is
// ignored.
func stopArgs(cmd protocol.Command, room, reason string) cmdArgs {
	a := cmdArgs{Room: room, User: cmd.User, Conn: cmd.Conn, Seq: cmd.Seq, TsMs: cmd.TsMs, Event: stopEvent(room, cmd.User, reason),
		Leaves: reason == protocol.ReasonLeft || reason == protocol.ReasonDisconnected}
	if a.Conn == "" {
		a.Seq = 0
	}
	return a
}

// argEvent is the index of cmdArgs.Event (ARGV[11]) in a command call's
// args (events.go reads it back).
const argEvent = 10

// commandCall builds the script call of a (st.lua.start or st.lua.stop).
func (st *redisStore) commandCall(script *redis.Script, a cmdArgs) scriptCall {
	n := st.names
	user := userKeyPrefix(n, a.Room) + names.Enc(a.User)
	keys := []string{user, st.lay.typistKey(n, a.Room, a.User, user), UsersKey(n, a.Room), PendingKey(n, a.Room), n.RoomChannel(a.Room),
		GoneKey(n, a.Room), GoneSeqKey(n, a.Room), GoneTypedKey(n, a.Room), GoneTypedSeqKey(n, a.Room)}
	if !st.indexAfter {
		keys = append(keys, n.SweepKey(names.SweepBucket(a.Room)))
	}
	args := []any{a.Conn, names.Enc(a.User), a.Name, strconv.FormatUint(a.Seq, 10), a.TsMs,
		st.ttlMs, st.throttleMs, st.keyPxMs, st.guardMs, names.Enc(a.Room), a.Event, flag(a.Leaves)}
	return scriptCall{script, keys, args}
}

// stopEvent is the typing_stop event of user in room, up to "ts_ms":.
func stopEvent(room, user, reason string) []byte {
	return protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: room, User: user, Reason: reason})
}

// flag is a boolean script argument: "1" or "0".
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
