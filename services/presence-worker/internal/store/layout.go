package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// heldReadMax is how many typists a snapshot reads beyond its limit for
// the unshown ones among them (as HELD_READ_MAX in scripts/snapshot.lua):
// a start the event rate limit holds leaves its user live but not shown,
// and must neither keep a shown user out of the list nor count in total.
const heldReadMax = 64

// DefaultScanCount is the COUNT hint of each SCAN that store "keys" sends
// to list a room's typists. A SCAN visits about COUNT slots of the whole
// keyspace per round trip, so listing one room takes keyspace/COUNT round
// trips: Redis's own default of 10 would take 100,000 of them in a keyspace
// of a million keys; much larger counts hold Redis longer per call
// (docs/BENCHMARKS.md measures both).
const DefaultScanCount = 1000

// layout is what differs between the stores: whether a typist has a key of
// their own and how "who is typing" is listed. Everything else (the
// scripts, the user hash with the connection entries, the room's users and
// pending sets, the sweep) is the engine's and the same for both.
type layout interface {
	// typistKey is the key the scripts keep for user in room while the user
	// may be visible (scripts/lib.lua, mark); userKey is the user hash,
	// passed instead when the layout keeps no such key.
	typistKey(n names.Names, room, user, userKey string) string
	// typistPrefix is typistKey without enc(user), for the sweep; "" when
	// the layout keeps no typist keys.
	typistPrefix(n names.Names, room string) string
	// snapshot lists room (see [Store.Snapshot]); limit is clamped already.
	snapshot(ctx context.Context, st *redisStore, room string, limit int) (protocol.Snapshot, error)
}

// zsetLayout ("zset", the default): "who is typing" is the room's users
// sorted set, read by the snapshot script in O(limit + log N).
type zsetLayout struct{ n names.Names }

func (zsetLayout) typistKey(_ names.Names, _, _, userKey string) string { return userKey }
func (zsetLayout) typistPrefix(names.Names, string) string              { return "" }

func (l zsetLayout) snapshot(ctx context.Context, st *redisStore, room string, limit int) (protocol.Snapshot, error) {
	return st.scopesSnapshot(ctx, room, limit, true)
}

// scopesSnapshot runs scripts/snapshot.lua for room: the room itself
// (withRoom; store keys lists it by SCAN instead) and its threads.
func (st *redisStore) scopesSnapshot(ctx context.Context, room string, limit int, withRoom bool) (protocol.Snapshot, error) {
	n := st.names
	call := scriptCall{st.lua.snapshot, []string{n.UsersKey(room), threadUsersKey(n, room)}, []any{n.UserKeyPrefix(room), limit, flag(withRoom)}}
	res, errs := st.eval(ctx, scriptSnapshot, []scriptCall{call})
	if err := errs[0]; err != nil {
		return protocol.Snapshot{}, snapshotFailed(err)
	}
	a, ok := res[0].([]any)
	if !ok || len(a) != 4 {
		return protocol.Snapshot{}, &SnapshotError{protocol.CodeInternal, fmt.Errorf("worker: unexpected snapshot reply %v", res[0])}
	}
	total, _ := a[0].(int64)
	roomList, _ := a[1].([]any)
	threadList, _ := a[2].([]any)
	counts, _ := a[3].([]any)
	var snap protocol.Snapshot
	snap.Users, snap.Activities = st.decodeEntries(room, roomList)
	snap.Total = max(int(total), len(snap.Users))
	snap.Threads = st.decodeThreads(room, threadList, counts)
	return snap, nil
}

// entryWidth is how many values a snapshot script's list gives per
// typist: member, name, activity, ttl (scripts/snapshot.lua).
const entryWidth = 4

