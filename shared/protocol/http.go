package protocol

import "time"

// ClientConfig is the body of the gateway's GET /v1/config: the timing a
// client must use (docs/protocol.md, "Timing"), in milliseconds, and the
// auth mode: "none" (the client passes ?user=&name=) or "jwt"
// (?access_token= or an Authorization: Bearer header), the gateway's
// ELLIPSIS_AUTH; and the limits a client splits its frames by: the largest
// client frame in bytes (ELLIPSIS_MAX_FRAME_BYTES), the most rooms watched
// per connection (ELLIPSIS_MAX_WATCHED_ROOMS; 0: watching is off) and the
// least time between two summaries of a watched room in ms
// (ELLIPSIS_WATCH_INTERVAL; docs/protocol.md, "Watching rooms"); the
// activities a typing_start may name (the standard ones, typing first,
// then ELLIPSIS_ACTIVITIES) and the most threads of a room a connection
// may type in at once (ELLIPSIS_MAX_THREADS_PER_USER; docs/protocol.md,
// "Threads and activities").
//
//	{"ttl_ms":5000,"refresh_ms":4000,"idle_stop_ms":3000,"auth":"none","max_frame_bytes":4096,"max_watched_rooms":500,"watch_interval_ms":2000,"activities":["typing","thinking","recording_audio","recording_video","uploading"],"max_threads_per_user":5}
type ClientConfig struct {
	TTLMs           int64  `json:"ttl_ms"`
	RefreshMs       int64  `json:"refresh_ms"`
	IdleStopMs      int64  `json:"idle_stop_ms"`
	Auth            string `json:"auth"`
	MaxFrameBytes   int    `json:"max_frame_bytes"`
	MaxWatchedRooms int    `json:"max_watched_rooms"`
	WatchIntervalMs int64  `json:"watch_interval_ms"`

	Activities        []string `json:"activities"`
	MaxThreadsPerUser int      `json:"max_threads_per_user"`
}

// TTL, Refresh and IdleStop return the timings as durations; 0 when the
// field is absent or not positive, so that a caller falls back to its
// default with cmp.Or.
func (c ClientConfig) TTL() time.Duration      { return positiveMs(c.TTLMs) }
func (c ClientConfig) Refresh() time.Duration  { return positiveMs(c.RefreshMs) }
func (c ClientConfig) IdleStop() time.Duration { return positiveMs(c.IdleStopMs) }

func positiveMs(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
