// Package config reads the Ellipsis settings shared by the gateway, the
// presence worker and the dev stack from environment variables and flags.
// The names and defaults are docs/protocol.md's ("Configuration names"); every
// variable has a flag of the same name in lower case without the ELLIPSIS_
// prefix and with '-' for '_' (ELLIPSIS_TYPING_TTL is -typing-ttl). A flag
// wins over its variable, which wins over the default.
package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
)

// Defaults (docs/protocol.md, "Timing" and "Limits"; the seed design's numbers).
const (
	DefaultHTTPAddr        = ":8080"
	DefaultAdminAddr       = ":9090"
	DefaultNATSURL         = "nats://127.0.0.1:4222"
	DefaultRedisURL        = "redis://127.0.0.1:6379"
	DefaultSubjectPrefix   = "ellipsis"
	DefaultTypingTTL       = 5 * time.Second
	DefaultTypingThrottle  = 2 * time.Second
	DefaultTypingRefresh   = 4 * time.Second
	DefaultTypingIdleStop  = 3 * time.Second
	DefaultShutdownDrain   = 5 * time.Second
	DefaultLameDuck        = 3 * time.Second
	DefaultSweepInterval   = 250 * time.Millisecond
	DefaultSnapshotTimeout = 2 * time.Second
	// DefaultPubSubPingInterval and DefaultPubSubPingTimeout: a silent
	// Pub/Sub link is noticed within their sum (7 s).
	DefaultPubSubPingInterval = 5 * time.Second
	DefaultPubSubPingTimeout  = 2 * time.Second
	DefaultMaxFrameBytes      = 4096
	DefaultMaxRoomsPerConn    = 100
	DefaultInboundRate        = 20
	DefaultInboundBurst       = 40
	DefaultOutboundQueue      = 256
	DefaultWorkerShards       = 16
	DefaultSnapshotMax        = 100

	// Security defaults (README "Security").
	DefaultJWKSReload         = 10 * time.Second
	DefaultJWKSTimeout        = 5 * time.Second
	DefaultAuthzTimeout       = time.Second
	DefaultAuthzCacheTTL      = 30 * time.Second
	DefaultAuthzDenyCacheTTL  = 2 * time.Second
	DefaultInboundMaxRejected = 50
	DefaultMaxConns           = 10000
	DefaultMaxConnsPerUser    = 32
	DefaultPongWait           = 60 * time.Second
	DefaultWriteWait          = 10 * time.Second
)

// MaxLameDuck bounds ELLIPSIS_LAME_DUCK: a lame duck longer than a few
// seconds only delays a rollout (load balancers poll every few seconds).
const MaxLameDuck = 5 * time.Minute

// Store layouts (Config.Store).
const (
	StoreZSet = "zset"
	StoreKeys = "keys"
)

// Auth modes.
const (
	AuthNone = "none"
	AuthJWT  = "jwt"
)

// Authorisation modes.
const (
	AuthzNone   = "none"
	AuthzClaims = "claims"
	AuthzNATS   = "nats"
)

// Services a [Config] is validated for (Config.Service).
const (
	// ServiceAll validates every setting (the dev stack runs both services).
	ServiceAll = ""
	// ServiceGateway validates what the gateway reads.
	ServiceGateway = "gateway"
	// ServiceWorker skips the gateway-only settings (authentication, origins,
	// authorisation), so a worker sharing the gateway's environment starts
	// without the JWT secret.
	ServiceWorker = "presence-worker"
)

