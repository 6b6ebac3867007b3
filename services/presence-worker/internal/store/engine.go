package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/backoff"
	"github.com/ellipsis-chat/ellipsis/shared/names"
)

// engine is the part of the store that talks to Redis: the client, the
// settings every script gets, metrics, and the retrying call paths.
type engine struct {
	rdb   redis.UniversalClient
	names names.Names
	m     *Metrics
	log   *zap.Logger
	rl    RateLog

	// indexAfter: the command scripts cannot add their room to its sweep
	// bucket (Redis Cluster: another hash slot), so the worker does it
	// after them (applyRun, index). Elsewhere the script does it in the
	// same atomic step, which leaves no window for a crash in between.
	indexAfter bool

	// ttlMs, throttleMs: the typing settings; keyPxMs: the lifetime of a
	// user hash and of the room's sorted sets after their last renewal
	// (ttl + DefaultKeyGrace + throttle); guardMs: StopGuard.
	ttlMs, throttleMs, keyPxMs, guardMs int64
	// maxThreads is ELLIPSIS_MAX_THREADS_PER_USER (scripts/start.lua).
	maxThreads int

	// events, when not nil, also gets every room event the scripts
	// published, after they return (events.go).
	events EventSink
}

// scriptCall is one script invocation.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// eval runs calls with evalRetry and observes the whole of it, retries
// included, in the duration histogram under name.
func (st *engine) eval(ctx context.Context, name string, calls []scriptCall) ([]any, []error) {
	defer observeSince(st.m, name)()
	return st.evalRetry(ctx, name, calls)
}

// evalRetry runs calls, pipelined when there are several, and retries the
// calls that failed with a transient error (connection, timeout, LOADING,
// READONLY, TRYAGAIN, ...) up to RedisAttempts times with jittered
// backoff, stopping early when ctx ends. It returns each call's reply and
// error. name is the "script" of the retry log line.
//
// Only the calls that failed are sent again, in their order. A call whose
// reply was lost (a dropped connection, a timeout) may have run: scripts
// are written so that running one twice in a row is harmless (see
// retryable), and a pipeline's calls with a seq become stale on a second
// run (see redisStore.apply). go-redis's own retries, which would resend a
// whole pipeline, are off (New sets MaxRetries -1).
func (st *engine) evalRetry(ctx context.Context, name string, calls []scriptCall) ([]any, []error) {
	res, errs, _ := st.evalRetryTracked(ctx, name, calls)
	return res, errs
}

// evalRetryTracked is evalRetry that also reports which calls were sent
// more than once: their first run may have applied with its reply lost, so
// the reply read is that of a second run.
func (st *engine) evalRetryTracked(ctx context.Context, name string, calls []scriptCall) ([]any, []error, []bool) {
	res := make([]any, len(calls))
	errs := make([]error, len(calls))
	retried := make([]bool, len(calls))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	bo := backoff.New(redisBackoffMin, redisBackoffMax)
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			for _, i := range pending {
				retried[i] = true
			}
		}
		st.evalOnce(ctx, calls, pending, res, errs)
		pending = st.failed(ctx, pending, errs)
		if len(pending) == 0 || attempt >= RedisAttempts {
			return res, errs, retried
		}
		st.rl.Warn("redis-retry", "redis call failed, retrying",
			zap.String("script", name), zap.Int("attempt", attempt), zap.Int("calls", len(pending)), zap.Error(errs[pending[0]]))
		st.reloadSlots()
		if !bo.Sleep(ctx) {
			return res, errs, retried
		}
	}
}

// failed counts the failed calls among idx and returns those worth another
// try (a retryable error, ctx still live).
func (st *engine) failed(ctx context.Context, idx []int, errs []error) []int {
	retry := idx[:0]
	for _, i := range idx {
		if errs[i] == nil {
			continue
		}
		st.m.RedisErrors.Inc()
		if retryable(errs[i]) && ctx.Err() == nil {
			retry = append(retry, i)
		}
	}
	return retry
}

// reloadSlots asks a Cluster client to reload its slot map (in the
// background, before the retry's backoff ends). go-redis reloads it on
// MOVED, ASK and READONLY replies and otherwise only every minute; a master
// that died answers nothing, so without this a worker would keep sending
// its rooms' scripts to the dead address for up to a minute after its
// replica took over.
func (st *engine) reloadSlots() {
	if cc, ok := st.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// evalOnce makes one try of the calls listed in idx: one EVALSHA (EVAL
// when the script is not loaded) for a single call, else one pipeline of
// EVALSHA, rerun once for the calls whose script the server had lost
// (NOSCRIPT after a restart or SCRIPT FLUSH) after loading it.
func (st *engine) evalOnce(ctx context.Context, calls []scriptCall, idx []int, res []any, errs []error) {
	actx, cancel := context.WithTimeout(ctx, redisAttemptTimeout)
	defer cancel()
	if len(idx) == 1 {
		c := calls[idx[0]]
		res[idx[0]], errs[idx[0]] = c.script.Run(actx, st.rdb, c.keys, c.args...).Result()
		return
	}
	st.pipeline(actx, calls, idx, res, errs)
	var missing []int
	loaded := map[*redis.Script]bool{}
	for _, i := range idx {
		if errs[i] == nil || !redis.HasErrorPrefix(errs[i], "NOSCRIPT") {
			continue
		}
		missing = append(missing, i)
		if s := calls[i].script; !loaded[s] {
			loaded[s] = true
			if err := s.Load(actx, st.rdb).Err(); err != nil {
				errs[i] = err
			}
		}
	}
	if len(missing) > 0 {
		st.pipeline(actx, calls, missing, res, errs)
	}
}

// pipeline sends the calls listed in idx as one pipeline of EVALSHA.
func (st *engine) pipeline(ctx context.Context, calls []scriptCall, idx []int, res []any, errs []error) {
	pipe := st.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(idx))
	for j, i := range idx {
		c := calls[i]
		cmds[j] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read below
	for j, i := range idx {
		res[i], errs[i] = cmds[j].Result()
	}
}

// call runs one plain Redis call (not a script: SCAN, HGET) with the
// retry policy of eval: up to RedisAttempts tries of redisAttemptTimeout
// each, jittered backoff between them, stopping when ctx ends. fn must be
// safe to repeat (reads are).
func (st *engine) call(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	bo := backoff.New(redisBackoffMin, redisBackoffMax)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, redisAttemptTimeout)
		err := fn(actx)
		cancel()
		if err == nil || errors.Is(err, redis.Nil) {
			return err
		}
		st.m.RedisErrors.Inc()
		if !retryable(err) || ctx.Err() != nil || attempt >= RedisAttempts {
			return err
		}
		st.rl.Warn("redis-retry", "redis call failed, retrying",
			zap.String("script", what), zap.Int("attempt", attempt), zap.Error(err))
		st.reloadSlots()
		if !bo.Sleep(ctx) {
			return err
		}
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

// observeSince starts timing one call for the script duration histogram;
// call the returned func when it ends.
func observeSince(m *Metrics, name string) func() {
	t := m.ScriptDuration.WithLabelValues(name)
	began := time.Now()
	return func() { t.Observe(time.Since(began).Seconds()) }
}
