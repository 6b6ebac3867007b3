// Package store keeps the presence worker's typing state in Redis: the
// [Store] interface and its Redis implementation, two layouts (zset, keys)
// over one engine, and the Lua scripts (scripts/).
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
)

// Store is where a worker keeps typing state: the commands' effects, the
// sweep and "who is typing". Each method is atomic per room (one Lua call,
// or one call per room of a disconnect), publishes the events its state
// change implies on the room's channel in the same atomic step, and is safe
// for concurrent use by any number of goroutines and workers sharing one
// Redis. Every command costs O(log N) of Redis time in the N typists of its
// room (docs/BENCHMARKS.md, "Cost by room size").
//
// One implementation, [redisStore], runs the same scripts on two layouts
// selected by Config.Store (ELLIPSIS_STORE): "zset" (the default: a user's
// connections are fields of the user's hash; "who is typing" reads the
// room's sorted set of users) and "keys" (the seed's pattern 1: one TTL key
// per typist, listed with SCAN). Both pass the contract suite
// (contract_test.go); README.md says where they differ in cost.
//
// Errors are Redis failures after retries, or an unexpected script reply;
// Snapshot's errors are *SnapshotError, which carry the reply code.
type Store interface {
	// Prepare loads the store's scripts on the server, so the first
	// commands use EVALSHA at once. Failure is not fatal: calls fall back
	// to EVAL.
	Prepare(ctx context.Context) error
	// Start applies a start command (Room, User, Conn set; Thread,
	// Activity and TTLMs optional, TTLMs already checked against
	// ELLIPSIS_SERVICE_MAX_TTL) in its scope (the room, or Thread of it)
	// and returns OutcomeStarted, OutcomeRefreshed, OutcomeThrottled,
	// OutcomeCoalesced, OutcomeStale, OutcomeLate, OutcomeSuperseded or
	// OutcomeTooManyThreads.
	Start(ctx context.Context, cmd protocol.Command) (Outcome, error)
	// Stop applies a stop or leave command, reason protocol.ReasonStopped
	// or protocol.ReasonLeft, and returns OutcomeStopped, OutcomeCoalesced,
	// OutcomeNoop or OutcomeStale, of the scope it names (a stop's Thread,
	// or the room). Without Conn it ends every connection of the user in
	// that scope, ignores Seq, and supersedes the user's starts there sent
	// before it (see scripts/start.lua). A leave also ends the connection
	// in every thread of the room (scripts/stop.lua).
	Stop(ctx context.Context, cmd protocol.Command, reason string) (Outcome, error)
	// Disconnect stops the connection in every room of cmd.Rooms with
	// reason protocol.ReasonDisconnected and returns one outcome per room
	// (OutcomeError for a room that failed); the error joins the rooms'.
	Disconnect(ctx context.Context, cmd protocol.Command) ([]Outcome, error)
	// Apply applies cmds in order, each as Start, Stop (op stop: reason
	// stopped; op leave: left) or Disconnect would, and returns one outcome
	// and one error per command; a disconnect's outcome sums its rooms'
	// (see disconnectOutcome), and an op DecodeCommand does not admit gets
	// OutcomeNone and no error. The script calls of consecutive ordered commands
	// (Seq and Conn set) go out as one pipeline, one round trip, retried
	// as one; an unordered command is sent alone, after the commands before
	// it have finished and before those after it start, exactly as Start,
	// Stop and Disconnect send it. Why: [redisStore.apply].
	Apply(ctx context.Context, cmds []protocol.Command) ([]Outcome, []error)
	// Sweep settles the rooms due in the sweep index (every bucket, so
	// every shard of a Cluster): typing_stop(expired) for every typist whose
	// time ran out, and the final state of every user whose transitions
	// were coalesced, each exactly once across any number of concurrent
	// sweepers.
	Sweep(ctx context.Context) (SweepResult, error)
	// Snapshot returns who is typing in room now: Total, the number of
	// users with a live entry whose typing_start was published, and at
	// most limit of them (clamped to [0, MaxSnapshotLimit]) with their
	// display names, sorted by user, never nil. Store zset lists the most
	// recently active users in O(limit + log N) (Total is exact up to
	// limit + 64 users, see scripts/snapshot.lua beyond); store keys SCANs
	// the keyspace (by design) and lists the first users in enc(user)
	// order (Total exact up to limit + 64 users shown or held). Threads
	// lists the room's threads with a typist (at most limit entries in
	// all, from the thread users zset in both stores), each with its
	// total among the limit + 64 most recent thread typists read.
	Snapshot(ctx context.Context, room string, limit int) (protocol.Snapshot, error)
}

// Metrics are the store's collectors; the worker makes and registers them
// (ellipsis_worker_*, see the worker's README).
type Metrics struct {
	ScriptDuration  *prometheus.HistogramVec // {script}, seconds per script call or pipeline
	RedisErrors     prometheus.Counter       // failed Redis tries
	EventsPublished *prometheus.CounterVec   // {type}
	ExpiredStops    prometheus.Counter       // typing_stop published by the sweep
	SweepLag        prometheus.Histogram     // seconds between a room's due time and its sweep
}

