package worker

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// logEvery is the least time between two log lines of one repetitive kind
// (invalid payloads, Redis errors, slow consumers). Mattermost logs full
// queues at most once a minute; ten seconds keeps a live incident visible.
const logEvery = 10 * time.Second

// rateLog writes at most one line per key per interval and reports how many
// it suppressed in between, so a flood of bad payloads or a Redis outage
// cannot flood the logs. Safe for concurrent use.
type rateLog struct {
	log      *zap.Logger
	interval time.Duration

	mu    sync.Mutex
	state map[string]*rateState
}

type rateState struct {
	last       time.Time
	suppressed int
}

func newRateLog(log *zap.Logger, interval time.Duration) *rateLog {
	return &rateLog{log: log, interval: interval, state: map[string]*rateState{}}
}

// allow reports whether a line of kind key may be written now, and how many
// were suppressed since the last one written.
func (r *rateLog) allow(key string, now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state[key]
	if st == nil {
		st = &rateState{}
		r.state[key] = st
	}
	if !st.last.IsZero() && now.Sub(st.last) < r.interval {
		st.suppressed++
		return false, 0
	}
	n := st.suppressed
	st.last, st.suppressed = now, 0
	return true, n
}

// Warn logs msg at warn level unless a line of kind key was written less
// than the interval ago; the line carries "suppressed", the lines dropped
// since the previous one.
func (r *rateLog) Warn(key, msg string, fields ...zap.Field) {
	ok, n := r.allow(key, time.Now())
	if !ok {
		return
	}
	r.log.Warn(msg, append(fields, zap.Int("suppressed", n))...)
}

// Error is [rateLog.Warn] at error level.
func (r *rateLog) Error(key, msg string, fields ...zap.Field) {
	ok, n := r.allow(key, time.Now())
	if !ok {
		return
	}
	r.log.Error(msg, append(fields, zap.Int("suppressed", n))...)
}