// Config holds every setting. The zero value is not useful: start from
// [Default] (or a dev variant of it) and [Load] over it.
type Config struct {
	// HTTPAddr is the gateway's public listener (WebSocket, HTTP API, demo
	// page). ELLIPSIS_HTTP_ADDR, default ":8080".
	HTTPAddr string
	// AdminAddr serves /healthz, /readyz and /metrics on both services.
	// ELLIPSIS_ADMIN_ADDR, default ":9090". Empty disables it.
	AdminAddr string
	// Pprof also serves net/http/pprof's /debug/pprof/ on the admin
	// listener of both services (CPU and heap profiles for
	// docs/BENCHMARKS.md). ELLIPSIS_PPROF, default false: a profile costs
	// CPU and shows internals, so it is off unless asked for.
	Pprof bool
	// NATSURL is one or more NATS server URLs, comma-separated.
	// ELLIPSIS_NATS_URL, default "nats://127.0.0.1:4222".
	NATSURL string
	// RedisURL names the Redis and its topology: redis:// or rediss://
	// (standalone), redis+sentinel:// (Sentinel, with master_name=...) or
	// redis+cluster:// (Redis Cluster); see package redisconn for the
	// forms. ELLIPSIS_REDIS_URL, default "redis://127.0.0.1:6379".
	RedisURL string
	// RedisPubSub is how room events travel: "classic" (PUBLISH /
	// SUBSCRIBE), "sharded" (SPUBLISH / SSUBSCRIBE, Redis 7+), or empty for
	// the topology's default (sharded on Cluster, classic elsewhere).
	// Workers and gateways of one deployment must agree.
	// ELLIPSIS_REDIS_PUBSUB.
	RedisPubSub string
	// SubjectPrefix is the first token of every NATS subject.
	// ELLIPSIS_SUBJECT_PREFIX, default "ellipsis".
	SubjectPrefix string
	// KeyPrefix is prepended to every Redis key and channel; it must not
	// hold '{' or '}' (a hash tag in the prefix would override the room's).
	// ELLIPSIS_KEY_PREFIX, default empty.
	KeyPrefix string
	// Auth is "none" (dev: ?user=&name=) or "jwt". ELLIPSIS_AUTH, default "jwt".
	Auth string
	// JWTSecret is the HS256 shared secret. ELLIPSIS_JWT_SECRET.
	JWTSecret string
	// JWKSFile is a JWKS file for RS256 / ES256 / EdDSA. ELLIPSIS_JWKS_FILE.
	JWKSFile string
	// JWKSURL is a JWKS endpoint (the identity provider's jwks_uri) for
	// RS256 / ES256 / EdDSA: https, or http to a loopback host. Not with
	// JWKSFile. ELLIPSIS_JWKS_URL.
	JWKSURL string
	// JWKSReload is how often the gateway re-reads JWKSFile or re-fetches
	// JWKSURL to pick up rotated keys; a token naming an unknown kid also
	// triggers a re-read (file: at most once a second; URL: at most once
	// per JWKSReload). ELLIPSIS_JWKS_RELOAD, default 10s.
	JWKSReload time.Duration
	// JWKSTimeout bounds each fetch of JWKSURL (connect, TLS, answer).
	// ELLIPSIS_JWKS_TIMEOUT, default 5s.
	JWKSTimeout time.Duration
	// JWKSCA is a PEM file of the CAs trusted for JWKSURL's certificate,
	// in place of the system's. ELLIPSIS_JWKS_CA, default empty.
	JWKSCA string
	// JWTIssuer, when set, is the only accepted iss claim (then required).
	// ELLIPSIS_JWT_ISSUER, default empty (not checked).
	JWTIssuer string
	// JWTAudience, when set, lists accepted aud values; a token must name at
	// least one of them. ELLIPSIS_JWT_AUDIENCE, comma-separated, default
	// empty (not checked).
	JWTAudience []string
	// JWTLeeway is the clock skew allowed on exp and nbf; a connection is
	// closed (1008) at exp + leeway. ELLIPSIS_JWT_LEEWAY, default 0.
	JWTLeeway time.Duration
	// AllowedOrigins is the WebSocket Origin allow-list; empty means the
	// request's own host. Entries are origins ("https://chat.example.com")
	// or wildcards ("https://*.example.com"); "*" allows any.
	// ELLIPSIS_ALLOWED_ORIGINS, comma-separated.
	AllowedOrigins []string
	// Authz is "none", "claims" or "nats". ELLIPSIS_AUTHZ, default "none".
	Authz string
	// AuthzTimeout bounds one authorisation request (authz "nats"); no
	// answer in time means deny. ELLIPSIS_AUTHZ_TIMEOUT, default 1s.
	AuthzTimeout time.Duration
	// AuthzCacheTTL is how long an allowed (user, room) answer of authz
	// "nats" is reused; 0 disables. ELLIPSIS_AUTHZ_CACHE_TTL, default 30s.
	AuthzCacheTTL time.Duration
	// AuthzDenyCacheTTL is how long an explicit denial of authz "nats" is
	// reused; 0 disables. ELLIPSIS_AUTHZ_DENY_CACHE_TTL, default 2s.
	AuthzDenyCacheTTL time.Duration
	// TypingTTL is how long a typing entry lives after its last start or
	// refresh. ELLIPSIS_TYPING_TTL, default 5s (seed design).
	TypingTTL time.Duration
	// TypingThrottle is the refresh fan-out window per user per room; must be
	// below TypingRefresh. ELLIPSIS_TYPING_THROTTLE, default 2s (seed design).
	TypingThrottle time.Duration
	// TypingRefresh is the client's refresh interval while typing, served to
	// clients; must be below TypingTTL. ELLIPSIS_TYPING_REFRESH, default 4s.
	TypingRefresh time.Duration
	// TypingIdleStop is the client's stop-after-idle delay, served to
	// clients. ELLIPSIS_TYPING_IDLE_STOP, default 3s.
	TypingIdleStop time.Duration
	// ShutdownDrain is the window over which the gateway closes its clients
	// on SIGTERM. ELLIPSIS_SHUTDOWN_DRAIN, default 5s.
	ShutdownDrain time.Duration
	// LameDuck is how long the gateway keeps serving its open connections
	// after SIGTERM while /readyz already answers 503 and new WebSocket
	// upgrades are refused (503), so load balancers that poll /readyz stop
	// sending clients before any is closed; then the ShutdownDrain starts.
	// ELLIPSIS_LAME_DUCK, 0s..5m (0: none), default 3s.
	LameDuck time.Duration
	// SweepInterval is how often a worker looks for expired entries; expiry
	// pushes reach receivers within TypingTTL + SweepInterval + latency.
	// ELLIPSIS_SWEEP_INTERVAL, default 250ms.
	SweepInterval time.Duration
	// SnapshotTimeout bounds a snapshot request from the gateway to the
	// workers. ELLIPSIS_SNAPSHOT_TIMEOUT, default 2s.
	SnapshotTimeout time.Duration
	// PubSubPingInterval is how often the gateway PINGs each of its Redis
	// Pub/Sub connections; one that does not answer within
	// PubSubPingTimeout is closed and redialed, and /readyz is 503 until
	// it is back. ELLIPSIS_PUBSUB_PING_INTERVAL, default 5s;
	// ELLIPSIS_PUBSUB_PING_TIMEOUT, default 2s (below the interval).
	PubSubPingInterval time.Duration
	PubSubPingTimeout  time.Duration
	// MaxFrameBytes is the largest inbound WebSocket message; larger closes
	// with 1009. ELLIPSIS_MAX_FRAME_BYTES, default 4096.
	MaxFrameBytes int
	// MaxRoomsPerConn caps joined rooms per connection (room_limit).
	// ELLIPSIS_MAX_ROOMS_PER_CONN, default 100.
	MaxRoomsPerConn int
	// InboundRate and InboundBurst are the per-connection token bucket of
	// inbound frames (frames/s, frames). ELLIPSIS_INBOUND_RATE (20),
	// ELLIPSIS_INBOUND_BURST (40).
	InboundRate  float64
	InboundBurst int
	// OutboundQueue is the per-connection outbound queue, in frames; a full
	// queue closes the connection with 1013. ELLIPSIS_OUTBOUND_QUEUE, 256.
	OutboundQueue int
	// InboundMaxRejected is how many rate-limited frames a connection may
	// have within 10 s (the current second and the 10 whole seconds before
	// it); one more closes it with 1008 (sustained abuse, RFC 6455 7.4.1).
	// With the default bucket a client at 25 frames/s is closed after about
	// 18 s, at 100/s after about 1 s, at 19/s never.
	// ELLIPSIS_INBOUND_MAX_REJECTED, 1..100000, default 50.
	InboundMaxRejected int
	// MaxConns caps open WebSocket connections per gateway; beyond it the
	// handshake gets HTTP 503. ELLIPSIS_MAX_CONNS, default 10000.
	MaxConns int
	// MaxConnsPerUser caps one user's open connections on one gateway;
	// beyond it the handshake gets HTTP 429. ELLIPSIS_MAX_CONNS_PER_USER,
	// default 32.
	MaxConnsPerUser int
	// PongWait is how long a connection may stay silent (no pong) before it
	// is dropped; the gateway pings at 9/10 of it. ELLIPSIS_PONG_WAIT,
	// default 60s.
	PongWait time.Duration
	// WriteWait bounds every write to a client; a write that cannot finish
	// in time drops the connection. ELLIPSIS_WRITE_WAIT, default 10s.
	WriteWait time.Duration
	// WorkerShards is how many goroutines of a worker apply commands at once
	// (commands of one connection always go to the same one, in order).
	// ELLIPSIS_WORKER_SHARDS, default 16.
	WorkerShards int
	// SnapshotMax caps the typists listed in one snapshot (a NATS snapshot
	// reply, and so joined, typing and the HTTP read); the snapshot's total
	// still counts every visible typist (docs/protocol.md, "Snapshots: cap
	// and total").
	// ELLIPSIS_SNAPSHOT_MAX, default 100, 1..500 (500 keeps the snapshot
	// script of the largest room under a millisecond of Redis time:
	// docs/BENCHMARKS.md).
	SnapshotMax int
	// Store is the worker's typing-state layout: "zset" (one sorted set per
	// room, the default) or "keys" (seed pattern 1: one TTL key per typist,
	// listed with SCAN). ELLIPSIS_STORE, default "zset".
	Store string
	// GatewayID names this gateway in conn ids ("<id>:<n>"). Empty means a
	// random one. ELLIPSIS_GATEWAY_ID.
	GatewayID string
	// DemoPage serves the demo chat page and JS client at "/".
	// ELLIPSIS_DEMO_PAGE, default true.
	DemoPage bool
	// LogLevel is debug, info, warn or error. ELLIPSIS_LOG_LEVEL, "info".
	LogLevel string
	// LogFormat is json or console. ELLIPSIS_LOG_FORMAT, "json".
	LogFormat string

	// Service selects which settings Validate checks: [ServiceAll] (zero
	// value), [ServiceGateway] or [ServiceWorker]. Not read from the
	// environment: each main sets it.
	Service string

	set map[string]bool
}

