package worker

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// DefaultScanCount is the COUNT hint of each SCAN that store "keys" sends
// to list a room's typists. A SCAN visits about COUNT slots of the whole
// keyspace per round trip, so listing one room takes keyspace/COUNT round
// trips: Redis's own default of 10 would take 100,000 of them in a keyspace
// of a million keys; much larger counts hold Redis longer per call
// (docs/BENCHMARKS.md measures both).
const DefaultScanCount = 1000

// keysStore ("keys") is the seed's pattern 1: one key per typist,
// typing:{enc(room)}:enc(user) (names.TypistKey), that expires with the
// typist, and "who is typing" is SCAN MATCH typing:{enc(room)}:*
// (names.TypistPattern), never KEYS. To keep the contract that zsetStore
// keeps, the key is a hash of the typist's connections (field conn, value
// expiry in Redis TIME), and each room keeps a "shown" hash (the names key,
// typing:names:{R}: enc(user) -> display name) of the typists receivers
// show, from which the sweeper pushes expiry; see scripts/keys/*.lua and
// README.md ("Store keys") for where it is weaker.
type keysStore struct {
	redisBase
	lua struct{ start, stop, sweep *redis.Script }
	// scanCount is the COUNT of each SCAN of Snapshot (DefaultScanCount).
	scanCount int64
}

var _ Store = (*keysStore)(nil)

func newKeysStore(base redisBase) (*keysStore, error) {
	st := &keysStore{redisBase: base, scanCount: DefaultScanCount}
	err := loadScripts(base.publish, map[string]**redis.Script{
		"keys/start": &st.lua.start, "keys/stop": &st.lua.stop, "keys/sweep": &st.lua.sweep,
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Prepare implements [Store].
func (st *keysStore) Prepare(ctx context.Context) error {
	return st.prepare(ctx, st.lua.start, st.lua.stop, st.lua.sweep)
}

// Start implements [Store] with keys/start.lua.
func (st *keysStore) Start(ctx context.Context, cmd protocol.Command) (string, error) {
	return st.start(ctx, cmd, st.startCall, st.stopCall)
}

// startCall builds the keys/start.lua call of cmd.
func (st *keysStore) startCall(cmd protocol.Command) scriptCall {
	n, room, user := st.names, cmd.Room, cmd.User
	keys := []string{n.TypistKey(room, user), n.NamesKey(room), n.SeqKey(room, cmd.Conn), n.ThrottleKey(room, user), n.RoomChannel(room)}
	if !st.indexAfter {
		keys = append(keys, n.SweepKey(names.SweepBucket(room)))
	}
	args := []any{cmd.Conn, names.Enc(user), cmd.Name, seqArg(cmd.Seq), st.ttlMs, st.throttleMs, st.graceMs, names.Enc(room), st.startEvent(cmd)}
	return scriptCall{st.lua.start, keys, args}
}

// stopCall builds the keys/stop.lua call for one room. Without conn it
// ends every connection of user in room and ignores seq.
func (st *keysStore) stopCall(room, user, conn string, seq uint64, reason string) scriptCall {
	n := st.names
	if conn == "" {
		seq = 0
	}
	keys := []string{n.TypistKey(room, user), n.NamesKey(room), n.SeqKey(room, conn), n.ThrottleKey(room, user), n.RoomChannel(room)}
	args := []any{conn, names.Enc(user), seqArg(seq), st.ttlMs + st.graceMs, stopEvent(room, user, reason)}
	return scriptCall{st.lua.stop, keys, args}
}

// Stop implements [Store] with keys/stop.lua.
func (st *keysStore) Stop(ctx context.Context, cmd protocol.Command, reason string) (string, error) {
	return st.runCommand(ctx, scriptStop, st.stopCall(cmd.Room, cmd.User, cmd.Conn, cmd.Seq, reason))
}

// Disconnect implements [Store]: keys/stop.lua per room, pipelined.
func (st *keysStore) Disconnect(ctx context.Context, cmd protocol.Command) ([]string, error) {
	return st.disconnect(ctx, cmd, st.stopCall)
}

// Apply implements [Store]: the commands' start and stop scripts,
// pipelined (see redisBase.apply).
func (st *keysStore) Apply(ctx context.Context, cmds []protocol.Command) ([]string, []error) {
	return st.apply(ctx, cmds, st.startCall, st.stopCall)
}

// Sweep implements [Store] with due.lua and keys/sweep.lua per due room:
// the room's shown typists whose key has no live entry are pushed as
// expired. Removed counts pruned connection entries of live typists plus
// one per expired typist.
func (st *keysStore) Sweep(ctx context.Context) (SweepResult, error) {
	n := st.names
	return st.sweep(ctx, func(room string, head, tail []byte) scriptCall {
		keys := []string{n.NamesKey(room), n.RoomChannel(room)}
		return scriptCall{st.lua.sweep, keys, []any{n.TypistKey(room, ""), n.ThrottleKey(room, ""), head, tail}}
	})
}

// Snapshot implements [Store] the seed's way: SCAN MATCH
// names.TypistPattern(room) over the whole keyspace, COUNT scanCount per
// round trip, until the cursor returns to 0 (Redis skips expired keys, so
// every key found is a visible typist), then one HMGET of their names.
// The cost grows with the keyspace, not with the room, and the listing is
// not atomic: a typist who starts or stops during the scan may or may not
// be listed (SCAN's guarantee covers only keys present throughout).
func (st *keysStore) Snapshot(ctx context.Context, room string) ([]protocol.Typist, error) {
	defer observeSince(st.m, scriptSnapshot)()
	n := st.names
	pattern := n.TypistPattern(room)
	prefix := n.TypistKey(room, "") // typing:{enc(room)}: with the raw key prefix
	seen := map[string]bool{}
	var eusers []string
	var cursor uint64
	for {
		var keys []string
		err := st.call(ctx, scriptSnapshot, func(ctx context.Context) error {
			var err error
			keys, cursor, err = st.rdb.Scan(ctx, cursor, pattern, st.scanCount).Result()
			return err
		})
		if err != nil {
			return nil, snapshotFailed(err)
		}
		for _, k := range keys {
			eu, ok := strings.CutPrefix(k, prefix)
			if !ok || seen[eu] {
				continue // SCAN may return a key twice
			}
			seen[eu] = true
			eusers = append(eusers, eu)
		}
		if cursor == 0 {
			break
		}
	}
	users := make([]protocol.Typist, 0, len(eusers))
	if len(eusers) == 0 {
		return users, nil
	}
	var vals []any
	err := st.call(ctx, scriptSnapshot, func(ctx context.Context) error {
		var err error
		vals, err = st.rdb.HMGet(ctx, n.NamesKey(room), eusers...).Result()
		return err
	})
	if err != nil {
		return nil, snapshotFailed(err)
	}
	for i, eu := range eusers {
		u, err := names.Dec(eu)
		if err != nil {
			st.rl.Warn("snapshot-bad-member", "skipping a malformed typist key", zap.String("room", room), zap.Error(err))
			continue
		}
		name, _ := vals[i].(string)
		users = append(users, protocol.Typist{User: u, Name: name})
	}
	sortTypists(users)
	return users, nil
}

// observeSince starts timing one call for the script duration histogram;
// call the returned func when it ends.
func observeSince(m *metrics, name string) func() {
	t := m.scriptDuration.WithLabelValues(name)
	began := time.Now()
	return func() { t.Observe(time.Now().Sub(began).Seconds()) }
}
