package embedded

import (
	"fmt"
	"sync"

	"github.com/alicebob/miniredis/v2"
)

// RedisOptions configures [StartRedis].
type RedisOptions struct {
	// Addr to listen on. Empty means "127.0.0.1:0" (a random free port).
	Addr string
}

// Redis is a running embedded Redis-compatible server (miniredis) that
// keeps time like a real Redis:
//
//   - TIME, inside Lua scripts too (redis.call('TIME')), returns the wall
//     clock, because no fixed time is ever set (miniredis then uses
//     time.Now());
//   - TTLs run down with the wall clock: miniredis's ClockTTL mode ages
//     every TTL by the real time elapsed since the previous command, at the
//     start of each command. So a key set with PX 100 is gone for any command
//     issued 100 ms later, exactly as on Redis (which also expires lazily on
//     access, plus a background sweep nobody can observe).
//
// ClockTTL replaces the usual "FastForward every 50 ms from a goroutine"
// loop: it needs no goroutine, has no 50 ms lag, and cannot race a command
// between two ticks; TTLs and TIME read the same clock.
//
// It is for the dev stack only: miniredis implements most commands the
// presence worker uses (Lua scripts, sorted sets, Pub/Sub) but is not a
// production Redis.
type Redis struct {
	m    *miniredis.Miniredis
	addr string // bound at start; miniredis's Addr panics after Close
	once sync.Once
}

// StartRedis starts the server and returns once it listens.
func StartRedis(opts RedisOptions) (*Redis, error) {
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("embedded redis: listen on %s: %w", addr, err)
	}
	return &Redis{m: m, addr: m.Addr()}, nil
}

// Addr is the bound host:port, e.g. "127.0.0.1:41235".
func (r *Redis) Addr() string { return r.addr }

// URL is the redis:// URL of the server, e.g. "redis://127.0.0.1:41235".
func (r *Redis) URL() string { return "redis://" + r.addr }

// Close stops the server and closes its client connections. Safe to call
// more than once.
func (r *Redis) Close() { r.once.Do(r.m.Close) }