// Default returns the production defaults.
func Default() Config {
	return Config{
		HTTPAddr:           DefaultHTTPAddr,
		AdminAddr:          DefaultAdminAddr,
		NATSURL:            DefaultNATSURL,
		RedisURL:           DefaultRedisURL,
		SubjectPrefix:      DefaultSubjectPrefix,
		Auth:               AuthJWT,
		Authz:              AuthzNone,
		TypingTTL:          DefaultTypingTTL,
		TypingThrottle:     DefaultTypingThrottle,
		TypingRefresh:      DefaultTypingRefresh,
		TypingIdleStop:     DefaultTypingIdleStop,
		ShutdownDrain:      DefaultShutdownDrain,
		LameDuck:           DefaultLameDuck,
		SweepInterval:      DefaultSweepInterval,
		SnapshotTimeout:    DefaultSnapshotTimeout,
		PubSubPingInterval: DefaultPubSubPingInterval,
		PubSubPingTimeout:  DefaultPubSubPingTimeout,
		MaxFrameBytes:      DefaultMaxFrameBytes,
		MaxRoomsPerConn:    DefaultMaxRoomsPerConn,
		InboundRate:        DefaultInboundRate,
		InboundBurst:       DefaultInboundBurst,
		OutboundQueue:      DefaultOutboundQueue,
		WorkerShards:       DefaultWorkerShards,
		SnapshotMax:        DefaultSnapshotMax,

		JWKSReload:         DefaultJWKSReload,
		JWKSTimeout:        DefaultJWKSTimeout,
		AuthzTimeout:       DefaultAuthzTimeout,
		AuthzCacheTTL:      DefaultAuthzCacheTTL,
		AuthzDenyCacheTTL:  DefaultAuthzDenyCacheTTL,
		InboundMaxRejected: DefaultInboundMaxRejected,
		MaxConns:           DefaultMaxConns,
		MaxConnsPerUser:    DefaultMaxConnsPerUser,
		PongWait:           DefaultPongWait,
		WriteWait:          DefaultWriteWait,
		Store:              StoreZSet,
		DemoPage:           true,
		LogLevel:           "info",
		LogFormat:          "json",
	}
}

