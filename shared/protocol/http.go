package protocol

import "time"

// ClientConfig is the body of the gateway's GET /v1/config: the timing a
// client must use (docs/protocol.md, "Timing"), in milliseconds, and the
// auth mode: "none" (the client passes ?user=&name=) or "jwt"
// (?access_token= or an Authorization: Bearer header), the gateway's
// ELLIPSIS_AUTH.
//
//	{"ttl_ms":5000,"refresh_ms":4000,"idle_stop_ms":3000,"auth":"none"}
type ClientConfig struct {
	TTLMs      int64  `json:"ttl_ms"`
	RefreshMs  int64  `json:"refresh_ms"`
	IdleStopMs int64  `json:"idle_stop_ms"`
	Auth       string `json:"auth"`
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
