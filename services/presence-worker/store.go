package worker

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Redis tuning. The numbers are ours (the seed design has none): a script
// call normally takes well under a millisecond, so a few short retries ride
// out a failover or a dropped connection without holding a shard for long.
const (
	// DefaultKeyGrace is how long a room's keys (sorted set, names hash, seq
	// keys) outlive their last start: ttl + DefaultKeyGrace. The room then
	// frees its memory even if no sweeper ever runs again (the seed's
	// fail-safe TTL, at room granularity). It must exceed the sweep interval
	// by far, or rooms would vanish before their expired typists are pushed.
	DefaultKeyGrace = 10 * time.Second

	// redisAttempts bounds the tries of one script call (or pipeline).
	redisAttempts = 4
	// redisBackoffMin and redisBackoffMax bound the jittered exponential
	// backoff between tries: 50ms, 100ms, 200ms, ... capped at 1s.
	redisBackoffMin = 50 * time.Millisecond
	redisBackoffMax = time.Second
	// redisAttemptTimeout bounds one try (dial, write, script, read).
	redisAttemptTimeout = 2 * time.Second

	// sweepBatch is how many due rooms one sweep round reads and sweeps in
	// one pipeline; a full batch is followed at once by another, up to
	// sweepMaxBatches per tick (so a backlog of 4096 rooms clears per tick).
	sweepBatch      = 256
	sweepMaxBatches = 16
)