// Dev returns the dev stack's defaults: [Default] with auth "none",
// console logs and no lame duck (one process on a developer's
// machine, no load balancer to tell: Ctrl-C closes at once).
func Dev() Config {
	c := Default()
	c.Auth = AuthNone
	c.LogFormat = "console"
	c.LameDuck = 0
	return c
}

// IsSet reports whether the setting named by its environment variable (e.g.
// "ELLIPSIS_REDIS_URL") was given explicitly, by variable or flag.
func (c *Config) IsSet(env string) bool { return c.set[env] }

type setting struct {
	env   string
	usage string
	parse func(string) error
	show  func() string
}

func (c *Config) settings() []setting {
	str := func(p *string) (func(string) error, func() string) {
		return func(s string) error { *p = s; return nil }, func() string { return *p }
	}
	dur := func(p *time.Duration) (func(string) error, func() string) {
		return func(s string) error {
				d, err := time.ParseDuration(s)
				if err != nil {
					return fmt.Errorf("not a duration like 5s or 250ms: %q", s)
				}
				*p = d
				return nil
			}, func() string {
				return p.String()
			}
	}
	integer := func(p *int) (func(string) error, func() string) {
		return func(s string) error {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("not an integer: %q", s)
			}
			*p = n
			return nil
		}, func() string { return strconv.Itoa(*p) }
	}
	float := func(p *float64) (func(string) error, func() string) {
		return func(s string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil {
				return fmt.Errorf("not a number: %q", s)
			}
			*p = f
			return nil
		}, func() string { return strconv.FormatFloat(*p, 'g', -1, 64) }
	}
	boolean := func(p *bool) (func(string) error, func() string) {
		return func(s string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("not a boolean (true/false): %q", s)
			}
			*p = b
			return nil
		}, func() string { return strconv.FormatBool(*p) }
	}
	list := func(p *[]string) (func(string) error, func() string) {
		return func(s string) error {
			*p = nil
			for _, part := range strings.Split(s, ",") {
				if part = strings.TrimSpace(part); part != "" {
					*p = append(*p, part)
				}
			}
			return nil
		}, func() string { return strings.Join(*p, ",") }
	}
	mk := func(env, usage string, f func(string) error, show func() string) setting {
		return setting{env: env, usage: usage, parse: f, show: show}
	}
	var s []setting
	add := func(env, usage string, pair func() (func(string) error, func() string)) {
		f, show := pair()
		s = append(s, mk(env, usage, f, show))
	}
	add("ELLIPSIS_HTTP_ADDR", "gateway public listener", func() (func(string) error, func() string) { return str(&c.HTTPAddr) })
	add("ELLIPSIS_ADMIN_ADDR", "admin listener (/healthz, /readyz, /metrics); empty disables", func() (func(string) error, func() string) { return str(&c.AdminAddr) })
	add("ELLIPSIS_NATS_URL", "NATS server URLs, comma-separated", func() (func(string) error, func() string) { return str(&c.NATSURL) })
	add("ELLIPSIS_REDIS_URL", "Redis URL: redis[s]:// standalone, redis[s]+sentinel://...?master_name=NAME, redis[s]+cluster://host:port?addr=host2:port", func() (func(string) error, func() string) { return str(&c.RedisURL) })
	add("ELLIPSIS_REDIS_PUBSUB", "room event Pub/Sub: classic or sharded; empty = sharded on Cluster, classic elsewhere", func() (func(string) error, func() string) { return str(&c.RedisPubSub) })
	add("ELLIPSIS_SUBJECT_PREFIX", "first token of every NATS subject", func() (func(string) error, func() string) { return str(&c.SubjectPrefix) })
	add("ELLIPSIS_KEY_PREFIX", "prepended to every Redis key and channel", func() (func(string) error, func() string) { return str(&c.KeyPrefix) })
	add("ELLIPSIS_AUTH", "none or jwt", func() (func(string) error, func() string) { return str(&c.Auth) })
	add("ELLIPSIS_JWT_SECRET", "HS256 shared secret", func() (func(string) error, func() string) { return str(&c.JWTSecret) })
	add("ELLIPSIS_JWKS_FILE", "JWKS file for RS256 / ES256 / EdDSA", func() (func(string) error, func() string) { return str(&c.JWKSFile) })
	add("ELLIPSIS_JWKS_URL", "JWKS URL for RS256 / ES256 / EdDSA (https; http only to loopback); not with ELLIPSIS_JWKS_FILE", func() (func(string) error, func() string) { return str(&c.JWKSURL) })
	add("ELLIPSIS_JWKS_RELOAD", "gateway: how often the JWKS file or URL is re-read (also at once on an unknown kid)", func() (func(string) error, func() string) { return dur(&c.JWKSReload) })
	add("ELLIPSIS_JWKS_TIMEOUT", "gateway: limit of each JWKS URL fetch", func() (func(string) error, func() string) { return dur(&c.JWKSTimeout) })
	add("ELLIPSIS_JWKS_CA", "gateway: PEM file of CAs trusted for ELLIPSIS_JWKS_URL (default: the system's)", func() (func(string) error, func() string) { return str(&c.JWKSCA) })
	add("ELLIPSIS_JWT_ISSUER", "accepted JWT iss (empty: not checked)", func() (func(string) error, func() string) { return str(&c.JWTIssuer) })
	add("ELLIPSIS_JWT_AUDIENCE", "accepted JWT aud values, comma-separated (empty: not checked)", func() (func(string) error, func() string) { return list(&c.JWTAudience) })
	add("ELLIPSIS_JWT_LEEWAY", "clock skew allowed on JWT exp and nbf", func() (func(string) error, func() string) { return dur(&c.JWTLeeway) })
	add("ELLIPSIS_ALLOWED_ORIGINS", "WebSocket origin allow-list, comma-separated (default: same host)", func() (func(string) error, func() string) { return list(&c.AllowedOrigins) })
	add("ELLIPSIS_AUTHZ", "none, claims or nats", func() (func(string) error, func() string) { return str(&c.Authz) })
	add("ELLIPSIS_AUTHZ_TIMEOUT", "authz nats: request timeout (no answer: deny)", func() (func(string) error, func() string) { return dur(&c.AuthzTimeout) })
	add("ELLIPSIS_AUTHZ_CACHE_TTL", "authz nats: how long an allow is cached (0: off)", func() (func(string) error, func() string) { return dur(&c.AuthzCacheTTL) })
	add("ELLIPSIS_AUTHZ_DENY_CACHE_TTL", "authz nats: how long a denial is cached (0: off)", func() (func(string) error, func() string) { return dur(&c.AuthzDenyCacheTTL) })
	add("ELLIPSIS_TYPING_TTL", "typing entry lifetime", func() (func(string) error, func() string) { return dur(&c.TypingTTL) })
	add("ELLIPSIS_TYPING_THROTTLE", "refresh fan-out window per user per room (< refresh)", func() (func(string) error, func() string) { return dur(&c.TypingThrottle) })
	add("ELLIPSIS_TYPING_REFRESH", "client refresh interval while typing (< ttl)", func() (func(string) error, func() string) { return dur(&c.TypingRefresh) })
	add("ELLIPSIS_TYPING_IDLE_STOP", "client stop after this long without a keystroke", func() (func(string) error, func() string) { return dur(&c.TypingIdleStop) })
	add("ELLIPSIS_SHUTDOWN_DRAIN", "gateway: window over which clients are closed on SIGTERM", func() (func(string) error, func() string) { return dur(&c.ShutdownDrain) })
	add("ELLIPSIS_LAME_DUCK", "gateway: after SIGTERM, /readyz 503 and new upgrades refused while open connections are still served this long", func() (func(string) error, func() string) { return dur(&c.LameDuck) })
	add("ELLIPSIS_SWEEP_INTERVAL", "worker: how often expired entries are swept", func() (func(string) error, func() string) { return dur(&c.SweepInterval) })
	add("ELLIPSIS_SNAPSHOT_TIMEOUT", "gateway: snapshot request timeout", func() (func(string) error, func() string) { return dur(&c.SnapshotTimeout) })
	add("ELLIPSIS_PUBSUB_PING_INTERVAL", "gateway: health PING interval of each Redis Pub/Sub connection", func() (func(string) error, func() string) { return dur(&c.PubSubPingInterval) })
	add("ELLIPSIS_PUBSUB_PING_TIMEOUT", "gateway: a Pub/Sub connection silent this long after a PING (health or subscription confirmation) is redialed (< interval)", func() (func(string) error, func() string) { return dur(&c.PubSubPingTimeout) })
	add("ELLIPSIS_MAX_FRAME_BYTES", "largest inbound WebSocket message, bytes", func() (func(string) error, func() string) { return integer(&c.MaxFrameBytes) })
	add("ELLIPSIS_MAX_ROOMS_PER_CONN", "joined rooms per connection", func() (func(string) error, func() string) { return integer(&c.MaxRoomsPerConn) })
	add("ELLIPSIS_INBOUND_RATE", "inbound frames per second per connection", func() (func(string) error, func() string) { return float(&c.InboundRate) })
	add("ELLIPSIS_INBOUND_BURST", "inbound frame burst per connection", func() (func(string) error, func() string) { return integer(&c.InboundBurst) })
	add("ELLIPSIS_OUTBOUND_QUEUE", "outbound queue per connection, frames", func() (func(string) error, func() string) { return integer(&c.OutboundQueue) })
	add("ELLIPSIS_INBOUND_MAX_REJECTED", "rate-limited frames tolerated within 10s; one more closes the connection (1008)", func() (func(string) error, func() string) { return integer(&c.InboundMaxRejected) })
	add("ELLIPSIS_MAX_CONNS", "gateway: open connections (beyond: HTTP 503)", func() (func(string) error, func() string) { return integer(&c.MaxConns) })
	add("ELLIPSIS_MAX_CONNS_PER_USER", "gateway: open connections per user (beyond: HTTP 429)", func() (func(string) error, func() string) { return integer(&c.MaxConnsPerUser) })
	add("ELLIPSIS_PONG_WAIT", "gateway: silence before a connection is dropped (pings at 9/10)", func() (func(string) error, func() string) { return dur(&c.PongWait) })
	add("ELLIPSIS_WRITE_WAIT", "gateway: deadline of every write to a client", func() (func(string) error, func() string) { return dur(&c.WriteWait) })
	add("ELLIPSIS_WORKER_SHARDS", "worker: commands applied concurrently", func() (func(string) error, func() string) { return integer(&c.WorkerShards) })
	add("ELLIPSIS_SNAPSHOT_MAX", "worker: typists listed in one snapshot (total counts them all)", func() (func(string) error, func() string) { return integer(&c.SnapshotMax) })
	add("ELLIPSIS_STORE", "worker: typing-state layout, zset or keys (seed pattern 1)", func() (func(string) error, func() string) { return str(&c.Store) })
	add("ELLIPSIS_GATEWAY_ID", "gateway id in conn ids (default random)", func() (func(string) error, func() string) { return str(&c.GatewayID) })
	add("ELLIPSIS_DEMO_PAGE", "serve the demo page at /", func() (func(string) error, func() string) { return boolean(&c.DemoPage) })
	add("ELLIPSIS_PPROF", "serve /debug/pprof/ on the admin listener (both services)", func() (func(string) error, func() string) { return boolean(&c.Pprof) })
	add("ELLIPSIS_LOG_LEVEL", "debug, info, warn or error", func() (func(string) error, func() string) { return str(&c.LogLevel) })
	add("ELLIPSIS_LOG_FORMAT", "json or console", func() (func(string) error, func() string) { return str(&c.LogFormat) })
	return s
}

