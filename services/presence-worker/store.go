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
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
)

// Store is where a worker keeps typing state: the commands' effects, the
// expiry sweep and "who is typing". Each method is atomic per room (one Lua
// call, or one call per room of a disconnect), publishes the events its
// state change implies on the room's channel in the same atomic step, and
// is safe for concurrent use by any number of goroutines and workers
// sharing one Redis.
//
// Two implementations sit side by side, selected by Config.Store
// (ELLIPSIS_STORE): zsetStore ("zset", the default: one sorted set per
// room) and keysStore ("keys", the seed's pattern 1: one TTL key per
// typist, listed with SCAN). Both pass the same contract suite
// (contract_test.go); README.md says where they differ in cost.
//
// Errors are Redis failures after retries, or an unexpected script reply;
// Snapshot's errors are *snapshotError, which carry the reply code.
type Store interface {
	// Prepare loads the store's scripts on the server, so the first
	// commands use EVALSHA at once. Failure is not fatal: calls fall back
	// to EVAL.
	Prepare(ctx context.Context) error
	// Start applies a start command (Room, User, Conn set) and returns
	// OutcomeStarted, OutcomeRefreshed, OutcomeThrottled or OutcomeStale.
	Start(ctx context.Context, cmd protocol.Command) (string, error)
	// Stop applies a stop or leave command, reason protocol.ReasonStopped
	// or protocol.ReasonLeft, and returns OutcomeStopped, OutcomeNoop or
	// OutcomeStale. Without Conn it ends every connection of the user in
	// the room and ignores Seq.
	Stop(ctx context.Context, cmd protocol.Command, reason string) (string, error)
	// Disconnect stops the connection in every room of cmd.Rooms with
	// reason protocol.ReasonDisconnected and returns one outcome per room
	// (OutcomeError for a room that failed); the error joins the rooms'.
	Disconnect(ctx context.Context, cmd protocol.Command) ([]string, error)
	// Apply applies cmds in order, each as Start, Stop (op stop: reason
	// stopped; op leave: left) or Disconnect would, and returns one outcome
	// and one error per command; a disconnect's outcome sums its rooms'
	// (see disconnectOutcome), and an op DecodeCommand does not admit gets
	// "" and no error. The script calls of consecutive ordered commands
	// (Seq and Conn set) go out as one pipeline, one round trip, retried
	// as one; an unordered command is sent alone, after the commands before
	// it have finished and before those after it start, exactly as Start,
	// Stop and Disconnect send it. Why: [redisBase.apply].
	Apply(ctx context.Context, cmds []protocol.Command) ([]string, []error)
	// Sweep publishes typing_stop(expired) for every typist whose time ran
	// out in the rooms due in the sweep index (every bucket, so every
	// shard of a Cluster), exactly once across any number of concurrent
	// sweepers.
	Sweep(ctx context.Context) (SweepResult, error)
	// Snapshot returns who is typing in room now: the distinct users with a
	// live entry, with their display names, sorted by user, never nil.
	Snapshot(ctx context.Context, room string) ([]protocol.Typist, error)
}

// SweepResult sums one [Store.Sweep].
type SweepResult struct {
	Rooms   int // due rooms swept
	Removed int // expired entries removed (store "keys": see keysStore.Sweep)
	Stops   int // typing_stop(expired) published
}

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
	// sweepClaimLease is how long a room claimed by a sweep (due.lua) is
	// skipped by the other workers. A worker that dies mid-sweep delays
	// its claimed rooms' stops by at most this; a sweep round takes
	// milliseconds, so 1 s is far above it.
	sweepClaimLease = time.Second
	// sweepClaimOffset is added to a sweep claim's score so that it lies
	// above every due time (10^13 ms: the year 2286) and a start's ZADD LT
	// replaces it (scripts/due.lua). Scores stay exact: a double holds
	// integers up to 2^53, about 9*10^15.
	sweepClaimOffset = int64(1e13)
)