// RateLog writes repetitive log lines (Redis errors, malformed members) at
// most once per key per interval: the worker's *ratelog.Logger
// (shared/ratelog).
type RateLog interface {
	Warn(key, msg string, fields ...zap.Field)
	Error(key, msg string, fields ...zap.Field)
}

var _ RateLog = (*ratelog.Logger)(nil)

// unregisteredMetrics are collectors nobody gathers, for a store built
// without Options.Metrics.
func unregisteredMetrics() *Metrics {
	return &Metrics{
		ScriptDuration:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "script_duration_seconds"}, []string{"script"}),
		RedisErrors:     prometheus.NewCounter(prometheus.CounterOpts{Name: "redis_errors_total"}),
		EventsPublished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "events_published_total"}, []string{"type"}),
		ExpiredStops:    prometheus.NewCounter(prometheus.CounterOpts{Name: "expired_stops_total"}),
		SweepLag:        prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sweep_lag_seconds"}),
	}
}

// nopRateLog drops every line, for a store built without Options.RateLog.
type nopRateLog struct{}

func (nopRateLog) Warn(string, string, ...zap.Field)  {}
func (nopRateLog) Error(string, string, ...zap.Field) {}

// SweepResult sums one [Store.Sweep].
type SweepResult struct {
	Rooms   int // due rooms swept
	Removed int // expired users removed from their rooms
	Stops   int // typing_stop published (expired, or a coalesced stop)
	Starts  int // typing_start published for a coalesced start
}

// Redis tuning. The numbers are ours (the seed design has none): a script
// call normally takes well under a millisecond, so a few short retries ride
// out a failover or a dropped connection without holding a shard for long.
const (
	// DefaultKeyGrace is how long a room's keys outlive the last entry they
	// may hold: the user hashes and the room's sorted sets live ttl +
	// DefaultKeyGrace + throttle after their last renewal (every start
	// outside the refresh window renews them). The room then frees its
	// memory even if no sweeper ever runs again (the seed's fail-safe TTL,
	// at room granularity). It must exceed the sweep interval by far, or
	// rooms would vanish before their expired typists are pushed.
	DefaultKeyGrace = 10 * time.Second

	// StopGuard is how long after a stop without conn (the platform's
	// "message posted") a start sent by the user's gateway (Command.TsMs)
	// is still taken as sent before it and dropped (OutcomeSuperseded): the
	// gateways' clocks may be this far from Redis TIME. A start sent a
	// second or more after the stop shows.
	StopGuard = 500 * time.Millisecond

	// DefaultMaxThreads is ELLIPSIS_MAX_THREADS_PER_USER's default.
	DefaultMaxThreads = 5

	// MaxSnapshotLimit bounds the users one snapshot lists: the snapshot
	// script reads one name per listed user, and 500 keep it far below a
	// millisecond of Redis.
	MaxSnapshotLimit = 500

	// RedisAttempts bounds the tries of one script call (or pipeline).
	RedisAttempts = 4
	// redisBackoffMin and redisBackoffMax bound the backoff between tries
	// (shared/backoff, full jitter): ceilings 50ms, 100ms, 200ms, ...
	// capped at 1s.
	redisBackoffMin = 50 * time.Millisecond
	redisBackoffMax = time.Second
	// redisAttemptTimeout bounds one try (dial, write, script, read).
	redisAttemptTimeout = 2 * time.Second

	// sweepBatch is how many due rooms one sweep round reads and sweeps in
	// one pipeline; a full batch is followed at once by another, up to
	// sweepMaxBatches per tick (so a backlog of 4096 rooms clears per tick).
	sweepBatch      = 256
	sweepMaxBatches = 16
	// sweepRoomLimit bounds the expired and the pending users one sweep
	// script settles in a room (each), so that no room makes a script run
	// for more than a fraction of a millisecond; a room with more is due
	// again at once.
	sweepRoomLimit = 64
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
	scriptSnapshot   = "snapshot" // the snapshot script, or store keys's SCAN loop and names
	// scriptBatch names a pipeline of several commands' calls in the
	// redis-retry log; the histogram counts each command under its own
	// script (see redisStore.applyRun).
	scriptBatch = "batch"
)

// The layouts of [Options].Kind: the values of ELLIPSIS_STORE
// (config.StoreZSet and config.StoreKeys in shared/config's table;
// TestKindsAreTheSettings holds them equal).
const (
	// KindZSet keeps one sorted set per room (the default).
	KindZSet = "zset"
	// KindKeys is the seed's pattern 1: one TTL key per typist, listed
	// with SCAN.
	KindKeys = "keys"
)

// ErrUnknownStore is returned by New for a kind other than [KindZSet] and
// [KindKeys] (config.Validate rejects those first, naming ELLIPSIS_STORE).
var ErrUnknownStore = errors.New("worker: unknown store")

// scripts are the Lua scripts of the store, built for one publish command.
type scripts struct {
	start, stop, sweep, snapshot, due, reschedule *redis.Script
}