// EnvNames lists every environment variable that [Load] reads, in order.
func EnvNames() []string {
	var c Config
	var out []string
	for _, s := range c.settings() {
		out = append(out, s.env)
	}
	return out
}

// FlagName returns the flag that mirrors an environment variable:
// ELLIPSIS_TYPING_TTL -> typing-ttl.
func FlagName(env string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "ELLIPSIS_")), "_", "-")
}

// Load fills base from the environment (lookup, usually os.LookupEnv) and
// then from args parsed by fs (flags mirror the variables; fs may carry
// flags of its own, registered before the call). It then calls
// [Config.Validate]. Every unparsable value and every invalid setting is
// reported at once, joined, each naming its variable.
func Load(fs *flag.FlagSet, args []string, lookup func(string) (string, bool), base Config) (Config, error) {
	c := base
	c.set = map[string]bool{}
	var errs []error
	settings := c.settings()
	for _, s := range settings {
		v, ok := lookup(s.env)
		if !ok {
			continue
		}
		c.set[s.env] = true
		if err := s.parse(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.env, err))
		}
	}
	if fs != nil {
		for _, s := range settings {
			s := s
			fs.Func(FlagName(s.env), s.usage+" ("+s.env+", now "+strconv.Quote(s.show())+")", func(v string) error {
				c.set[s.env] = true
				if err := s.parse(v); err != nil {
					return err
				}
				return nil
			})
		}
		if err := fs.Parse(args); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, c.Validate()
}

