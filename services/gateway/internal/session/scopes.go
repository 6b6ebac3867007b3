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
// changes nothing. A start in a thread already counted is a refresh.
// Threads whose last start is ttl old are forgotten first.
func (tt *threadsTyped) startThread(room, thread string, now time.Time, max int, ttl time.Duration) bool {
	live := (*tt)[room]
	for t, at := range live {
		if !now.Before(at.Add(ttl)) {
			delete(live, t)
		}
	}
	if _, ok := live[thread]; !ok && len(live) >= max {
		return false
	}
	if live == nil {
		if *tt == nil {
			*tt = threadsTyped{}
		}
		live = map[string]time.Time{}
		(*tt)[room] = live
	}
	live[thread] = now
	return true
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
