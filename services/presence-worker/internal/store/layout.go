package store

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

// DefaultScanCount is the COUNT hint of each SCAN that store "keys" sends
// to list a room's typists. A SCAN visits about COUNT slots of the whole
// keyspace per round trip, so listing one room takes keyspace/COUNT round
// trips: Redis's own default of 10 would take 100,000 of them in a keyspace
// of a million keys; much larger counts hold Redis longer per call
// (docs/BENCHMARKS.md measures both).
const DefaultScanCount = 1000

// layout is what differs between the stores: where a user's connection
// entries live and how "who is typing" is listed. Everything else (the
// scripts, the user hash, the room's users and pending sets, the sweep) is
// the engine's and the same for both.
type layout interface {
	// connsKey is the key of user's connection entries in room (fields
	// c:<conn>); userKey is the user hash, which holds them when the
	// layout keeps no key of its own for them.
	connsKey(n names.Names, room, user, userKey string) string
	// connsPrefix is connsKey without enc(user), for the sweep; "" when the
	// entries live in the user hash.
	connsPrefix(n names.Names, room string) string
	// snapshot lists room (see [Store.Snapshot]); limit is clamped already.
	snapshot(ctx context.Context, st *redisStore, room string, limit int) (protocol.Snapshot, error)
}

// zsetLayout ("zset", the default): a user's connection entries are fields
// of the user hash, and "who is typing" is the room's users sorted set,
// read by the snapshot script in O(limit + log N).
type zsetLayout struct{ n names.Names }

func (zsetLayout) connsKey(_ names.Names, _, _, userKey string) string { return userKey }
func (zsetLayout) connsPrefix(names.Names, string) string              { return "" }

func (l zsetLayout) snapshot(ctx context.Context, st *redisStore, room string, limit int) (protocol.Snapshot, error) {
	call := scriptCall{st.lua.snapshot, []string{UsersKey(l.n, room)}, []any{userKeyPrefix(l.n, room), limit}}
	res, errs := st.eval(ctx, scriptSnapshot, []scriptCall{call})
	if err := errs[0]; err != nil {
		return protocol.Snapshot{}, snapshotFailed(err)
	}
	a, ok := res[0].([]any)
	if !ok || len(a)%2 != 1 {
		return protocol.Snapshot{}, &SnapshotError{protocol.CodeInternal, fmt.Errorf("worker: unexpected snapshot reply %v", res[0])}
	}
	total, _ := a[0].(int64)
	users := make([]protocol.Typist, 0, len(a)/2)
	for i := 1; i < len(a); i += 2 {
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
	return protocol.Snapshot{Users: users, Total: max(int(total), len(users))}, nil
}

// keysLayout ("keys") is the seed's pattern 1: one key per typist,
// typing:{enc(room)}:enc(user) (names.TypistKey), holding the typist's
// connection entries and expiring (PEXPIREAT) with the latest of them, and
// "who is typing" is SCAN MATCH typing:{enc(room)}:* (names.TypistPattern),
// never KEYS. See README.md ("Store keys") for where it is weaker.
type keysLayout struct {
	n names.Names
	// scanCount is the COUNT of each SCAN of a snapshot (DefaultScanCount).
	scanCount int64
}

func (keysLayout) connsKey(n names.Names, room, user, _ string) string {
	return n.TypistKey(room, user)
}
func (keysLayout) connsPrefix(n names.Names, room string) string { return n.TypistKey(room, "") }

// snapshot lists room the seed's way: SCAN MATCH names.TypistPattern(room)
// over the whole keyspace, COUNT scanCount per round trip, until the cursor
// returns to 0 (Redis skips expired keys, so every key found is a visible
// typist), then the names of the first limit typists by id, in one
// pipeline. The cost grows with the keyspace, not with the room, and the
// listing is not atomic: a typist who starts or stops during the scan may
// or may not be listed (SCAN's guarantee covers only keys present
// throughout).
func (l *keysLayout) snapshot(ctx context.Context, st *redisStore, room string, limit int) (protocol.Snapshot, error) {
	defer observeSince(st.m, scriptSnapshot)()
	eusers, err := l.scan(ctx, st, room)
	if err != nil {
		return protocol.Snapshot{}, snapshotFailed(err)
	}
	slices.Sort(eusers)
	total := len(eusers)
	eusers = eusers[:min(limit, len(eusers))]
	users := make([]protocol.Typist, 0, len(eusers))
	if len(eusers) == 0 {
		return protocol.Snapshot{Users: users, Total: total}, nil
	}
	// As scripts/snapshot.lua: only users receivers were told type (p =
	// '1') are listed, so a snapshot agrees with the event stream; total
	// loses the unshown ones among those read.
	cmds := make([]*redis.SliceCmd, len(eusers))
	err = st.call(ctx, scriptSnapshot, func(ctx context.Context) error {
		pipe := st.rdb.Pipeline()
		for i, eu := range eusers {
			cmds[i] = pipe.HMGet(ctx, userKeyPrefix(l.n, room)+eu, "p", "n")
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		return protocol.Snapshot{}, snapshotFailed(err)
	}
	for i, eu := range eusers {
		v, _ := cmds[i].Result()
		if len(v) != 2 || v[0] != "1" {
			total--
			continue
		}
		u, err := names.Dec(eu)
		if err != nil {
			st.rl.Warn("snapshot-bad-member", "skipping a malformed typist key", zap.String("room", room), zap.Error(err))
			continue
		}
		name, _ := v[1].(string)
		users = append(users, protocol.Typist{User: u, Name: name})
	}
	sortTypists(users)
	return protocol.Snapshot{Users: users, Total: max(total, len(users))}, nil
}

// scan returns enc(user) of every typist key of room, each once.
func (l *keysLayout) scan(ctx context.Context, st *redisStore, room string) ([]string, error) {
	pattern := l.n.TypistPattern(room)
	prefix := l.n.TypistKey(room, "") // typing:{enc(room)}: with the raw key prefix
	seen := map[string]bool{}
	var eusers []string
	var cursor uint64
	for {
		var keys []string
		err := st.call(ctx, scriptSnapshot, func(ctx context.Context) error {
			var err error
			keys, cursor, err = st.rdb.Scan(ctx, cursor, pattern, l.scanCount).Result()
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			eu, ok := strings.CutPrefix(k, prefix)
			if ok && !seen[eu] { // SCAN may return a key twice
				seen[eu] = true
				eusers = append(eusers, eu)
			}
		}
		if cursor == 0 {
			return eusers, nil
		}
	}
}

// Snapshot implements [Store] with the layout's listing.
func (st *redisStore) Snapshot(ctx context.Context, room string, limit int) (protocol.Snapshot, error) {
	return st.lay.snapshot(ctx, st, room, min(max(limit, 0), MaxSnapshotLimit))
}

func sortTypists(users []protocol.Typist) {
	slices.SortFunc(users, func(x, y protocol.Typist) int { return strings.Compare(x.User, y.User) })
}

// SnapshotError classifies a failed snapshot for its reply code.
type SnapshotError struct {
	Code string // protocol.CodeUnavailable or protocol.CodeInternal
	err  error
}

func (e *SnapshotError) Error() string { return e.Code + ": " + e.err.Error() }
func (e *SnapshotError) Unwrap() error { return e.err }

// snapshotFailed wraps a failed Redis call of a snapshot.
func snapshotFailed(err error) *SnapshotError {
	code := protocol.CodeInternal
	if isRedisUnavailable(err) {
		code = protocol.CodeUnavailable
	}
	return &SnapshotError{code, err}
}