// Script names, the "script" label of ellipsis_worker_script_duration_seconds.
const (
	scriptStart      = "start"
	scriptStop       = "stop"
	scriptDisconnect = "disconnect" // a pipeline of stop scripts, one per room
	scriptDue        = "due"
	scriptSweep      = "sweep" // a pipeline of sweep scripts, one per due room
	scriptSnapshot   = "snapshot"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts are the Lua scripts, each prefixed with scripts/lib.lua. They are
// immutable after newScripts (redis.NewScript hashes the source at once).
type scripts struct {
	start, stop, sweep, due, snapshot *redis.Script
}

func newScripts() (scripts, error) {
	lib, err := scriptFiles.ReadFile("scripts/lib.lua")
	if err != nil {
		return scripts{}, err
	}
	load := func(name string) (*redis.Script, error) {
		body, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
		if err != nil {
			return nil, err
		}
		return redis.NewScript(string(lib) + "\n" + string(body)), nil
	}
	var s scripts
	for _, p := range []struct {
		name string
		dst  **redis.Script
	}{{"start", &s.start}, {"stop", &s.stop}, {"sweep", &s.sweep}, {"due", &s.due}, {"snapshot", &s.snapshot}} {
		if *p.dst, err = load(p.name); err != nil {
			return scripts{}, err
		}
	}
	return s, nil
}

func (s scripts) all() []*redis.Script {
	return []*redis.Script{s.start, s.stop, s.sweep, s.due, s.snapshot}
}

// store owns the typing state in Redis: one sorted set per room scored by
// expiry in Redis TIME, applied by one atomic Lua script per command per
// room (see README.md, "Lua design"). It is safe for concurrent use; any
// number of stores (workers) may share one Redis.
type store struct {
	rdb   redis.UniversalClient
	names names.Names
	sc    scripts
	m     *metrics
	log   *zap.Logger
	rl    *rateLog

	ttlMs, throttleMs, graceMs int64
}

func newStore(rdb redis.UniversalClient, n names.Names, ttl, throttle time.Duration, m *metrics, log *zap.Logger, rl *rateLog) (*store, error) {
	sc, err := newScripts()
	if err != nil {
		return nil, fmt.Errorf("worker: embedded scripts: %w", err)
	}
	return &store{
		rdb: rdb, names: n, sc: sc, m: m, log: log, rl: rl,
		ttlMs:      ttl.Milliseconds(),
		throttleMs: throttle.Milliseconds(),
		graceMs:    DefaultKeyGrace.Milliseconds(),
	}, nil
}

// loadScripts sends SCRIPT LOAD for every script, so the first commands
// use EVALSHA at once. Failure is not fatal: calls fall back to EVAL.
func (st *store) loadScripts(ctx context.Context) error {
	var errs []error
	for _, s := range st.sc.all() {
		if err := s.Load(ctx, st.rdb).Err(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// scriptCall is one script invocation.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// eval runs calls, pipelined when there are several, and retries the calls
// that failed with a transient error (connection, timeout, LOADING,
// READONLY, TRYAGAIN, ...) up to redisAttempts times with jittered backoff,
// stopping early when ctx ends. It returns each call's reply and error.
// name labels the duration histogram.
func (st *store) eval(ctx context.Context, name string, calls []scriptCall) ([]any, []error) {
	began := time.Now()
	defer func() { st.m.scriptDuration.WithLabelValues(name).Observe(time.Since(began).Seconds()) }()

	res := make([]any, len(calls))
	errs := make([]error, len(calls))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	backoff := redisBackoffMin
	for attempt := 1; ; attempt++ {
		st.evalOnce(ctx, calls, pending, res, errs)
		retry := pending[:0]
		for _, i := range pending {
			if errs[i] == nil {
				continue
			}
			st.m.redisErrors.Inc()
			if retryable(errs[i]) && ctx.Err() == nil {
				retry = append(retry, i)
			}
		}
		pending = retry
		if len(pending) == 0 {
			return res, errs
		}
		err := errs[pending[0]]
		if attempt >= redisAttempts {
			return res, errs
		}
		st.rl.Warn("redis-retry", "redis call failed, retrying",
			zap.String("script", name), zap.Int("attempt", attempt), zap.Int("calls", len(pending)), zap.Error(err))
		// Full jitter: sleep a random time in [backoff/2, backoff].
		d := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, errs
		case <-t.C:
		}
		backoff = min(2*backoff, redisBackoffMax)
	}
}

// evalOnce makes one try of the calls listed in idx.
func (st *store) evalOnce(ctx context.Context, calls []scriptCall, idx []int, res []any, errs []error) {
	actx, cancel := context.WithTimeout(ctx, redisAttemptTimeout)
	defer cancel()
	if len(idx) == 1 {
		c := calls[idx[0]]
		res[idx[0]], errs[idx[0]] = c.script.Run(actx, st.rdb, c.keys, c.args...).Result()
		return
	}
	run := func(idx []int) {
		pipe := st.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(idx))
		for j, i := range idx {
			c := calls[i]
			cmds[j] = c.script.EvalSha(actx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(actx) // per-command errors are read below
		for j, i := range idx {
			res[i], errs[i] = cmds[j].Result()
		}
	}
	run(idx)
	// Scripts missing from the server's cache (a restart or SCRIPT FLUSH):
	// load them and rerun those calls once within this try.
	var missing []int
	loaded := map[*redis.Script]bool{}
	for _, i := range idx {
		if errs[i] != nil && redis.HasErrorPrefix(errs[i], "NOSCRIPT") {
			missing = append(missing, i)
			if s := calls[i].script; !loaded[s] {
				loaded[s] = true
				if err := s.Load(actx, st.rdb).Err(); err != nil {
					errs[i] = err
				}
			}
		}
	}
	if len(missing) > 0 {
		run(missing)
	}
}

// retryable reports whether a failed Redis call may succeed when tried
// again: network and timeout errors, and the server's transient replies.
// Script errors and other server replies are final. Rerunning a script is
// safe: a start already applied becomes a throttled refresh (or stale, with
// a seq), a stop already applied becomes a noop.
func retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY ", "NOREPLICAS", "ERR max number of clients"} {
			if strings.HasPrefix(re.Error(), p) {
				return true
			}
		}
		return false
	}
	// Pool timeouts, closed connections and other client-side failures.
	return !errors.Is(err, redis.ErrClosed)
}

// isRedisUnavailable tells a backend outage (network, timeout, transient
// server state) from a bug (script error, unexpected reply).
func isRedisUnavailable(err error) bool {
	return retryable(err) || errors.Is(err, redis.ErrClosed)
}

func seqArg(seq uint64) string { return strconv.FormatUint(seq, 10) }

// outcomeOf reads {outcome, ...} from a start or stop script reply.
func outcomeOf(v any) (string, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 1 {
		return "", fmt.Errorf("worker: unexpected script reply %T %v", v, v)
	}
	s, ok := a[0].(string)
	if !ok {
		return "", fmt.Errorf("worker: unexpected script outcome %T %v", a[0], a[0])
	}
	switch s {
	case OutcomeStarted, OutcomeRefreshed, OutcomeThrottled, OutcomeStopped, OutcomeNoop, OutcomeStale:
		return s, nil
	}
	return "", fmt.Errorf("worker: unknown script outcome %q", s)
}

// countPublished adds the event that an outcome implies to
// ellipsis_worker_events_published_total.
func (st *store) countPublished(outcome string) {
	switch outcome {
	case OutcomeStarted, OutcomeRefreshed:
		st.m.eventsPublished.WithLabelValues(protocol.TypeTypingStart).Inc()
	case OutcomeStopped:
		st.m.eventsPublished.WithLabelValues(protocol.TypeTypingStop).Inc()
	}
}

// start applies a start command (Room, User, Conn set; see start.lua) and
// returns its outcome: started, refreshed, throttled or stale.
func (st *store) start(ctx context.Context, cmd protocol.Command) (string, error) {
	n, room, user := st.names, cmd.Room, cmd.User
	keys := []string{n.RoomKey(room), n.NamesKey(room), n.SeqKey(room, cmd.Conn), n.ThrottleKey(room, user), n.RoomChannel(room), n.SweepKey()}
	ev := protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: room, User: user, Name: cmd.Name, TTLMs: st.ttlMs})
	args := []any{names.Member(user, cmd.Conn), names.Enc(user), cmd.Name, seqArg(cmd.Seq), st.ttlMs, st.throttleMs, st.graceMs, names.Enc(room), ev}
	res, errs := st.eval(ctx, scriptStart, []scriptCall{{st.sc.start, keys, args}})
	if errs[0] != nil {
		return OutcomeError, errs[0]
	}
	out, err := outcomeOf(res[0])
	if err != nil {
		return OutcomeError, err
	}
	st.countPublished(out)
	return out, nil
}

