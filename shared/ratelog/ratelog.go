// Package ratelog writes repetitive log lines (invalid payloads, Redis
// errors, slow consumers) at most once per interval for each kind, and says
// how many it dropped in between, so a flood or an outage cannot flood the
// logs. Both services use it (the worker's per-kind lines, the gateway's
// slow-consumer, resync and invalid-event warnings).
package ratelog

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// DefaultInterval is the least time between two lines of one kind when
// the caller has no reason for another: Mattermost logs full queues at most
// once a minute; ten seconds keeps a live incident visible.
const DefaultInterval = 10 * time.Second

// MaxKinds bounds the kinds remembered. Kinds are meant to be a small set
// fixed by the code ("redis-retry", "snapshot-"+code); past MaxKinds, every
// new kind shares one state (overflowKind), so its lines are limited
// together rather than the map growing.
const MaxKinds = 1024

const overflowKind = "\x00overflow"

// Logger is a rate-limited view of a *zap.Logger. Safe for concurrent use;
// no lock is held while writing.
type Logger struct {
	log      *zap.Logger
	interval time.Duration

	mu    sync.Mutex
	state map[string]*kindState
}

type kindState struct {
	last       time.Time
	suppressed int
}

// New returns a Logger writing to log (nil: no output) at most one line per
// kind per interval (<= 0: DefaultInterval).
func New(log *zap.Logger, interval time.Duration) *Logger {
	if log == nil {
		log = zap.NewNop()
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Logger{log: log, interval: interval, state: map[string]*kindState{}}
}

// Interval is the least time between two lines of one kind.
func (r *Logger) Interval() time.Duration { return r.interval }

// Allow reports whether a line of this kind may be written now and, when it
// may, how many were suppressed since the last one written; for callers
// that write the line with their own logger.
func (r *Logger) Allow(kind string) (ok bool, suppressed int) { return r.allowAt(kind, time.Now()) }

func (r *Logger) allowAt(kind string, now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state[kind]
	if st == nil {
		if len(r.state) >= MaxKinds {
			kind = overflowKind
			st = r.state[kind]
		}
		if st == nil {
			st = &kindState{}
			r.state[kind] = st
		}
	}
	if !st.last.IsZero() && now.Sub(st.last) < r.interval {
		st.suppressed++
		return false, 0
	}
	n := st.suppressed
	st.last, st.suppressed = now, 0
	return true, n
}

// Warn logs msg at warn level unless a line of this kind was written less
// than the interval ago; the line carries "suppressed", the lines dropped
// since the previous one.
func (r *Logger) Warn(kind, msg string, fields ...zap.Field) {
	if ok, n := r.Allow(kind); ok {
		r.log.Warn(msg, append(fields, zap.Int("suppressed", n))...)
	}
}

// Error is [Logger.Warn] at error level.
func (r *Logger) Error(kind, msg string, fields ...zap.Field) {
	if ok, n := r.Allow(kind); ok {
		r.log.Error(msg, append(fields, zap.Int("suppressed", n))...)
	}
}