// Validate reports every invalid setting at once (errors.Join), each error
// naming its variable and value. It checks the seed design's timing rules:
// throttle < refresh < ttl (so refreshes keep an entry alive and are not all
// throttled), and idle_stop < ttl.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	checkAddr := func(env, v string, optional bool) {
		if v == "" {
			if !optional {
				bad("%s: is required", env)
			}
			return
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			bad("%s: not a host:port listen address: %q", env, v)
		}
	}
	checkAddr("ELLIPSIS_HTTP_ADDR", c.HTTPAddr, c.Service == ServiceWorker)
	checkAddr("ELLIPSIS_ADMIN_ADDR", c.AdminAddr, true)

	if strings.TrimSpace(c.NATSURL) == "" {
		bad("ELLIPSIS_NATS_URL: is required")
	}
	for _, u := range strings.Split(c.NATSURL, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || p.Host == "" || (p.Scheme != "nats" && p.Scheme != "tls" && p.Scheme != "ws" && p.Scheme != "wss") {
			bad("ELLIPSIS_NATS_URL: %q is not a nats://, tls://, ws:// or wss:// URL with a host", u)
		}
	}
	if ro, err := redisconn.Parse(c.RedisURL); err != nil {
		bad("ELLIPSIS_REDIS_URL: %q: %v", redisconn.Redact(c.RedisURL), err)
	} else if ro.Topology == redisconn.Cluster && c.Store == StoreKeys && c.Service != ServiceGateway {
		bad("ELLIPSIS_STORE: keys does not run on Redis Cluster (its snapshot SCANs the keyspace of one node); use zset")
	}
	switch c.RedisPubSub {
	case "", redisconn.PubSubClassic, redisconn.PubSubSharded:
	default:
		bad("ELLIPSIS_REDIS_PUBSUB: %q must be empty, %s or %s", c.RedisPubSub, redisconn.PubSubClassic, redisconn.PubSubSharded)
	}
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		bad("ELLIPSIS_KEY_PREFIX: %q must not contain '{' or '}': Redis Cluster would hash every key on the prefix instead of its room", c.KeyPrefix)
	}
	if c.SubjectPrefix == "" || strings.ContainsAny(c.SubjectPrefix, " \t\r\n.*>") {
		bad("ELLIPSIS_SUBJECT_PREFIX: %q must be one non-empty NATS subject token (no '.', '*', '>' or spaces)", c.SubjectPrefix)
	}
	switch c.Service {
	case ServiceAll, ServiceGateway, ServiceWorker:
	default:
		bad("config: Service %q must be empty, %q or %q", c.Service, ServiceGateway, ServiceWorker)
	}
	if c.Service != ServiceWorker {
		c.validateGateway(bad)
	}

	positive := func(env string, d time.Duration) bool {
		if d <= 0 {
			bad("%s: must be positive, got %s", env, d)
			return false
		}
		return true
	}
	okTTL := positive("ELLIPSIS_TYPING_TTL", c.TypingTTL)
	okThr := positive("ELLIPSIS_TYPING_THROTTLE", c.TypingThrottle)
	okRef := positive("ELLIPSIS_TYPING_REFRESH", c.TypingRefresh)
	okIdle := positive("ELLIPSIS_TYPING_IDLE_STOP", c.TypingIdleStop)
	positive("ELLIPSIS_SWEEP_INTERVAL", c.SweepInterval)
	positive("ELLIPSIS_SNAPSHOT_TIMEOUT", c.SnapshotTimeout)
	okPingI := positive("ELLIPSIS_PUBSUB_PING_INTERVAL", c.PubSubPingInterval)
	okPingT := positive("ELLIPSIS_PUBSUB_PING_TIMEOUT", c.PubSubPingTimeout)
	if okPingI && okPingT && c.PubSubPingTimeout >= c.PubSubPingInterval {
		bad("ELLIPSIS_PUBSUB_PING_TIMEOUT (%s) must be below ELLIPSIS_PUBSUB_PING_INTERVAL (%s): one PING is outstanding at a time", c.PubSubPingTimeout, c.PubSubPingInterval)
	}
	if c.ShutdownDrain < 0 {
		bad("ELLIPSIS_SHUTDOWN_DRAIN: must not be negative, got %s", c.ShutdownDrain)
	}
	if c.LameDuck < 0 || c.LameDuck > MaxLameDuck {
		bad("ELLIPSIS_LAME_DUCK: must be 0s..%s, got %s", MaxLameDuck, c.LameDuck)
	}
	if okTTL && c.TypingTTL%time.Millisecond != 0 {
		bad("ELLIPSIS_TYPING_TTL: must be whole milliseconds, got %s", c.TypingTTL)
	}
	if okTTL && okThr && c.TypingThrottle >= c.TypingTTL {
		bad("ELLIPSIS_TYPING_THROTTLE (%s) must be below ELLIPSIS_TYPING_TTL (%s)", c.TypingThrottle, c.TypingTTL)
	}
	if okTTL && okRef && c.TypingRefresh >= c.TypingTTL {
		bad("ELLIPSIS_TYPING_REFRESH (%s) must be below ELLIPSIS_TYPING_TTL (%s), or indicators flicker between refreshes", c.TypingRefresh, c.TypingTTL)
	}
	if okThr && okRef && c.TypingThrottle >= c.TypingRefresh {
		bad("ELLIPSIS_TYPING_THROTTLE (%s) must be below ELLIPSIS_TYPING_REFRESH (%s), or refreshes are never fanned out", c.TypingThrottle, c.TypingRefresh)
	}
	if okTTL && okIdle && c.TypingIdleStop >= c.TypingTTL {
		bad("ELLIPSIS_TYPING_IDLE_STOP (%s) must be below ELLIPSIS_TYPING_TTL (%s)", c.TypingIdleStop, c.TypingTTL)
	}

	intRange := func(env string, v, lo, hi int) {
		if v < lo || v > hi {
			bad("%s: must be %d..%d, got %d", env, lo, hi, v)
		}
	}
	intRange("ELLIPSIS_MAX_FRAME_BYTES", c.MaxFrameBytes, 256, 1<<20)
	intRange("ELLIPSIS_MAX_ROOMS_PER_CONN", c.MaxRoomsPerConn, 1, 1000)
	intRange("ELLIPSIS_INBOUND_BURST", c.InboundBurst, 1, 100000)
	intRange("ELLIPSIS_OUTBOUND_QUEUE", c.OutboundQueue, 1, 1<<20)
	intRange("ELLIPSIS_WORKER_SHARDS", c.WorkerShards, 1, 4096)
	intRange("ELLIPSIS_SNAPSHOT_MAX", c.SnapshotMax, 1, 500)
	if c.InboundRate <= 0 {
		bad("ELLIPSIS_INBOUND_RATE: must be positive, got %g", c.InboundRate)
	}
	if c.Store != StoreZSet && c.Store != StoreKeys {
		bad("ELLIPSIS_STORE: %q must be zset or keys", c.Store)
	}
	if c.GatewayID != "" {
		if len(c.GatewayID) > 64 || strings.ContainsAny(c.GatewayID, ": \t\r\n") {
			bad("ELLIPSIS_GATEWAY_ID: %q must be at most 64 bytes without ':' or spaces", c.GatewayID)
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("ELLIPSIS_LOG_LEVEL: %q must be debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		bad("ELLIPSIS_LOG_FORMAT: %q must be json or console", c.LogFormat)
	}
	return errors.Join(errs...)
}

// validateJWKSURL checks ELLIPSIS_JWKS_URL and the settings that go with
// it. The gateway checks the URL again when it builds its client.
func (c *Config) validateJWKSURL(bad func(string, ...any)) {
	if c.JWKSCA != "" && c.JWKSURL == "" {
		bad("ELLIPSIS_JWKS_CA: only used with ELLIPSIS_JWKS_URL, which is empty")
	}
	if c.JWKSURL == "" {
		return
	}
	if c.JWKSFile != "" {
		bad("ELLIPSIS_JWKS_FILE and ELLIPSIS_JWKS_URL: set one of them, not both")
	}
	u, err := url.Parse(c.JWKSURL)
	switch {
	case err != nil:
		bad("ELLIPSIS_JWKS_URL: not a URL: %v", err)
	case u.Host == "":
		bad("ELLIPSIS_JWKS_URL: %q has no host (want https://host/path)", u.Redacted())
	case u.Scheme == "https":
	case u.Scheme == "http" && (u.Hostname() == "localhost" || isLoopbackIP(u.Hostname())):
	default:
		bad("ELLIPSIS_JWKS_URL: %q must use https (plain http only to a loopback host such as 127.0.0.1)", u.Redacted())
	}
	if c.JWKSReload < time.Second {
		bad("ELLIPSIS_JWKS_RELOAD: must be at least 1s with ELLIPSIS_JWKS_URL, got %s", c.JWKSReload)
	}
	if c.JWKSTimeout <= 0 || c.JWKSTimeout > time.Minute {
		bad("ELLIPSIS_JWKS_TIMEOUT: must be more than 0 and at most 1m, got %s", c.JWKSTimeout)
	}
}

func isLoopbackIP(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validateGateway checks the settings only the gateway reads.
func (c *Config) validateGateway(bad func(string, ...any)) {
	switch c.Auth {
	case AuthNone:
	case AuthJWT:
		if c.JWTSecret == "" && c.JWKSFile == "" && c.JWKSURL == "" {
			bad("ELLIPSIS_AUTH: jwt needs ELLIPSIS_JWT_SECRET, ELLIPSIS_JWKS_FILE or ELLIPSIS_JWKS_URL (or set ELLIPSIS_AUTH=none for development)")
		}
	default:
		bad("ELLIPSIS_AUTH: %q must be none or jwt", c.Auth)
	}
	switch c.Authz {
	case AuthzNone, AuthzNATS:
	case AuthzClaims:
		if c.Auth != AuthJWT {
			bad("ELLIPSIS_AUTHZ: claims reads the rooms claim of a JWT and needs ELLIPSIS_AUTH=jwt, got %q", c.Auth)
		}
	default:
		bad("ELLIPSIS_AUTHZ: %q must be none, claims or nats", c.Authz)
	}
	if c.JWKSFile != "" && c.JWKSReload < 100*time.Millisecond {
		bad("ELLIPSIS_JWKS_RELOAD: must be at least 100ms, got %s", c.JWKSReload)
	}
	c.validateJWKSURL(bad)
	if c.JWTLeeway < 0 || c.JWTLeeway > 5*time.Minute {
		bad("ELLIPSIS_JWT_LEEWAY: must be 0..5m, got %s", c.JWTLeeway)
	}
	for _, a := range c.JWTAudience {
		if strings.TrimSpace(a) != a {
			bad("ELLIPSIS_JWT_AUDIENCE: %q has surrounding spaces", a)
		}
	}
	if c.AuthzTimeout <= 0 {
		bad("ELLIPSIS_AUTHZ_TIMEOUT: must be positive, got %s", c.AuthzTimeout)
	}
	if c.AuthzCacheTTL < 0 {
		bad("ELLIPSIS_AUTHZ_CACHE_TTL: must not be negative, got %s", c.AuthzCacheTTL)
	}
	if c.AuthzDenyCacheTTL < 0 {
		bad("ELLIPSIS_AUTHZ_DENY_CACHE_TTL: must not be negative, got %s", c.AuthzDenyCacheTTL)
	}
	if c.MaxConns < 1 || c.MaxConns > 10_000_000 {
		bad("ELLIPSIS_MAX_CONNS: must be 1..10000000, got %d", c.MaxConns)
	}
	if c.MaxConnsPerUser < 1 || c.MaxConnsPerUser > 1_000_000 {
		bad("ELLIPSIS_MAX_CONNS_PER_USER: must be 1..1000000, got %d", c.MaxConnsPerUser)
	}
	if c.PongWait < 100*time.Millisecond {
		bad("ELLIPSIS_PONG_WAIT: must be at least 100ms, got %s", c.PongWait)
	}
	if c.WriteWait <= 0 {
		bad("ELLIPSIS_WRITE_WAIT: must be positive, got %s", c.WriteWait)
	}
	if c.InboundMaxRejected < 1 || c.InboundMaxRejected > 100000 {
		bad("ELLIPSIS_INBOUND_MAX_REJECTED: must be 1..100000, got %d", c.InboundMaxRejected)
	}
	for _, o := range c.AllowedOrigins {
		if o == "*" {
			continue
		}
		p, err := url.Parse(o)
		if err != nil || p.Scheme == "" || p.Host == "" || (p.Path != "" && p.Path != "/") {
			bad("ELLIPSIS_ALLOWED_ORIGINS: %q is not an origin like https://chat.example.com or https://*.example.com", o)
		}
	}
}

// NATSServers splits NATSURL into its URLs.
func (c *Config) NATSServers() []string {
	var out []string
	for _, u := range strings.Split(c.NATSURL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// RedisPubSubMode returns RedisPubSub, or when it is empty the default of
// RedisURL's topology ([redisconn.DefaultPubSub]): redisconn.PubSubSharded
// on Cluster, redisconn.PubSubClassic elsewhere (and for a URL Validate
// rejects).
func (c *Config) RedisPubSubMode() string {
	if c.RedisPubSub != "" {
		return c.RedisPubSub
	}
	o, err := redisconn.Parse(c.RedisURL)
	if err != nil {
		return redisconn.PubSubClassic
	}
	return redisconn.DefaultPubSub(o.Topology)
}