// Script names, the "script" label of ellipsis_worker_script_duration_seconds.
const (
	scriptStart      = "start"
	scriptStop       = "stop"
	scriptDisconnect = "disconnect" // a pipeline of stop scripts, one per room
	scriptDue        = "due"        // a pipeline of due scripts, one per sweep bucket
	scriptSweep      = "sweep"      // a pipeline of sweep scripts, one per due room
	scriptIndex      = "index"      // a pipeline of ZADD LT, one per sweep bucket
	// scriptReschedule is a pipeline of reschedule scripts, one per bucket.
	scriptReschedule = "reschedule"
	scriptSnapshot   = "snapshot" // store "keys": the SCAN loop and the names read
	// scriptBatch names a pipeline of several commands' calls in the
	// redis-retry log; the histogram counts each command under its own
	// script (see redisBase.applyRun).
	scriptBatch = "batch"
)

// ErrUnknownStore is returned by newStore for a kind other than
// config.StoreZSet and config.StoreKeys (config.Validate rejects those
// first, naming ELLIPSIS_STORE).
var ErrUnknownStore = errors.New("worker: unknown store")

// newStore builds the store of kind (config.StoreZSet or config.StoreKeys)
// on rdb, publishing room events with PUBLISH (pubsub
// redisconn.PubSubClassic) or SPUBLISH (redisconn.PubSubSharded). It does
// no I/O.
func newStore(kind, pubsub string, rdb redis.UniversalClient, n names.Names, ttl, throttle time.Duration, m *metrics, log *zap.Logger, rl *rateLog) (Store, error) {
	base := redisBase{
		rdb: rdb, names: n, m: m, log: log, rl: rl,
		publish:    publishCommand(pubsub),
		indexAfter: isCluster(rdb),
		ttlMs:      ttl.Milliseconds(),
		throttleMs: throttle.Milliseconds(),
		graceMs:    DefaultKeyGrace.Milliseconds(),
	}
	err := loadScripts(base.publish, map[string]**redis.Script{
		"due": &base.idx.due, "reschedule": &base.idx.reschedule,
	})
	if err != nil {
		return nil, err
	}
	switch kind {
	case config.StoreZSet:
		return newZsetStore(base)
	case config.StoreKeys:
		return newKeysStore(base)
	}
	return nil, fmt.Errorf("%w %q (want %s or %s)", ErrUnknownStore, kind, config.StoreZSet, config.StoreKeys)
}