// decodeEntries reads a snapshot script's {enc(user), name, activity,
// ttl, ...} list: the typists sorted by user, each with its ttl_ms when
// not the standard ttl, and the activities of those not typing.
func (st *redisStore) decodeEntries(room string, list []any) ([]protocol.Typist, map[string]string) {
	users := make([]protocol.Typist, 0, len(list)/entryWidth)
	var acts map[string]string
	for i := 0; i+entryWidth-1 < len(list); i += entryWidth {
		eu, _ := list[i].(string)
		name, _ := list[i+1].(string)
		act, _ := list[i+2].(string)
		u, err := names.Dec(eu)
		if err != nil {
			st.rl.Warn("snapshot-bad-member", "skipping a malformed room member", zap.String("room", room), zap.Error(err))
			continue
		}
		users = append(users, protocol.Typist{User: u, Name: name, TTLMs: entryTTL(list[i+3])})
		acts = withActivity(acts, u, act)
	}
	sortTypists(users)
	return users, acts
}

// entryTTL is a typist's ttl_ms from a snapshot's ttl value: the decimal
// ms of scripts/lib.lua's entry_ttl, 0 (the standard ttl) for "" or
// anything that is not a positive integer.
func entryTTL(v any) int64 {
	s, _ := v.(string)
	if s == "" {
		return 0
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	return ms
}

// nonStandardTTL is entry_ttl of scripts/lib.lua over a user hash's field
// t ("<ttl ms> <expiry unix ms>", "" when absent) at nowMs: the ttl while
// that expiry is after nowMs, else 0.
func nonStandardTTL(t string, nowMs int64) int64 {
	ttl, at, ok := strings.Cut(t, " ")
	if !ok {
		return 0
	}
	if e, err := strconv.ParseInt(at, 10, 64); err != nil || e <= nowMs {
		return 0
	}
	return entryTTL(ttl)
}

// withActivity records user's activity act in acts (made when needed),
// unless it is typing.
func withActivity(acts map[string]string, user, act string) map[string]string {
	if act == "" || act == protocol.ActivityTyping {
		return acts
	}
	if acts == nil {
		acts = map[string]string{}
	}
	acts[user] = act
	return acts
}

// decodeThreads groups a snapshot script's thread entries
// {enc(user):enc(thread), name, activity, ttl, ...} by thread, with each
// thread's count from counts {enc(thread), n, ...}: sorted by thread,
// users sorted by user, nil when no thread has a typist.
func (st *redisStore) decodeThreads(room string, list, counts []any) []protocol.ThreadSnapshot {
	byThread := map[string]*protocol.ThreadSnapshot{}
	var out []*protocol.ThreadSnapshot
	get := func(et string) *protocol.ThreadSnapshot {
		if t := byThread[et]; t != nil {
			return t
		}
		th, err := names.Dec(et)
		if err != nil {
			return nil
		}
		t := &protocol.ThreadSnapshot{Thread: th, Users: []protocol.Typist{}}
		byThread[et] = t
		out = append(out, t)
		return t
	}
	for i := 0; i+1 < len(counts); i += 2 {
		et, _ := counts[i].(string)
		c, _ := counts[i+1].(int64)
		if t := get(et); t != nil {
			t.Total = int(c)
		}
	}
	for i := 0; i+entryWidth-1 < len(list); i += entryWidth {
		m, _ := list[i].(string)
		name, _ := list[i+1].(string)
		act, _ := list[i+2].(string)
		eu, et, ok := strings.Cut(m, ":")
		u, err := names.Dec(eu)
		t := get(et)
		if !ok || err != nil || t == nil {
			st.rl.Warn("snapshot-bad-member", "skipping a malformed thread member", zap.String("room", room), zap.String("member", m))
			continue
		}
		t.Users = append(t.Users, protocol.Typist{User: u, Name: name, TTLMs: entryTTL(list[i+3])})
		t.Activities = withActivity(t.Activities, u, act)
	}
	if len(out) == 0 {
		return nil
	}
	threads := make([]protocol.ThreadSnapshot, len(out))
	for i, t := range out {
		sortTypists(t.Users)
		t.Total = max(t.Total, len(t.Users))
		threads[i] = *t
	}
	slices.SortFunc(threads, func(x, y protocol.ThreadSnapshot) int { return strings.Compare(x.Thread, y.Thread) })
	return threads
}

// keysLayout ("keys") is the seed's pattern 1: one key per typist,
// typing:{enc(room)}:enc(user) (names.TypistKey), which expires at the
// typist's latest live entry (scripts/lib.lua, mark), and "who is
// typing" is SCAN MATCH typing:{enc(room)}:* (names.TypistPattern), never
// KEYS. See README.md ("Store keys") for where it is weaker.
type keysLayout struct {
	n names.Names
	// scanCount is the COUNT of each SCAN of a snapshot (DefaultScanCount).
	scanCount int64
}

func (keysLayout) typistKey(n names.Names, room, user, _ string) string {
	return n.TypistKey(room, user)
}
func (keysLayout) typistPrefix(n names.Names, room string) string { return n.TypistKey(room, "") }

// snapshot lists room the seed's way: SCAN MATCH names.TypistPattern(room)
// over the whole keyspace, COUNT scanCount per round trip, until the cursor
// returns to 0. Every visible typist has a key, but a key may be found
// just as it expires, or be one an older worker left to live longer
// (scripts/lib.lua, mark), so two pipelines follow: Redis TIME and the
// keys' users-set scores (ZMSCORE); then the user hashes of those whose
// score is not above now (a throttled refresh lags it: live while an entry
// is) and the published state, name, activity and non-standard ttl (t) of
// the first typists in enc(user) order. As scripts/snapshot.lua, a typist is listed when receivers were
// told they type (p = '1') and an entry is live, and total counts the live
// ones less the unshown among those read (limit + heldReadMax of the live
// ones, and every one whose score passed). The cost grows with the
// keyspace, not with the room, and the listing is not atomic: a typist who
// starts or stops during the scan may or may not be listed (SCAN's
// guarantee covers only keys present throughout).
func (l *keysLayout) snapshot(ctx context.Context, st *redisStore, room string, limit int) (protocol.Snapshot, error) {
	defer observeSince(st.m, scriptSnapshot)()
	// The room's threads first, from their sorted set (a thread's typist
	// has no key of its own in either store).
	threads, err := st.scopesSnapshot(ctx, room, limit, false)
	if err != nil {
		return protocol.Snapshot{}, err
	}
	eusers, err := l.scan(ctx, st, room)
	if err != nil {
		return protocol.Snapshot{}, snapshotFailed(err)
	}
	if len(eusers) == 0 {
		return protocol.Snapshot{Users: []protocol.Typist{}, Threads: threads.Threads}, nil
	}
	slices.Sort(eusers)
	nowMs, ts, unsure, err := l.scores(ctx, st, room, eusers)
	if err != nil {
		return protocol.Snapshot{}, snapshotFailed(err)
	}
	// Up to unsure of the first limit + unsure may turn out expired, so
	// reading that many in id order finds the first limit live ones, and
	// heldReadMax more finds shown ones past held ones and counts those.
	if err := l.read(ctx, st, room, ts, limit+unsure+heldReadMax); err != nil {
		return protocol.Snapshot{}, snapshotFailed(err)
	}
	users := make([]protocol.Typist, 0, min(limit, len(eusers)))
	var acts map[string]string
	total := 0
	for _, t := range ts {
		counted, shown, name, act, ttl := t.state(nowMs)
		if counted {
			total++
		}
		if !shown || len(users) == limit {
			continue
		}
		u, err := names.Dec(t.eu)
		if err != nil {
			st.rl.Warn("snapshot-bad-member", "skipping a malformed typist key", zap.String("room", room), zap.Error(err))
			continue
		}
		users = append(users, protocol.Typist{User: u, Name: name, TTLMs: ttl})
		acts = withActivity(acts, u, act)
	}
	sortTypists(users)
	return protocol.Snapshot{Users: users, Total: max(total, len(users)), Activities: acts, Threads: threads.Threads}, nil
}

// keysTypist is one typist key a keys snapshot found: sure when its
// users-set score is above now (live), else read whole to decide.
type keysTypist struct {
	eu   string
	sure bool
	read *redis.SliceCmd           // p, n, a, t of a sure one among the first
	hash *redis.MapStringStringCmd // the whole user hash of an unsure one
}

// scores reads Redis TIME (unix ms) and the users-set scores of eusers
// (sorted) in one pipeline. A score above now is live (sure); an absent one
// (0) was swept and is left out; the others are unsure, read whole later,
// and so not counted until their entries are known.
func (l *keysLayout) scores(ctx context.Context, st *redisStore, room string, eusers []string) (nowMs int64, ts []keysTypist, unsure int, err error) {
	var now *redis.TimeCmd
	var scores *redis.FloatSliceCmd
	err = st.call(ctx, scriptSnapshot, func(ctx context.Context) error {
		pipe := st.rdb.Pipeline()
		now = pipe.Time(ctx)
		scores = pipe.ZMScore(ctx, l.n.UsersKey(room), eusers...)
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		return 0, nil, 0, err
	}
	nowMs = now.Val().UnixMilli()
	ts = make([]keysTypist, 0, len(eusers))
	for i, eu := range eusers {
		switch sc := int64(scores.Val()[i]); {
		case sc > nowMs:
			ts = append(ts, keysTypist{eu: eu, sure: true})
		case sc > 0:
			ts = append(ts, keysTypist{eu: eu})
			unsure++
		}
	}
	return nowMs, ts, unsure, nil
}

// read fetches, in one pipeline, the whole user hash of every unsure typist
// and the published state, name, activity and non-standard ttl (p, n, a,
// t) of the sure ones among the first first.
func (l *keysLayout) read(ctx context.Context, st *redisStore, room string, ts []keysTypist, first int) error {
	prefix := l.n.UserKeyPrefix(room)
	return st.call(ctx, scriptSnapshot, func(ctx context.Context) error {
		pipe := st.rdb.Pipeline()
		for i := range ts {
			key := prefix + ts[i].eu
			if !ts[i].sure {
				ts[i].hash = pipe.HGetAll(ctx, key)
			} else if i < first {
				ts[i].read = pipe.HMGet(ctx, key, "p", "n", "a", "t")
			}
		}
		if pipe.Len() == 0 {
			return nil
		}
		_, err := pipe.Exec(ctx)
		return err
	})
}

// state is what t counts for at nowMs: shown (listed, up to the limit)
// when an entry is live and receivers were told they type (p = '1');
// counted in total when shown, or when sure and beyond those read (live,
// state unknown); and the display name, activity and ttl_ms (0: the
// standard ttl; nonStandardTTL).
func (t keysTypist) state(nowMs int64) (counted, shown bool, name, activity string, ttlMs int64) {
	var p, ttl string
	switch {
	case t.hash != nil:
		h := t.hash.Val()
		if liveUntil(h) <= nowMs {
			return false, false, "", "", 0
		}
		p, name, activity, ttl = h["p"], h["n"], h["a"], h["t"]
	case t.read != nil:
		if v := t.read.Val(); len(v) == 4 {
			p, _ = v[0].(string)
			name, _ = v[1].(string)
			activity, _ = v[2].(string)
			ttl, _ = v[3].(string)
		}
	default: // live, beyond those read
		return true, false, "", "", 0
	}
	return p == "1", p == "1", name, activity, nonStandardTTL(ttl, nowMs)
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

// liveUntil is scripts/lib.lua's live_until over a user hash read whole:
// the latest expiry (unix ms) of its c:<conn> fields, 0 when none.
func liveUntil(user map[string]string) int64 {
	var latest int64
	for k, v := range user {
		if strings.HasPrefix(k, "c:") {
			if e, err := strconv.ParseInt(v, 10, 64); err == nil && e > latest {
				latest = e
			}
		}
	}
	return latest
}