func (s *scripts) all() []*redis.Script {
	return []*redis.Script{s.start, s.stop, s.sweep, s.snapshot, s.due, s.reschedule}
}

// redisStore is the [Store]: the engine (calls, retry, batching, sweep)
// over one layout (where a user's connection entries live, and how
// "who is typing" is listed).
type redisStore struct {
	engine
	lay layout
	lua scripts
}

var _ Store = (*redisStore)(nil)

// Options are what [New] builds a store from.
type Options struct {
	// Kind is [KindZSet] or [KindKeys] (ELLIPSIS_STORE); any
	// other value is ErrUnknownStore.
	Kind string
	// PubSub is redisconn.PubSubClassic (events go out with PUBLISH) or
	// redisconn.PubSubSharded (SPUBLISH).
	PubSub string
	// Redis is the client every call goes through; nil only to check the
	// scripts (CheckScripts). A *redis.ClusterClient makes the worker index
	// rooms for the sweep after the scripts (their bucket is in another
	// slot).
	Redis redis.UniversalClient
	Names names.Names
	// TTL and Throttle are the typing settings (ELLIPSIS_TYPING_TTL,
	// ELLIPSIS_TYPING_THROTTLE).
	TTL, Throttle time.Duration
	// MaxThreads is ELLIPSIS_MAX_THREADS_PER_USER: the threads of a room
	// one user may type in at once; 0 is [DefaultMaxThreads].
	MaxThreads int
	// Metrics are the store's collectors; nil: unregistered ones.
	Metrics *Metrics
	// Log is the store's logger and RateLog its rate-limited one; nil:
	// none.
	Log     *zap.Logger
	RateLog RateLog
	// Events, when not nil, gets every room event the store publishes on
	// Redis Pub/Sub, after the script that published it returned (see
	// [EventSink]; the worker's ELLIPSIS_NATS_EVENTS). nil: no events are
	// reported, and the sweep script keeps none (no cost when off).
	Events EventSink
}

// New builds the store of o.Kind on o.Redis (see [Options]). It does no
// I/O.
func New(o Options) (Store, error) {
	kind, n, ttl, throttle := o.Kind, o.Names, o.TTL, o.Throttle
	m, log, rl := o.Metrics, o.Log, o.RateLog
	if m == nil {
		m = unregisteredMetrics()
	}
	if log == nil {
		log = zap.NewNop()
	}
	if rl == nil {
		rl = nopRateLog{}
	}
	st := &redisStore{engine: engine{
		rdb: o.Redis, names: n, m: m, log: log, rl: rl, events: o.Events,
		indexAfter: isCluster(o.Redis),
		ttlMs:      ttl.Milliseconds(),
		throttleMs: throttle.Milliseconds(),
		keyPxMs:    (ttl + DefaultKeyGrace + throttle).Milliseconds(),
		guardMs:    StopGuard.Milliseconds(),
		maxThreads: o.MaxThreads,
	}}
	if st.maxThreads <= 0 {
		st.maxThreads = DefaultMaxThreads
	}
	switch kind {
	case KindZSet:
		st.lay = zsetLayout{n}
	case KindKeys:
		st.lay = &keysLayout{n: n, scanCount: DefaultScanCount}
	default:
		return nil, fmt.Errorf("%w %q (want %s or %s)", ErrUnknownStore, kind, KindZSet, KindKeys)
	}
	publish := publishCommand(o.PubSub)
	for name, p := range map[string]**redis.Script{
		"start": &st.lua.start, "stop": &st.lua.stop, "sweep": &st.lua.sweep,
		"snapshot": &st.lua.snapshot, "due": &st.lua.due, "reschedule": &st.lua.reschedule,
	} {
		s, err := loadScript(publish, name)
		if err != nil {
			return nil, err
		}
		*p = s
	}
	return st, nil
}

// CheckScripts builds every store's scripts once, so a broken embed fails
// New instead of the first command.
func CheckScripts() error {
	for _, kind := range []string{KindZSet, KindKeys} {
		for _, pubsub := range []string{redisconn.PubSubClassic, redisconn.PubSubSharded} {
			if _, err := New(Options{Kind: kind, PubSub: pubsub, Names: names.Names{}, TTL: time.Second, Throttle: time.Second}); err != nil {
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

//go:embed scripts/*.lua
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
	return redis.NewScript(stripComments(head + string(lib) + "\n" + string(body))), nil
}

// stripComments drops the scripts' comment-only and blank lines: the
// documentation stays in the files, and the script sent to the server is
// short (Redis hashes and keeps it once; miniredis parses it per call). The
// scripts have no long strings or long comments, so a line whose first
// non-blank characters are "--" is a comment.
func stripComments(src string) string {
	var b strings.Builder
	b.Grow(len(src))
	for line := range strings.Lines(src) {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// Prepare implements [Store]: SCRIPT LOAD of every script.
func (st *redisStore) Prepare(ctx context.Context) error {
	var errs []error
	for _, s := range st.lua.all() {
		if err := s.Load(ctx, st.rdb).Err(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