// stopCall builds the stop script call for one room. Without conn it ends
// every connection of user in room and ignores seq.
func (st *store) stopCall(room, user, conn string, seq uint64, reason string) scriptCall {
	n := st.names
	member := ""
	if conn == "" {
		seq = 0
	} else {
		member = names.Member(user, conn)
	}
	keys := []string{n.RoomKey(room), n.NamesKey(room), n.SeqKey(room, conn), n.ThrottleKey(room, user), n.RoomChannel(room)}
	ev := protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: room, User: user, Reason: reason})
	args := []any{member, names.Enc(user), seqArg(seq), st.ttlMs + st.graceMs, ev}
	return scriptCall{st.sc.stop, keys, args}
}

// stop applies a stop or leave command (reason stopped or left) and returns
// its outcome: stopped, noop or stale.
func (st *store) stop(ctx context.Context, cmd protocol.Command, reason string) (string, error) {
	res, errs := st.eval(ctx, scriptStop, []scriptCall{st.stopCall(cmd.Room, cmd.User, cmd.Conn, cmd.Seq, reason)})
	if errs[0] != nil {
		return OutcomeError, errs[0]
	}
	out, err := outcomeOf(res[0])
	if err != nil {
		return OutcomeError, err
	}
	st.countPublished(out)
	return out, nil
}

// disconnect runs the stop script with reason disconnected in every room of
// cmd.Rooms, pipelined (the rooms live in different hash slots, so each is
// its own atomic call). It returns one outcome per room; err joins the
// rooms' errors.
func (st *store) disconnect(ctx context.Context, cmd protocol.Command) ([]string, error) {
	calls := make([]scriptCall, len(cmd.Rooms))
	for i, room := range cmd.Rooms {
		calls[i] = st.stopCall(room, cmd.User, cmd.Conn, cmd.Seq, protocol.ReasonDisconnected)
	}
	res, errs := st.eval(ctx, scriptDisconnect, calls)
	outs := make([]string, len(calls))
	var all []error
	for i := range calls {
		if errs[i] != nil {
			outs[i] = OutcomeError
			all = append(all, fmt.Errorf("room %q: %w", cmd.Rooms[i], errs[i]))
			continue
		}
		out, err := outcomeOf(res[i])
		if err != nil {
			outs[i] = OutcomeError
			all = append(all, fmt.Errorf("room %q: %w", cmd.Rooms[i], err))
			continue
		}
		st.countPublished(out)
		outs[i] = out
	}
	return outs, errors.Join(all...)
}

// sweepResult sums one sweep.
type sweepResult struct {
	Rooms   int // due rooms swept
	Removed int // expired entries removed
	Stops   int // typing_stop(expired) published
}

// stopTemplate splits the typing_stop(expired) event of room around the
// user's JSON string: head ends with `"user":`, tail is
// `,"reason":"expired","ts_ms":`. The sweep script inserts the user it finds
// between them, so the event has exactly the shared codec's shape.
func stopTemplate(room string) (head, tail []byte, err error) {
	const mark = "\x01" // never in a valid id; marshals as "\u0001"
	p := protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: room, User: mark, Reason: protocol.ReasonExpired})
	i := bytes.Index(p, []byte(`"user":"\u0001"`))
	if i < 0 {
		return nil, nil, fmt.Errorf("worker: protocol.RoomEventPrefix has no user field: %s", p)
	}
	i += len(`"user":`)
	return p[:i], p[i+len(`"\u0001"`):], nil
}

