package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// zsetStore ("zset", the default) keeps typing state in one sorted set per
// room scored by expiry in Redis TIME, applied by one atomic Lua script per
// command per room (see README.md, "Lua design"). "Who is typing" is one
// ZRANGEBYSCORE of the room, whatever the size of the keyspace.
type zsetStore struct {
	redisBase
	lua struct{ start, stop, sweep, snapshot *redis.Script }
}

var _ Store = (*zsetStore)(nil)

func newZsetStore(base redisBase) (*zsetStore, error) {
	st := &zsetStore{redisBase: base}
	err := loadScripts(base.publish, map[string]**redis.Script{
		"start": &st.lua.start, "stop": &st.lua.stop, "sweep": &st.lua.sweep, "snapshot": &st.lua.snapshot,
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Prepare implements [Store].
func (st *zsetStore) Prepare(ctx context.Context) error {
	return st.prepare(ctx, st.lua.start, st.lua.stop, st.lua.sweep, st.lua.snapshot)
}

// Start implements [Store] with start.lua.
func (st *zsetStore) Start(ctx context.Context, cmd protocol.Command) (string, error) {
	return st.start(ctx, cmd, st.startCall, st.stopCall)
}

// startCall builds the start.lua call of cmd.
func (st *zsetStore) startCall(cmd protocol.Command) scriptCall {
	n, room, user := st.names, cmd.Room, cmd.User
	keys := []string{n.RoomKey(room), n.NamesKey(room), n.SeqKey(room, cmd.Conn), n.ThrottleKey(room, user), n.RoomChannel(room)}
	if !st.indexAfter {
		keys = append(keys, n.SweepKey(names.SweepBucket(room)))
	}
	args := []any{names.Member(user, cmd.Conn), names.Enc(user), cmd.Name, seqArg(cmd.Seq), st.ttlMs, st.throttleMs, st.graceMs, names.Enc(room), st.startEvent(cmd)}
	return scriptCall{st.lua.start, keys, args}
}

// stopCall builds the stop script call for one room. Without conn it ends
// every connection of user in room and ignores seq.
func (st *zsetStore) stopCall(room, user, conn string, seq uint64, reason string) scriptCall {
	n := st.names
	member := ""
	if conn == "" {
		seq = 0
	} else {
		member = names.Member(user, conn)
	}
	keys := []string{n.RoomKey(room), n.NamesKey(room), n.SeqKey(room, conn), n.ThrottleKey(room, user), n.RoomChannel(room)}
	args := []any{member, names.Enc(user), seqArg(seq), st.ttlMs + st.graceMs, stopEvent(room, user, reason)}
	return scriptCall{st.lua.stop, keys, args}
}

// Stop implements [Store] with stop.lua.
func (st *zsetStore) Stop(ctx context.Context, cmd protocol.Command, reason string) (string, error) {
	return st.runCommand(ctx, scriptStop, st.stopCall(cmd.Room, cmd.User, cmd.Conn, cmd.Seq, reason))
}

// Disconnect implements [Store]: stop.lua per room, pipelined.
func (st *zsetStore) Disconnect(ctx context.Context, cmd protocol.Command) ([]string, error) {
	return st.disconnect(ctx, cmd, st.stopCall)
}

// Apply implements [Store]: the commands' start and stop scripts,
// pipelined (see redisBase.apply).
func (st *zsetStore) Apply(ctx context.Context, cmds []protocol.Command) ([]string, []error) {
	return st.apply(ctx, cmds, st.startCall, st.stopCall)
}

// Sweep implements [Store] with sweep.lua per due room (see redisBase.sweep).
func (st *zsetStore) Sweep(ctx context.Context) (SweepResult, error) {
	n := st.names
	return st.sweep(ctx, func(room string, head, tail []byte) scriptCall {
		keys := []string{n.RoomKey(room), n.NamesKey(room), n.RoomChannel(room)}
		return scriptCall{st.lua.sweep, keys, []any{n.ThrottleKey(room, ""), head, tail}}
	})
}

// Snapshot implements [Store] with snapshot.lua: one ZRANGEBYSCORE of the
// room's live entries and their names.
func (st *zsetStore) Snapshot(ctx context.Context, room string) ([]protocol.Typist, error) {
	keys := []string{st.names.RoomKey(room), st.names.NamesKey(room)}
	res, errs := st.eval(ctx, scriptSnapshot, []scriptCall{{st.lua.snapshot, keys, nil}})
	if err := errs[0]; err != nil {
		return nil, snapshotFailed(err)
	}
	a, ok := res[0].([]any)
	if !ok || len(a)%2 != 0 {
		return nil, &snapshotError{protocol.CodeInternal, fmt.Errorf("worker: unexpected snapshot reply %v", res[0])}
	}
	users := make([]protocol.Typist, 0, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		eu, _ := a[i].(string)
		name, _ := a[i+1].(string)
		u, err := names.Dec(eu)
		if err != nil {
			st.rl.Warn("snapshot-bad-member", "skipping a malformed room member", zap.String("room", room), zap.Error(err))
			continue
		}
		users = append(users, protocol.Typist{User: u, Name: name})
	}
	sortTypists(users)
	return users, nil
}

func sortTypists(users []protocol.Typist) {
	slices.SortFunc(users, func(x, y protocol.Typist) int { return strings.Compare(x.User, y.User) })
}
