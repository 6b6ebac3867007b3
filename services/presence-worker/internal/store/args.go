package store

import (
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
	user := n.UserKey(a.Room, a.User)
	keys := []string{user, st.lay.typistKey(n, a.Room, a.User, user), n.UsersKey(a.Room), n.PendingKey(a.Room), n.RoomChannel(a.Room),
		n.GoneKey(a.Room), n.GoneSeqKey(a.Room), n.GoneTypedKey(a.Room), n.GoneTypedSeqKey(a.Room)}
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