// sweep pushes typing_stop(expired) for every entry whose time ran out in
// the rooms that are due in the sweep index (see sweep.lua), in batches of
// sweepBatch rooms, at most sweepMaxBatches batches per call.
func (st *store) sweep(ctx context.Context) (sweepResult, error) {
	var total sweepResult
	n := st.names
	for range sweepMaxBatches {
		res, errs := st.eval(ctx, scriptDue, []scriptCall{{st.sc.due, []string{n.SweepKey()}, []any{sweepBatch}}})
		if errs[0] != nil {
			return total, errs[0]
		}
		a, ok := res[0].([]any)
		if !ok || len(a) < 1 || len(a)%2 != 1 {
			return total, fmt.Errorf("worker: unexpected due reply %v", res[0])
		}
		now, _ := a[0].(int64)
		var calls []scriptCall
		var lags []float64
		for i := 1; i+1 < len(a); i += 2 {
			encRoom, _ := a[i].(string)
			dueS, _ := a[i+1].(string)
			room, err := names.Dec(encRoom)
			if err != nil || protocol.ValidateID("room", room) != nil {
				// Not written by a worker: drop it from the index.
				st.rl.Warn("sweep-bad-member", "dropping a malformed sweep index member", zap.String("member", encRoom))
				if err := st.rdb.ZRem(ctx, n.SweepKey(), encRoom).Err(); err != nil {
					st.m.redisErrors.Inc()
				}
				continue
			}
			head, tail, err := stopTemplate(room)
			if err != nil {
				return total, err
			}
			keys := []string{n.RoomKey(room), n.NamesKey(room), n.SweepKey(), n.RoomChannel(room)}
			calls = append(calls, scriptCall{st.sc.sweep, keys, []any{encRoom, n.ThrottleKey(room, ""), head, tail}})
			if due, err := strconv.ParseFloat(dueS, 64); err == nil {
				lags = append(lags, max(0, float64(now)-due)/1000)
			}
		}
		if len(calls) > 0 {
			sres, serrs := st.eval(ctx, scriptSweep, calls)
			var failed []error
			for i := range calls {
				if serrs[i] != nil {
					failed = append(failed, serrs[i])
					continue
				}
				v, ok := sres[i].([]any)
				if !ok || len(v) < 2 {
					failed = append(failed, fmt.Errorf("worker: unexpected sweep reply %v", sres[i]))
					continue
				}
				stops, _ := v[0].(int64)
				removed, _ := v[1].(int64)
				total.Rooms++
				total.Stops += int(stops)
				total.Removed += int(removed)
				st.m.expiredStops.Add(float64(stops))
				st.m.eventsPublished.WithLabelValues(protocol.TypeTypingStop).Add(float64(stops))
			}
			for _, l := range lags {
				st.m.sweepLag.Observe(l)
			}
			if len(failed) > 0 {
				return total, errors.Join(failed...)
			}
		}
		if (len(a)-1)/2 < sweepBatch {
			return total, nil
		}
	}
	return total, nil
}

// snapshotError classifies a failed snapshot for its reply code.
type snapshotError struct {
	code string // protocol.CodeUnavailable or protocol.CodeInternal
	err  error
}

func (e *snapshotError) Error() string { return e.code + ": " + e.err.Error() }
func (e *snapshotError) Unwrap() error { return e.err }

// snapshot returns who is typing in room now: the distinct users with a live
// entry, with their display names, sorted by user. Errors are
// *snapshotError.
func (st *store) snapshot(ctx context.Context, room string) ([]protocol.Typist, error) {
	keys := []string{st.names.RoomKey(room), st.names.NamesKey(room)}
	res, errs := st.eval(ctx, scriptSnapshot, []scriptCall{{st.sc.snapshot, keys, nil}})
	if err := errs[0]; err != nil {
		code := protocol.CodeInternal
		if isRedisUnavailable(err) {
			code = protocol.CodeUnavailable
		}
		return nil, &snapshotError{code, err}
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
	slices.SortFunc(users, func(x, y protocol.Typist) int { return strings.Compare(x.User, y.User) })
	return users, nil
}