// checkScripts builds every store's scripts once, so a broken embed fails
// New instead of the first command.
func checkScripts() error {
	for _, kind := range []string{config.StoreZSet, config.StoreKeys} {
		for _, pubsub := range []string{redisconn.PubSubClassic, redisconn.PubSubSharded} {
			if _, err := newStore(kind, pubsub, nil, names.Names{}, time.Second, time.Second, nil, nil, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// isCluster reports whether rdb is a Redis Cluster client.
func isCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}

// publishCommand is the Redis command that publishes room events in the
// Pub/Sub mode pubsub: SPUBLISH when sharded, PUBLISH otherwise.
func publishCommand(pubsub string) string {
	if pubsub == redisconn.PubSubSharded {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

//go:embed scripts/*.lua scripts/keys/*.lua
var scriptFiles embed.FS

// loadScript returns scripts/<name>.lua prefixed with scripts/lib.lua and
// the definition of PUBLISH, the command the script publishes room events
// with (publish: "PUBLISH" or "SPUBLISH"). The script is immutable
// (redis.NewScript hashes the source at once).
func loadScript(publish, name string) (*redis.Script, error) {
	lib, err := scriptFiles.ReadFile("scripts/lib.lua")
	if err != nil {
		return nil, fmt.Errorf("worker: embedded scripts: %w", err)
	}
	body, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		return nil, fmt.Errorf("worker: embedded scripts: %w", err)
	}
	head := "local PUBLISH = '" + publish + "'\n"
	return redis.NewScript(head + string(lib) + "\n" + string(body)), nil
}

// loadScripts fills each destination with its script (see loadScript).
func loadScripts(publish string, dst map[string]**redis.Script) error {
	for name, p := range dst {
		s, err := loadScript(publish, name)
		if err != nil {
			return err
		}
		*p = s
	}
	return nil
}

// redisBase is what both stores share: the client, names, settings,
// metrics, and the retrying call paths.
type redisBase struct {
	rdb   redis.UniversalClient
	names names.Names
	m     *metrics
	log   *zap.Logger
	rl    *rateLog

	// publish is the command the scripts publish with (publishCommand).
	publish string
	// indexAfter: the start scripts cannot add their room to its sweep
	// bucket (Redis Cluster: another hash slot), so the worker does it
	// after them (applyRun, index). Elsewhere the script does it in the
	// same atomic step, which leaves no window for a crash in between.
	indexAfter bool
	// idx are the sweep index scripts both stores share.
	idx struct{ due, reschedule *redis.Script }

	ttlMs, throttleMs, graceMs int64
}

// prepare sends SCRIPT LOAD for each script (see [Store.Prepare]).
func (st *redisBase) prepare(ctx context.Context, scripts ...*redis.Script) error {
	var errs []error
	for _, s := range append(scripts, st.idx.due, st.idx.reschedule) {
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

// eval runs calls with evalRetry and observes the whole of it, retries
// included, in the duration histogram under name.
func (st *redisBase) eval(ctx context.Context, name string, calls []scriptCall) ([]any, []error) {
	defer observeSince(st.m, name)()
	return st.evalRetry(ctx, name, calls)
}

// evalRetry runs calls, pipelined when there are several, and retries the
// calls that failed with a transient error (connection, timeout, LOADING,
// READONLY, TRYAGAIN, ...) up to redisAttempts times with jittered
// backoff, stopping early when ctx ends. It returns each call's reply and
// error. name is the "script" of the retry log line.
//
// Only the calls that failed are sent again, in their order. A call whose
// reply was lost (a dropped connection, a timeout) may have run: scripts
// are written so that running one twice in a row is harmless (see
// retryable), and a pipeline's calls with a seq become stale on a second
// run (see redisBase.apply). go-redis's own retries, which would resend a
// whole pipeline, are off (New sets MaxRetries -1).
func (st *redisBase) evalRetry(ctx context.Context, name string, calls []scriptCall) ([]any, []error) {
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
		st.reloadSlots()
		if !sleepBackoff(ctx, backoff) {
			return res, errs
		}
		backoff = min(2*backoff, redisBackoffMax)
	}
}

// reloadSlots asks a Cluster client to reload its slot map (in the
// background, before the retry's backoff ends). go-redis reloads it on
// MOVED, ASK and READONLY replies and otherwise only every minute; a master
// that died answers nothing, so without this a worker would keep sending
// its rooms' scripts to the dead address for up to a minute after its
// replica took over.
func (st *redisBase) reloadSlots() {
	if cc, ok := st.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// sleepBackoff sleeps a random time in [backoff/2, backoff] (full jitter)
// and reports false when ctx ended first.
func sleepBackoff(ctx context.Context, backoff time.Duration) bool {
	d := backoff/2 + rand.N(backoff/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// evalOnce makes one try of the calls listed in idx.
func (st *redisBase) evalOnce(ctx context.Context, calls []scriptCall, idx []int, res []any, errs []error) {
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

// call runs one plain Redis call (not a script: SCAN, HMGET) with the
// retry policy of eval: up to redisAttempts tries of redisAttemptTimeout
// each, jittered backoff between them, stopping when ctx ends. fn must be
// safe to repeat (reads are).
func (st *redisBase) call(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	backoff := redisBackoffMin
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, redisAttemptTimeout)
		err := fn(actx)
		cancel()
		if err == nil || errors.Is(err, redis.Nil) {
			return err
		}
		st.m.redisErrors.Inc()
		if !retryable(err) || ctx.Err() != nil || attempt >= redisAttempts {
			return err
		}
		st.rl.Warn("redis-retry", "redis call failed, retrying",
			zap.String("script", what), zap.Int("attempt", attempt), zap.Error(err))
		st.reloadSlots()
		if !sleepBackoff(ctx, backoff) {
			return err
		}
		backoff = min(2*backoff, redisBackoffMax)
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
func (st *redisBase) countPublished(outcome string) {
	switch outcome {
	case OutcomeStarted, OutcomeRefreshed:
		st.m.eventsPublished.WithLabelValues(protocol.TypeTypingStart).Inc()
	case OutcomeStopped:
		st.m.eventsPublished.WithLabelValues(protocol.TypeTypingStop).Inc()
	}
}

// runCommand runs one start or stop script call and returns its outcome,
// counting the event it published.
func (st *redisBase) runCommand(ctx context.Context, name string, c scriptCall) (string, error) {
	res, errs := st.eval(ctx, name, []scriptCall{c})
	return st.callOutcome(res[0], errs[0])
}

// callOutcome reads the outcome of one start or stop script call from its
// reply and error, counting the event it published.
func (st *redisBase) callOutcome(res any, err error) (string, error) {
	if err != nil {
		return OutcomeError, err
	}
	out, err := outcomeOf(res)
	if err != nil {
		return OutcomeError, err
	}
	st.countPublished(out)
	return out, nil
}

// startEvent is the typing_start event of cmd up to "ts_ms": (the script
// appends Redis TIME and the closing brace).
func (st *redisBase) startEvent(cmd protocol.Command) []byte {
	return protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: cmd.Room, User: cmd.User, Name: cmd.Name, TTLMs: st.ttlMs})
}

// stopEvent is the typing_stop event of user in room, up to "ts_ms":.
func stopEvent(room, user, reason string) []byte {
	return protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: room, User: user, Reason: reason})
}

// stopCallFunc builds a store's stop script call for one room (see
// zsetStore.stopCall, keysStore.stopCall).
type stopCallFunc func(room, user, conn string, seq uint64, reason string) scriptCall

// disconnect runs stopCall's script with reason disconnected in every room
// of cmd.Rooms, pipelined (the rooms live in different hash slots, so each
// is its own atomic call). It returns one outcome per room; err joins the
// rooms' errors.
func (st *redisBase) disconnect(ctx context.Context, cmd protocol.Command, stopCall stopCallFunc) ([]string, error) {
	calls := make([]scriptCall, len(cmd.Rooms))
	for i, room := range cmd.Rooms {
		calls[i] = stopCall(room, cmd.User, cmd.Conn, cmd.Seq, protocol.ReasonDisconnected)
	}
	res, errs := st.eval(ctx, scriptDisconnect, calls)
	return st.roomOutcomes(cmd.Rooms, res, errs)
}

// roomOutcomes reads the outcomes of a disconnect's stop calls, one per
// room, counting the events they published; err joins the rooms' errors.
func (st *redisBase) roomOutcomes(rooms []string, res []any, errs []error) ([]string, error) {
	outs := make([]string, len(rooms))
	var all []error
	for i, room := range rooms {
		out, err := st.callOutcome(res[i], errs[i])
		if err != nil {
			all = append(all, fmt.Errorf("room %q: %w", room, err))
		}
		outs[i] = out
	}
	return outs, errors.Join(all...)
}

// disconnectOutcome sums a disconnect's room outcomes into the one it is
// counted with in ellipsis_worker_commands_total: stopped if any room
// published a stop, error if any room failed, stale if every room was
// stale, noop otherwise.
func disconnectOutcome(outs []string, err error) string {
	if err != nil {
		return OutcomeError
	}
	stale := len(outs) > 0
	for _, o := range outs {
		if o == OutcomeStopped {
			return OutcomeStopped
		}
		stale = stale && o == OutcomeStale
	}
	if stale {
		return OutcomeStale
	}
	return OutcomeNoop
}

// ordered reports whether cmd's scripts record its seq: a start, a stop or
// leave with Conn, or a disconnect, with Seq above 0. Running such a call a
// second time, after it or a later command of its connection ran, is
// stale: it changes nothing and publishes nothing.
func ordered(cmd protocol.Command) bool { return cmd.Seq != 0 && cmd.Conn != "" }

// commandScript is the "script" label a command's calls are timed under in
// ellipsis_worker_script_duration_seconds: start, stop (stop and leave) or
// disconnect, as when each command was its own call.
func commandScript(op string) string {
	switch op {
	case protocol.OpStart:
		return scriptStart
	case protocol.OpDisconnect:
		return scriptDisconnect
	}
	return scriptStop
}

// apply implements [Store.Apply] for both stores; startCall and stopCall
// build the store's script calls. It cuts cmds into runs: each maximal
// run of consecutive ordered commands is one pipeline (applyRun), and
// each unordered command is a run of its own.
//
// Why unordered commands go alone. A pipeline's calls are retried one by
// one: only those that failed are sent again, after the others ran. When
// the reply of a call that did run is lost (a dropped connection), its
// second run must not count; and when a call fails before running while a
// later one of the same pipeline runs (BUSY or LOADING answered to a
// prefix of the pipeline), the retry runs it after the later one. With a
// seq both are harmless, the way seq already orders commands across
// workers: the second run, or the late one, is stale. Without a seq
// neither is: a start and a stop of one user, run again together, would
// publish typing_start and typing_stop twice, and a late start would
// outlive the stop that followed it. Sent alone, an unordered command is
// retried exactly as before batching: a second run of it finds its own
// effect (a start is a throttled refresh, a stop a noop) and nothing sent
// after it.
func (st *redisBase) apply(ctx context.Context, cmds []protocol.Command, startCall func(protocol.Command) scriptCall, stopCall stopCallFunc) ([]string, []error) {
	outs := make([]string, len(cmds))
	errs := make([]error, len(cmds))
	for i := 0; i < len(cmds); {
		j := i + 1
		if ordered(cmds[i]) {
			for j < len(cmds) && ordered(cmds[j]) {
				j++
			}
		}
		st.applyRun(ctx, cmds[i:j], outs[i:j], errs[i:j], startCall, stopCall)
		i = j
	}
	return outs, errs
}

// start implements [Store.Start] for both stores: cmd as a run of its own
// (applyRun), so it is indexed for the sweep like a batched start.
func (st *redisBase) start(ctx context.Context, cmd protocol.Command, startCall func(protocol.Command) scriptCall, stopCall stopCallFunc) (string, error) {
	cmd.Op = protocol.OpStart
	outs, errs := make([]string, 1), make([]error, 1)
	st.applyRun(ctx, []protocol.Command{cmd}, outs, errs, startCall, stopCall)
	return outs[0], errs[0]
}

// applyRun sends the script calls of cmds (one per start, stop or leave,
// one per room of a disconnect) as one pipeline with evalRetry, and fills
// outs and errs. Each command is timed in the duration histogram under its
// own script, with the time of the whole pipeline (its own call's round
// trip, retries included), so the histogram counts commands as it did
// when each was its own call.
//
// On Redis Cluster (st.indexAfter), once the start scripts have returned,
// their rooms are added to their sweep buckets, due at the expiry the
// scripts wrote (st.index), or due now for a start that was stale or failed
// (it may have run on an earlier try). A bucket lives in another hash slot
// than its rooms there, so this cannot be part of the start script; doing
// it after the script, not before, is what keeps a concurrent sweep from
// dropping the room (see scripts/due.lua). Elsewhere the start script adds
// the room itself, in the same atomic step.
func (st *redisBase) applyRun(ctx context.Context, cmds []protocol.Command, outs []string, errs []error, startCall func(protocol.Command) scriptCall, stopCall stopCallFunc) {
	calls := make([]scriptCall, 0, len(cmds))
	for _, cmd := range cmds {
		switch cmd.Op {
		case protocol.OpStart:
			calls = append(calls, startCall(cmd))
		case protocol.OpStop:
			calls = append(calls, stopCall(cmd.Room, cmd.User, cmd.Conn, cmd.Seq, protocol.ReasonStopped))
		case protocol.OpLeave:
			calls = append(calls, stopCall(cmd.Room, cmd.User, cmd.Conn, cmd.Seq, protocol.ReasonLeft))
		case protocol.OpDisconnect:
			for _, room := range cmd.Rooms {
				calls = append(calls, stopCall(room, cmd.User, cmd.Conn, cmd.Seq, protocol.ReasonDisconnected))
			}
		}
	}
	if len(calls) == 0 {
		return // only ops DecodeCommand does not admit
	}
	name := scriptBatch
	if len(cmds) == 1 {
		name = commandScript(cmds[0].Op)
	}
	began := time.Now()
	res, cerrs := st.evalRetry(ctx, name, calls)
	var due sweepIndex // nil: the start scripts index their rooms
	if st.indexAfter {
		due = sweepIndex{}
	}
	k := 0
	for i, cmd := range cmds {
		switch cmd.Op {
		case protocol.OpStart, protocol.OpStop, protocol.OpLeave:
			outs[i], errs[i] = st.callOutcome(res[k], cerrs[k])
			if due != nil && cmd.Op == protocol.OpStart {
				// Every start attempt is indexed, whatever its outcome: a
				// start whose reply was lost ran, and its retry answers
				// stale; a failed one may have run too. Without the
				// expiry the script wrote, the room is due now: the next
				// sweep finds nothing expired and reschedules it exactly.
				// An extra entry costs one empty sweep; a missing one
				// loses the typist's expired stop.
				expiry, ok := startExpiry(res[k])
				if !ok {
					expiry = time.Now().UnixMilli()
				}
				due.add(cmd.Room, expiry)
			}
			k++
		case protocol.OpDisconnect:
			n := len(cmd.Rooms)
			rooms, err := st.roomOutcomes(cmd.Rooms, res[k:k+n], cerrs[k:k+n])
			outs[i], errs[i] = disconnectOutcome(rooms, err), err
			k += n
		}
	}
	st.index(ctx, due)
	took := time.Since(began).Seconds()
	for _, cmd := range cmds {
		switch cmd.Op {
		case protocol.OpStart, protocol.OpStop, protocol.OpLeave, protocol.OpDisconnect:
			st.m.scriptDuration.WithLabelValues(commandScript(cmd.Op)).Observe(took)
		}
	}
}

// index adds rooms to their sweep buckets: one ZADD LT per bucket, all in
// one pipeline, retried as a whole (ZADD LT is idempotent). LT moves a
// room's score only earlier, and always replaces a sweep claim, which
// scores above every due time (scripts/due.lua). A failure after retries
// is logged: the starts did apply, and if their rooms are not indexed the
// typists' stops are not pushed, but their entries still lapse (scores
// and PEXPIRE), so snapshots and the clients' local expiry hide them.
func (st *redisBase) index(ctx context.Context, x sweepIndex) {
	if len(x) == 0 {
		return
	}
	err := st.call(ctx, scriptIndex, func(ctx context.Context) error {
		pipe := st.rdb.Pipeline()
		for b, rooms := range x {
			zs := make([]redis.Z, 0, len(rooms))
			for enc, due := range rooms {
				zs = append(zs, redis.Z{Score: float64(due), Member: enc})
			}
			pipe.ZAddLT(ctx, st.names.SweepKey(b), zs...)
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		st.rl.Error("sweep-index", "adding rooms to the sweep index failed; their typists' stops will not be pushed", zap.Error(err))
	}
}

// migrateLegacySweep moves the rooms that workers of Ellipsis before the
// sweep buckets keep in their one-key index (names.LegacySweepKey) into
// their buckets and removes exactly those from it, so a rolling upgrade
// loses no expiry push. It returns how many rooms it moved. Malformed
// members are dropped.
func (st *redisBase) migrateLegacySweep(ctx context.Context) (int, error) {
	key := st.names.LegacySweepKey()
	var zs []redis.Z
	err := st.call(ctx, "legacy-sweep", func(ctx context.Context) error {
		var err error
		zs, err = st.rdb.ZRangeWithScores(ctx, key, 0, 1023).Result()
		return err
	})
	if err != nil || len(zs) == 0 {
		return 0, err
	}
	x := sweepIndex{}
	members := make([]any, 0, len(zs))
	for _, z := range zs {
		enc, _ := z.Member.(string)
		members = append(members, enc)
		if room, err := names.Dec(enc); err == nil && protocol.ValidateID("room", room) == nil {
			x.add(room, int64(z.Score))
		}
	}
	st.index(ctx, x)
	return len(zs), st.rdb.ZRem(ctx, key, members...).Err()
}

// startExpiry reads expiry_ms from a start script reply {outcome, now,
// expiry}; false for a stale start (expiry 0) or another shape.
func startExpiry(v any) (int64, bool) {
	a, ok := v.([]any)
	if !ok || len(a) < 3 {
		return 0, false
	}
	e, ok := a[2].(int64)
	return e, ok && e > 0
}

// sweepIndex collects rooms to add to their sweep buckets (redisBase.index):
// bucket -> enc(room) -> earliest due unix ms.
type sweepIndex map[int]map[string]int64

// add records room due at unix ms due (the earliest of several wins).
func (x sweepIndex) add(room string, due int64) {
	b := names.SweepBucket(room)
	m := x[b]
	if m == nil {
		m = map[string]int64{}
		x[b] = m
	}
	enc := names.Enc(room)
	if cur, ok := m[enc]; !ok || due < cur {
		m[enc] = due
	}
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

// sweep sweeps the due rooms of every sweep bucket: one round reads and
// claims up to sweepBatch due rooms per bucket (due.lua, one call per
// bucket, pipelined), runs roomCall's sweep script for each claimed room
// (pipelined), and reschedules them (reschedule.lua, one call per bucket).
// Buckets that had a full batch get another round, up to sweepMaxBatches
// rounds per call. Each sweep script returns {stops, removed, now,
// next_due}. A room whose sweep failed keeps its claim and is swept again
// when the claim lease (sweepClaimLease) ends.
func (st *redisBase) sweep(ctx context.Context, roomCall func(room string, head, tail []byte) scriptCall) (SweepResult, error) {
	var total SweepResult
	n := st.names
	buckets := make([]int, names.SweepBuckets)
	for b := range buckets {
		buckets[b] = b
	}
	lease := sweepClaimLease.Milliseconds()
	for round := 0; round < sweepMaxBatches && len(buckets) > 0; round++ {
		dueCalls := make([]scriptCall, len(buckets))
		for i, b := range buckets {
			dueCalls[i] = scriptCall{st.idx.due, []string{n.SweepKey(b)}, []any{sweepBatch, lease, sweepClaimOffset}}
		}
		res, errs := st.eval(ctx, scriptDue, dueCalls)
		type claimed struct {
			bucket         int
			encRoom, claim string
		}
		var (
			claims []claimed
			calls  []scriptCall
			lags   []float64
			full   []int
			failed []error
		)
		for i, b := range buckets {
			if errs[i] != nil {
				failed = append(failed, errs[i])
				continue
			}
			a, ok := res[i].([]any)
			if !ok || len(a) < 1 || len(a)%3 != 1 {
				failed = append(failed, fmt.Errorf("worker: unexpected due reply %v", res[i]))
				continue
			}
			now, _ := a[0].(int64)
			if (len(a)-1)/3 >= sweepBatch {
				full = append(full, b)
			}
			for j := 1; j+2 < len(a); j += 3 {
				encRoom, _ := a[j].(string)
				claim, _ := a[j+1].(string)
				dueS, _ := a[j+2].(string)
				room, err := names.Dec(encRoom)
				if err != nil || protocol.ValidateID("room", room) != nil || names.SweepBucket(room) != b {
					// Not written by a worker: drop it from the index.
					st.rl.Warn("sweep-bad-member", "dropping a malformed sweep index member", zap.String("member", encRoom), zap.Int("bucket", b))
					if err := st.rdb.ZRem(ctx, n.SweepKey(b), encRoom).Err(); err != nil {
						st.m.redisErrors.Inc()
					}
					continue
				}
				head, tail, err := stopTemplate(room)
				if err != nil {
					return total, err
				}
				claims = append(claims, claimed{b, encRoom, claim})
				calls = append(calls, roomCall(room, head, tail))
				if due, err := strconv.ParseFloat(dueS, 64); err == nil {
					lags = append(lags, max(0, float64(now)-due)/1000)
				}
			}
		}
		if len(calls) > 0 {
			sres, serrs := st.eval(ctx, scriptSweep, calls)
			resched := map[int][]any{}
			for i := range calls {
				if serrs[i] != nil {
					failed = append(failed, serrs[i])
					continue
				}
				v, ok := sres[i].([]any)
				if !ok || len(v) < 4 {
					failed = append(failed, fmt.Errorf("worker: unexpected sweep reply %v", sres[i]))
					continue
				}
				stops, _ := v[0].(int64)
				removed, _ := v[1].(int64)
				next, _ := v[3].(int64)
				total.Rooms++
				total.Stops += int(stops)
				total.Removed += int(removed)
				st.m.expiredStops.Add(float64(stops))
				st.m.eventsPublished.WithLabelValues(protocol.TypeTypingStop).Add(float64(stops))
				c := claims[i]
				resched[c.bucket] = append(resched[c.bucket], c.encRoom, c.claim, next)
			}
			for _, l := range lags {
				st.m.sweepLag.Observe(l)
			}
			rcalls := make([]scriptCall, 0, len(resched))
			for b, args := range resched {
				rcalls = append(rcalls, scriptCall{st.idx.reschedule, []string{n.SweepKey(b)}, args})
			}
			if len(rcalls) > 0 {
				_, rerrs := st.eval(ctx, scriptReschedule, rcalls)
				for _, err := range rerrs {
					if err != nil {
						failed = append(failed, err)
					}
				}
			}
		}
		if len(failed) > 0 {
			return total, errors.Join(failed...)
		}
		buckets = full
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

// snapshotFailed wraps a failed Redis call of a snapshot.
func snapshotFailed(err error) *snapshotError {
	code := protocol.CodeInternal
	if isRedisUnavailable(err) {
		code = protocol.CodeUnavailable
	}
	return &snapshotError{code, err}
}
