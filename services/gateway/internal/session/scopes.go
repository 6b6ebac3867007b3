package session

import (
	"slices"
	"strings"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Defaults of [Config] zero values: those of ELLIPSIS_MAX_THREADS_PER_USER
// and ELLIPSIS_TYPING_TTL (shared/config's table).
const (
	DefaultMaxThreads = 5
	DefaultTypingTTL  = 5 * time.Second
)

// threadsTyped is the threads a connection types in, per joined room:
// room → thread → when its last start was published. A thread counts from
// its first start until its stop, the room's leave, or TypingTTL after its
// last start (the worker's entry expires then), so a connection types in
// at most MaxThreads threads of a room at once (docs/protocol.md, "Threads
// and activities"); the worker's own limit, over all of a user's
// connections, may still refuse a start the gateway let through (silently:
// commands get no reply). Bounded: at most MaxThreads entries per joined
// room. Under Conn.mu; nil until the first thread start.
type threadsTyped map[string]map[string]time.Time

// startThread records a start in thread of room at now, unless it would
// make the room's live threads more than max: then it reports false and
// changes nothing. A start in a thread already counted is a refresh;
// prev is that thread's last start before this one (zero: a new thread),
// for [threadsTyped.undoStart]. Threads whose last start is ttl old are
// forgotten first.
func (tt *threadsTyped) startThread(room, thread string, now time.Time, max int, ttl time.Duration) (prev time.Time, ok bool) {
	live := (*tt)[room]
	for t, at := range live {
		if !now.Before(at.Add(ttl)) {
			delete(live, t)
		}
	}
	prev, counted := live[thread]
	if !counted && len(live) >= max {
		return time.Time{}, false
	}
	if live == nil {
		if *tt == nil {
			*tt = threadsTyped{}
		}
		live = map[string]time.Time{}
		(*tt)[room] = live
	}
	live[thread] = now
	return prev, true
}

// undoStart takes back the start of thread in room recorded at at, whose
// command was not published (NATS refused it): the thread counts as it did
// before, from prev (zero: not at all), so a refused start holds no slot
// of MaxThreads for TypingTTL. A later start of the thread (at changed) is
// kept.
func (tt threadsTyped) undoStart(room, thread string, at, prev time.Time) {
	live := tt[room]
	if cur, ok := live[thread]; !ok || !cur.Equal(at) {
		return
	}
	if prev.IsZero() {
		tt.stopThread(room, thread)
		return
	}
	live[thread] = prev
}

// stopThread forgets thread of room (its stop was published).
func (tt threadsTyped) stopThread(room, thread string) {
	live := tt[room]
	delete(live, thread)
	if len(live) == 0 {
		delete(tt, room)
	}
}

// leaveRoom forgets room's threads: a leave (and a disconnect) ends the
// connection in every scope of the room.
func (tt threadsTyped) leaveRoom(room string) { delete(tt, room) }

// maxThreads and typingTTL are cfg's, or their defaults.
func (cfg *Config) maxThreads() int {
	if cfg.MaxThreads > 0 {
		return cfg.MaxThreads
	}
	return DefaultMaxThreads
}

func (cfg *Config) typingTTL() time.Duration {
	if cfg.TypingTTL > 0 {
		return cfg.TypingTTL
	}
	return DefaultTypingTTL
}

// checkActivity reports a typing_start's activity that is not one of
// cfg.Activities (the standard ones when empty), with the message of its
// bad_request; "" when it is accepted.
func (cfg *Config) checkActivity(a string) string {
	acts := cfg.Activities
	if len(acts) == 0 {
		acts = protocol.StandardActivities()
	}
	if a == "" || slices.Contains(acts, a) {
		return ""
	}
	return "activity: must be one of " + strings.Join(acts, ", ") + " (ELLIPSIS_ACTIVITIES adds others), got " + a
}
