package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ellipsis-chat/ellipsis/shared/jwksurl"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
)

// table is THE definition of every setting, one entry each, bound to c's
// fields: Default, Dev, Load (environment and flags), Validate, EnvNames and
// the configuration table of docs/configuration.md (MarkdownTable, written
// by `make config-doc`) are all derived from it. The order is the table's.
// Package doc: "Adding a setting".
func (c *Config) table() []Setting {
	return []Setting{
		{Env: "ELLIPSIS_HTTP_ADDR", For: ForGateway, V: str(&c.HTTPAddr, ":8080", listenAddr(false)),
			Doc: "public listener (WebSocket, HTTP API, demo page)"},
		{Env: "ELLIPSIS_ADMIN_ADDR", For: ForBoth, V: str(&c.AdminAddr, ":9090", listenAddr(true)),
			Doc: "admin listener: `/healthz`, `/readyz`, `/metrics` (empty disables)"},
		{Env: "ELLIPSIS_NATS_URL", For: ForBoth, V: str(&c.NATSURL, "nats://127.0.0.1:4222", rule("nats://, tls://, ws:// or wss:// URLs", checkNATSURL)),
			Doc: "NATS server URLs, comma-separated; a user and password (`nats://user:pass@host`) or a token (`nats://token@host`) go in the URL, and are never logged"},
		{Env: "ELLIPSIS_NATS_CREDS", For: ForBoth, V: str(&c.NATSCreds, "", rule("a NATS .creds file", natsconn.CheckCredsFile)),
			Doc: "NATS `.creds` file (user JWT + NKey seed, decentralised auth); not with `ELLIPSIS_NATS_NKEY` or user info in the URL"},
		{Env: "ELLIPSIS_NATS_NKEY", For: ForBoth, V: str(&c.NATSNKey, "", rule("a user NKey seed file", natsconn.CheckNKeyFile)),
			Doc: "NATS user NKey seed file (`SU...`); not with `ELLIPSIS_NATS_CREDS` or user info in the URL"},
		{Env: "ELLIPSIS_NATS_TLS_CERT", For: ForBoth, V: str(&c.NATSTLSCert, ""),
			Doc: "NATS mutual TLS: PEM client certificate (needs `ELLIPSIS_NATS_TLS_KEY`; makes TLS required)"},
		{Env: "ELLIPSIS_NATS_TLS_KEY", For: ForBoth, V: str(&c.NATSTLSKey, ""),
			Doc: "NATS mutual TLS: the client certificate's PEM private key (needs `ELLIPSIS_NATS_TLS_CERT`)"},
		{Env: "ELLIPSIS_NATS_TLS_CA", For: ForBoth, V: str(&c.NATSTLSCA, "", rule("a PEM file of CA certificates", natsconn.CheckCAFile)), DefaultDoc: "system CAs",
			Doc: "PEM file of the CAs trusted for the NATS server's certificate (makes TLS required). Every NATS credential file is parsed at start (a missing or malformed one stops the process, naming the setting) and the `.creds`, TLS certificate, key and CA files are re-read at each reconnect, so rotated ones are picked up; a changed NKey seed needs a restart (nats.go keeps the public key read at start)"},
		{Env: "ELLIPSIS_REDIS_URL", For: ForBoth, V: str(&c.RedisURL, "redis://127.0.0.1:6379", rule("a Redis URL (package redisconn)", checkRedisURL)),
			Doc: "Redis and its topology: `redis[s]://[[user]:pass@]host:port[/db]` standalone; `redis[s]+sentinel://[[user]:pass@]sentinel:26379[/db]?master_name=NAME[&addr=sentinel2:26379][&password=MASTERPASS]` Sentinel; `redis[s]+cluster://[[user]:pass@]host:port[?addr=host2:port&addr=...]` Cluster (any reachable masters seed the slot map). Query options are go-redis's (`dial_timeout=3s`, `pool_size=20`, ...)"},
		{Env: "ELLIPSIS_REDIS_PUBSUB", For: ForBoth, V: str(&c.RedisPubSub, "", oneOf("", redisconn.PubSubClassic, redisconn.PubSubSharded)),
			Doc: "room event Pub/Sub: `classic` (`PUBLISH`/`SUBSCRIBE`) or `sharded` (`SPUBLISH`/`SSUBSCRIBE`, Redis 7+); empty = `sharded` on Cluster, `classic` elsewhere. Gateways and workers of one deployment must agree"},
		{Env: "ELLIPSIS_SUBJECT_PREFIX", For: ForBoth, V: str(&c.SubjectPrefix, "ellipsis", rule("one NATS subject token", checkSubjectPrefix)),
			Doc: "first token of every NATS subject"},
		{Env: "ELLIPSIS_KEY_PREFIX", For: ForBoth, V: str(&c.KeyPrefix, "", rule("no `{` or `}`", checkKeyPrefix)),
			Doc: "prepended to every Redis key and channel"},
		{Env: "ELLIPSIS_AUTH", For: ForGateway, V: str(&c.Auth, AuthJWT, oneOf(AuthNone, AuthJWT)), Dev: AuthNone,
			Doc: "`none` (`?user=&name=`, logs a warning) or `jwt` (needs `ELLIPSIS_JWT_SECRET`, `ELLIPSIS_JWKS_FILE` or `ELLIPSIS_JWKS_URL`)"},
		{Env: "ELLIPSIS_JWT_SECRET", For: ForGateway, V: str(&c.JWTSecret, ""),
			Doc: "HS256 shared secret"},
		{Env: "ELLIPSIS_JWKS_FILE", For: ForGateway, V: str(&c.JWKSFile, ""),
			Doc: "JWKS file for RS256 / ES256 / EdDSA (re-read when it changes); not with `ELLIPSIS_JWKS_URL`"},
		{Env: "ELLIPSIS_JWKS_URL", For: ForGateway, V: str(&c.JWKSURL, ""),
			Doc: "JWKS URL for RS256 / ES256 / EdDSA, usually the identity provider's `jwks_uri`: `https://`, or `http://` only to a loopback host (127.0.0.1, ::1, localhost); not with `ELLIPSIS_JWKS_FILE`"},
		{Env: "ELLIPSIS_JWKS_RELOAD", For: ForGateway, V: dur(&c.JWKSReload, 10*time.Second, atLeast(100*time.Millisecond)),
			Doc: "how often the JWKS file is re-checked or the URL re-fetched (with a URL, at least 1s); a token with an unknown `kid` re-reads at once, at most once a second for a file and once per interval for a URL"},
		{Env: "ELLIPSIS_JWKS_TIMEOUT", For: ForGateway, V: dur(&c.JWKSTimeout, 5*time.Second, between(10*time.Millisecond, maxJWKSTimeout)),
			Doc: "limit of each `ELLIPSIS_JWKS_URL` fetch (connect, TLS, answer). At most 15s: a handshake or HTTP read waits for one fetch, then for `ELLIPSIS_SNAPSHOT_TIMEOUT`, and its answer must be written within the gateway's 30 s HTTP write timeout"},
		{Env: "ELLIPSIS_JWKS_CA", For: ForGateway, V: str(&c.JWKSCA, ""), DefaultDoc: "system CAs",
			Doc: "PEM file of the CAs trusted for `ELLIPSIS_JWKS_URL`'s certificate, in place of the system's (only with the URL)"},
		{Env: "ELLIPSIS_JWT_ISSUER", For: ForGateway, V: str(&c.JWTIssuer, ""), DefaultDoc: "empty (not checked)",
			Doc: "the only accepted `iss`; tokens without `iss` are refused when set"},
		{Env: "ELLIPSIS_JWT_AUDIENCE", For: ForGateway, V: list(&c.JWTAudience, rule("no surrounding spaces", checkAudience)), DefaultDoc: "empty (not checked)",
			Doc: "accepted `aud` values, comma-separated; the token must name one"},
		{Env: "ELLIPSIS_JWT_LEEWAY", For: ForGateway, V: dur(&c.JWTLeeway, 0, between(0, 5*time.Minute)),
			Doc: "clock skew allowed on `exp` and `nbf`"},
		{Env: "ELLIPSIS_ALLOWED_ORIGINS", For: ForGateway, V: list(&c.AllowedOrigins, rule("origins, `*`", checkOrigins)), DefaultDoc: "same host",
			Doc: "origins allowed to open a WebSocket and to read the HTTP API and the SDK cross-origin (CORS), comma-separated; `https://*.example.com` allowed, `*` allows any"},
		{Env: "ELLIPSIS_AUTHZ", For: ForGateway, V: str(&c.Authz, AuthzNone, oneOf(AuthzNone, AuthzClaims, AuthzNATS)),
			Doc: "`none`, `claims` (the token's `rooms` claim; needs `ELLIPSIS_AUTH=jwt`) or `nats`"},
		{Env: "ELLIPSIS_AUTHZ_TIMEOUT", For: ForGateway, V: dur(&c.AuthzTimeout, time.Second, between(10*time.Millisecond, maxSnapshotTimeout)),
			Doc: "authz `nats`: request timeout; no answer in time means deny (with `nats`, at most `ELLIPSIS_SNAPSHOT_TIMEOUT`, within which a join or HTTP read is authorised)"},
		{Env: "ELLIPSIS_AUTHZ_CACHE_TTL", For: ForGateway, V: dur(&c.AuthzCacheTTL, 30*time.Second, notNegative[time.Duration]()),
			Doc: "authz `nats`: how long an allowed (user, room) is remembered (`0s`: never)"},
		{Env: "ELLIPSIS_AUTHZ_DENY_CACHE_TTL", For: ForGateway, V: dur(&c.AuthzDenyCacheTTL, 2*time.Second, notNegative[time.Duration]()),
			Doc: "authz `nats`: how long a denial is remembered (`0s`: never)"},
		{Env: "ELLIPSIS_TYPING_TTL", For: ForBoth, V: dur(&c.TypingTTL, 5*time.Second, between(time.Millisecond, maxTypingTimer), rule("whole ms", checkWholeMs)),
			Doc: "a typing entry lives this long after its last start/refresh; served to clients as `ttl_ms` (at most 24h: clients time it with `setTimeout`, which holds 2^31−1 ms)"},
		{Env: "ELLIPSIS_TYPING_THROTTLE", For: ForBoth, V: dur(&c.TypingThrottle, 2*time.Second, between(time.Millisecond, maxTypingTimer), rule("whole ms", checkWholeMs)),
			Doc: "at most one refresh fan-out per user per room per window (must be < refresh)"},
		{Env: "ELLIPSIS_TYPING_REFRESH", For: ForBoth, V: dur(&c.TypingRefresh, 4*time.Second, between(time.Millisecond, maxTypingTimer), rule("whole ms", checkWholeMs)),
			Doc: "client refresh interval while typing, served to clients as `refresh_ms` (must be < ttl; the gateway also needs ≥ 1/`ELLIPSIS_INBOUND_RATE`, or a client refreshing one room is rate limited)"},
		{Env: "ELLIPSIS_TYPING_IDLE_STOP", For: ForBoth, V: dur(&c.TypingIdleStop, 3*time.Second, between(time.Millisecond, maxTypingTimer), rule("whole ms", checkWholeMs)),
			Doc: "client stop after this long without a keystroke, served to clients as `idle_stop_ms` (must be < ttl)"},
		{Env: "ELLIPSIS_SHUTDOWN_DRAIN", For: ForGateway, V: dur(&c.ShutdownDrain, 5*time.Second, between(0, maxShutdownWindow)),
			Doc: "window over which clients are closed with 1001 on SIGTERM, after the lame duck (at most 5m, like the lame duck: the shutdown deadline is 2 × (lame duck + drain) + 10 s)"},
		{Env: "ELLIPSIS_LAME_DUCK", For: ForGateway, V: dur(&c.LameDuck, 3*time.Second, between(0, maxShutdownWindow)), Dev: "0s",
			Doc: "after SIGTERM, `/readyz` answers 503 and new upgrades are refused (503) at once, while open connections are still served this long; then the drain (0: none; keep `terminationGracePeriodSeconds` ≥ preStop + lame duck + drain + 10 s)"},
		{Env: "ELLIPSIS_SWEEP_INTERVAL", For: ForWorker, V: dur(&c.SweepInterval, 250*time.Millisecond, between(10*time.Millisecond, maxSweepInterval)),
			Doc: "how often expired entries are looked for; expiry pushes reach receivers within ttl + this + delivery. At most 500ms: docs/protocol.md promises the `expired` stop within ttl + 1 s and the trailing edge within throttle + 1 s, and 500 ms of that second is kept for the sweep's Redis round trip, the fan-out and the write to clients"},
		{Env: "ELLIPSIS_SNAPSHOT_TIMEOUT", For: ForBoth, V: dur(&c.SnapshotTimeout, 2*time.Second, between(10*time.Millisecond, maxSnapshotTimeout)),
			Doc: "snapshot request timeout; also bounds a join's wait for its subscription and its authorisation. At most 10s: with a JWKS fetch (≤ 15s) before it, the HTTP read's 503 must still be written within the gateway's 30 s HTTP write timeout"},
		{Env: "ELLIPSIS_PUBSUB_PING_INTERVAL", For: ForGateway, V: dur(&c.PubSubPingInterval, 5*time.Second, atLeast(100*time.Millisecond)),
			Doc: "how often each Redis Pub/Sub connection is PINGed"},
		{Env: "ELLIPSIS_PUBSUB_PING_TIMEOUT", For: ForGateway, V: dur(&c.PubSubPingTimeout, 2*time.Second, atLeast(10*time.Millisecond)),
			Doc: "a Pub/Sub connection silent this long after a PING (a health PING, its first one, dial included, or the one confirming a batch of subscriptions) is closed and redialed, `/readyz` 503 meanwhile; joins on it fail at once (must be < interval)"},
		{Env: "ELLIPSIS_BATCH_WINDOW", For: ForGateway, V: dur(&c.BatchWindow, 5*time.Millisecond, between(0, maxBatchWindow)),
			Doc: "how long a typing command may wait at the gateway to travel with others: the commands of all its connections that fall in one window go as one NATS message (a `batch`, docs/protocol.md \"Command batches\"). `0s`: each goes at once. 5ms was chosen from the sweep in docs/BENCHMARKS.md (\"Batching window\"): CPU per change 0.45 to 0.65 of send-at-once, p99 within 25 ms at L1 and L2. At most 50ms: half of the 200 ms end-to-end budget of a typing change"},
		{Env: "ELLIPSIS_WORKER_BATCH_WINDOW", For: ForWorker, V: dur(&c.WorkerBatchWindow, 0, between(0, maxBatchWindow)),
			Doc: "how long a worker shard waits after a command for more to send in the same Redis pipeline. `0s`: it sends what is queued at once, and what arrives while that pipeline is in flight goes in the next (so a busy worker pipelines anyway). Worth a few ms only for many gateways each sending small batches; with one gateway it adds latency and saves no CPU (docs/BENCHMARKS.md, \"Batching window\")"},
		{Env: "ELLIPSIS_MAX_FRAME_BYTES", For: ForGateway, V: integer(&c.MaxFrameBytes, 4096, between(minFrameBytes, 1<<20)),
			Doc: "largest inbound WebSocket message (over: close 1009). At least 1024: the longest frame a client may need, `typing_start` with a room id and a request id at their limits (256 and 128 bytes, each byte a quote or backslash that JSON escapes to 2), is 809 bytes as `JSON.stringify` writes it (an encoder escaping non-ASCII or HTML as `\\uXXXX` may need up to 2345, which the default takes)"},
		{Env: "ELLIPSIS_MAX_ROOMS_PER_CONN", For: ForGateway, V: integer(&c.MaxRoomsPerConn, 100, between(1, 1000)),
			Doc: "joined rooms per connection (over: `room_limit`)"},
		{Env: "ELLIPSIS_INBOUND_RATE", For: ForGateway, V: float(&c.InboundRate, 20, positive[float64]()),
			Doc: "per-connection inbound frames/s (over: `rate_limited`)"},
		{Env: "ELLIPSIS_INBOUND_BURST", For: ForGateway, V: integer(&c.InboundBurst, 40, between(1, 100000)),
			Doc: "per-connection inbound burst, frames"},
		{Env: "ELLIPSIS_OUTBOUND_QUEUE", For: ForGateway, V: integer(&c.OutboundQueue, 256, between(1, 1<<20)),
			Doc: "per-connection outbound queue in frames: from half of it (the high-water mark) the connection's room events are conflated, kept as the latest per (room, user), at most `ELLIPSIS_SNAPSHOT_MAX` users per joined room, and written once the socket drains (docs/protocol.md, \"Order and loss\"); also the events buffered per joining connection"},
		{Env: "ELLIPSIS_ROOM_SUMMARY_MEMBERS", For: ForGateway, V: integer(&c.RoomSummaryMembers, 500, between(1, 10_000_000)),
			Doc: "a room with more local members than this on a gateway is in summary mode: instead of each `typing_start` / `typing_stop`, its members get one `typing` snapshot frame (the first `ELLIPSIS_SNAPSHOT_MAX` typists and `total`) at most once per `ELLIPSIS_ROOM_SUMMARY_INTERVAL` when it changed; it goes back to events below 90 % of this (docs/protocol.md, \"Summary mode\")"},
		{Env: "ELLIPSIS_ROOM_SUMMARY_INTERVAL", For: ForGateway, V: dur(&c.RoomSummaryInterval, time.Second, between(50*time.Millisecond, time.Minute)),
			Doc: "least time between two summaries of a room in summary mode (`ELLIPSIS_ROOM_SUMMARY_MEMBERS`); each costs one snapshot request per room and gateway. Keep it at most `ELLIPSIS_TYPING_TTL` − `ELLIPSIS_TYPING_REFRESH` (1 s by default): there a typist who keeps typing is refreshed on clients only by the summary after each refresh"},
		{Env: "ELLIPSIS_MAX_WATCHED_ROOMS", For: ForGateway, V: integer(&c.MaxWatchedRooms, 500, between(0, 10000)),
			Doc: "rooms one connection may watch (`watch`: a `summary` per room instead of its events; docs/protocol.md, \"Watching rooms\"); rooms past it are refused `watch_limit`, 0 turns watching off. Also each user's watch budget on a gateway: every newly watched room takes one of this many tokens, refilled this many a minute (without one: `rate_limited`)"},
		{Env: "ELLIPSIS_WATCH_INTERVAL", For: ForGateway, V: dur(&c.WatchInterval, 2*time.Second, between(100*time.Millisecond, time.Minute)),
			Doc: "least time between two `summary` frames of a watched room to one connection, sent only when it changed; each costs one snapshot request per changing watched room and gateway (shared with joins and syncs)"},
		{Env: "ELLIPSIS_INBOUND_MAX_REJECTED", For: ForGateway, V: integer(&c.InboundMaxRejected, 50, between(1, 100000)),
			Doc: "rate-limited frames tolerated within 10 s (the current second and the 10 before it); one more closes the connection (close 1008). With the default bucket: 100 frames/s closed after ~1 s, 25/s after ~18 s, 19/s never"},
		{Env: "ELLIPSIS_MAX_CONNS", For: ForGateway, V: integer(&c.MaxConns, 10000, between(1, 10_000_000)),
			Doc: "open WebSocket connections (over: HTTP 503 at the handshake)"},
		{Env: "ELLIPSIS_MAX_CONNS_PER_USER", For: ForGateway, V: integer(&c.MaxConnsPerUser, 32, between(1, 1_000_000)),
			Doc: "one user's open connections on one gateway (over: HTTP 429)"},
		{Env: "ELLIPSIS_SNAPSHOT_RATE", For: ForGateway, V: float(&c.SnapshotRate, 10, positive[float64]()),
			Doc: "per-user snapshot budget on a gateway (shared by the user's connections), snapshots/s: every `sync`, every `join` of a room already joined, and every `join` that finds none of the user's free joins (a bucket of `ELLIPSIS_MAX_ROOMS_PER_CONN`, refilled that many a minute; a join answered `unavailable` gives its free join back) take one (over: `rate_limited` with the frame's `id`, no snapshot asked). The JS client resyncs every joined room each 10 s, so keep it at least `ELLIPSIS_MAX_ROOMS_PER_CONN` / 10 s per connection a user keeps open (the default: one connection in 100 rooms) or its periodic syncs are refused"},
		{Env: "ELLIPSIS_SNAPSHOT_BURST", For: ForGateway, V: integer(&c.SnapshotBurst, 20, between(1, 100000)),
			Doc: "per-user snapshot burst on a gateway, snapshots"},
		{Env: "ELLIPSIS_SNAPSHOT_USERS", For: ForGateway, V: integer(&c.SnapshotUsers, 10000, between(1, 10_000_000)),
			Doc: "users with no open connection whose WebSocket snapshot budget one gateway keeps (a user with an open connection is always kept); past it the user whose last connection closed longest ago is forgotten (its next connection starts from full buckets)"},
		{Env: "ELLIPSIS_HTTP_SNAPSHOT_RATE", For: ForGateway, V: float(&c.HTTPSnapshotRate, 2, positive[float64]()),
			Doc: "per-user budget of `GET /v1/rooms/{room}/typing`, snapshots/s (the authenticated user; with `ELLIPSIS_AUTH=none` the claimed `user`; over: HTTP 429 `rate_limited` with `Retry-After`)"},
		{Env: "ELLIPSIS_HTTP_SNAPSHOT_BURST", For: ForGateway, V: integer(&c.HTTPSnapshotBurst, 10, between(1, 100000)),
			Doc: "per-user burst of `GET /v1/rooms/{room}/typing`, snapshots"},
		{Env: "ELLIPSIS_HTTP_SNAPSHOT_USERS", For: ForGateway, V: integer(&c.HTTPSnapshotUsers, 10000, between(1, 10_000_000)),
			Doc: "users whose HTTP snapshot budget one gateway tracks; past it the user that asked least recently is forgotten (its next request starts from a full burst)"},
		{Env: "ELLIPSIS_PONG_WAIT", For: ForGateway, V: dur(&c.PongWait, 60*time.Second, between(100*time.Millisecond, maxPongWait)),
			Doc: "silence allowed before a connection is dropped; pings every 9/10 of it"},
		{Env: "ELLIPSIS_WRITE_WAIT", For: ForGateway, V: dur(&c.WriteWait, 10*time.Second, atLeast(10*time.Millisecond)),
			Doc: "deadline of a pong to a client's ping (the longer of it and `ELLIPSIS_WRITE_STALL`; missed: connection dropped)"},
		{Env: "ELLIPSIS_WRITE_STALL", For: ForGateway, V: dur(&c.WriteStall, 30*time.Second, between(100*time.Millisecond, 10*time.Minute)),
			Doc: "deadline of every frame and ping written to a client (rounded up by at most 1/16, so that writes close together share one deadline): a connection that has written nothing for this long (a reader that stopped reading) is closed with 1013; until then a slow reader's room events are conflated, not queued"},
		{Env: "ELLIPSIS_STORE", For: ForWorker, V: str(&c.Store, StoreZSet, oneOf(StoreZSet, StoreKeys)),
			Doc: "typing-state layout: `zset` (one sorted set per room) or `keys` (seed pattern 1, one key per typist listed with `SCAN`; not on Redis Cluster; for comparison, see docs/BENCHMARKS.md)"},
		{Env: "ELLIPSIS_WORKER_SHARDS", For: ForWorker, V: integer(&c.WorkerShards, 0, between(0, 4096)),
			Doc: "commands applied concurrently, each shard one Redis pipeline at a time (one connection's always in order). `0` (the default): 1, so a gateway's batch goes to Redis in one pipeline, not cut into one per shard (docs/BENCHMARKS.md, \"Batching window\"), and 16 on Redis Cluster, where a pipeline waits for its slowest master and one shard would let one slow master hold every command; more shards apply commands of different connections in parallel pipelines. Each shard queues max(1024, 16384 / shards) commands (past 3/4 of it starts are dropped, when full anything: `commands_total{outcome=\"shed\"\\|\"overflow\"}`)"},
		{Env: "ELLIPSIS_NATS_EVENTS", For: ForWorker, V: boolean(&c.NATSEvents, false),
			Doc: "also publish every `typing_start` / `typing_stop` (same bytes as the Redis event) on NATS `<prefix>.typing.v1.room.<token>`, at most once (docs/protocol.md, \"Room events on NATS\")"},
		{Env: "ELLIPSIS_SNAPSHOT_MAX", For: ForWorker, V: integer(&c.SnapshotMax, 100, between(1, 500)),
			Doc: "typists listed in one snapshot (`joined`, `typing`, HTTP, NATS reply); `total` still counts all, and a reply is also cut to fit the NATS `max_payload` (a listed typist costs about 3 µs of Redis in store `zset`, so 500 cost about 1.5 ms a snapshot: docs/BENCHMARKS.md, \"Who is typing\")"},
		{Env: "ELLIPSIS_MAX_THREADS_PER_USER", For: ForBoth, V: integer(&c.MaxThreadsPerUser, 5, between(1, 100)),
			Doc: "threads of one room a user may type in at once, besides the room itself (never refused); a start in one more is refused, outcome `too_many_threads` (worker, over all the user's connections) or error `too_many_threads` (gateway, over one connection's; served by `GET /v1/config` as `max_threads_per_user`; docs/protocol.md, \"Threads and activities\")"},
		{Env: "ELLIPSIS_SERVICE_MAX_TTL", For: ForWorker, V: dur(&c.ServiceMaxTTL, time.Minute, between(time.Millisecond, maxTypingTimer), rule("whole ms", checkWholeMs)),
			Doc: "the longest `ttl_ms` a platform service may give its own start on NATS (a start above it is refused as invalid, field `ttl_ms`); clients' starts keep `ELLIPSIS_TYPING_TTL`. The worker's keys live this + 10 s + throttle (docs/protocol.md, \"Threads and activities\")"},
		{Env: "ELLIPSIS_ACTIVITIES", For: ForBoth, V: list(&c.Activities, rule("at most 32 names of 1..32 bytes of a-z and _", checkActivities)), DefaultDoc: "empty (the standard set only)",
			Doc: "activities a start may name besides the standard `typing`, `thinking`, `recording_audio`, `recording_video`, `uploading` (docs/protocol.md, \"Threads and activities\")"},
		{Env: "ELLIPSIS_GATEWAY_ID", For: ForGateway, V: str(&c.GatewayID, "", rule("≤ 64 bytes of UTF-8, no `:`, spaces or control characters", checkGatewayID)), DefaultDoc: "random",
			Doc: "gateway id in connection ids (`<id>-<per-boot suffix>:<n>`, so a restart never reuses a connection id)"},
		{Env: "ELLIPSIS_DEMO_PAGE", For: ForGateway, V: boolean(&c.DemoPage, true),
			Doc: "serve the demo page and JS client at `/`"},
		{Env: "ELLIPSIS_PPROF", For: ForBoth, V: boolean(&c.Pprof, false),
			Doc: "also serve Go's profiles (`net/http/pprof`) at `/debug/pprof/` on the admin listener; off by default: a profile costs CPU and shows internals (docs/BENCHMARKS.md)"},
		{Env: "ELLIPSIS_LOG_LEVEL", For: ForBoth, V: str(&c.LogLevel, "info", oneOf("debug", "info", "warn", "error")),
			Doc: "zap log level"},
		{Env: "ELLIPSIS_LOG_FORMAT", For: ForBoth, V: str(&c.LogFormat, "json", oneOf("json", "console")), Dev: "console",
			Doc: "zap log format"},
	}
}

// rules are the checks that involve more than one setting (or one setting
// only in some modes); each error names every setting it involves. Only the
// rules for the services the Config is validated for run.
var rules = []struct {
	For   Readers
	check func(c *Config, bad func(format string, a ...any))
}{
	// The seed design's timing: throttle < refresh < ttl (so refreshes
	// keep an entry alive and are not all throttled), and idle_stop < ttl.
	{ForBoth, func(c *Config, bad func(string, ...any)) {
		ttl, thr, ref, idle := c.TypingTTL > 0, c.TypingThrottle > 0, c.TypingRefresh > 0, c.TypingIdleStop > 0
		if ttl && thr && c.TypingThrottle >= c.TypingTTL {
			bad("ELLIPSIS_TYPING_THROTTLE (%s) must be below ELLIPSIS_TYPING_TTL (%s)", c.TypingThrottle, c.TypingTTL)
		}
		if ttl && ref && c.TypingRefresh >= c.TypingTTL {
			bad("ELLIPSIS_TYPING_REFRESH (%s) must be below ELLIPSIS_TYPING_TTL (%s), or indicators flicker between refreshes", c.TypingRefresh, c.TypingTTL)
		}
		if thr && ref && c.TypingThrottle >= c.TypingRefresh {
			bad("ELLIPSIS_TYPING_THROTTLE (%s) must be below ELLIPSIS_TYPING_REFRESH (%s), or refreshes are never fanned out", c.TypingThrottle, c.TypingRefresh)
		}
		if ttl && idle && c.TypingIdleStop >= c.TypingTTL {
			bad("ELLIPSIS_TYPING_IDLE_STOP (%s) must be below ELLIPSIS_TYPING_TTL (%s)", c.TypingIdleStop, c.TypingTTL)
		}
	}},
	// Gateway timings that docs/protocol.md promises together
	// (bounds.go): a join's or HTTP read's authorisation runs within the
	// snapshot timeout, so "no reply within ELLIPSIS_AUTHZ_TIMEOUT is a
	// denial" holds only when the authz timeout fits in it; and a client
	// refreshing one room every refresh_ms (served by GET /v1/config) must
	// stay within the inbound rate.
	{ForGateway, func(c *Config, bad func(string, ...any)) {
		if c.Authz == AuthzNATS && c.SnapshotTimeout > 0 && c.AuthzTimeout > c.SnapshotTimeout {
			bad("ELLIPSIS_AUTHZ_TIMEOUT (%s) must be at most ELLIPSIS_SNAPSHOT_TIMEOUT (%s): a join's authorisation runs within the snapshot timeout", c.AuthzTimeout, c.SnapshotTimeout)
		}
		if c.InboundRate > 0 && c.TypingRefresh > 0 && c.TypingRefresh.Seconds()*c.InboundRate < 1 {
			bad("ELLIPSIS_TYPING_REFRESH (%s) must be at least 1/ELLIPSIS_INBOUND_RATE (%s): a client refreshing one room that often would be rate limited",
				c.TypingRefresh, time.Duration(float64(time.Second)/c.InboundRate))
		}
	}},
	{ForGateway, func(c *Config, bad func(string, ...any)) {
		if c.PubSubPingInterval > 0 && c.PubSubPingTimeout > 0 && c.PubSubPingTimeout >= c.PubSubPingInterval {
			bad("ELLIPSIS_PUBSUB_PING_TIMEOUT (%s) must be below ELLIPSIS_PUBSUB_PING_INTERVAL (%s): one PING is outstanding at a time", c.PubSubPingTimeout, c.PubSubPingInterval)
		}
	}},
	{ForWorker, func(c *Config, bad func(string, ...any)) {
		if ro, err := redisconn.Parse(c.RedisURL); err == nil && ro.Topology == redisconn.Cluster && c.Store == StoreKeys {
			bad("ELLIPSIS_STORE: keys does not run on Redis Cluster (its snapshot SCANs the keyspace of one node); use zset")
		}
	}},
	{ForGateway, func(c *Config, bad func(string, ...any)) {
		if c.Auth == AuthJWT && c.JWTSecret == "" && c.JWKSFile == "" && c.JWKSURL == "" {
			bad("ELLIPSIS_AUTH: jwt needs ELLIPSIS_JWT_SECRET, ELLIPSIS_JWKS_FILE or ELLIPSIS_JWKS_URL (or set ELLIPSIS_AUTH=none for development)")
		}
		if c.Authz == AuthzClaims && c.Auth != AuthJWT {
			bad("ELLIPSIS_AUTHZ: claims reads the rooms claim of a JWT and needs ELLIPSIS_AUTH=jwt, got %q", c.Auth)
		}
	}},
	// The NATS credentials that go together (package natsconn,
	// Auth.CheckTogether): not .creds and NKey, neither with user info in
	// ELLIPSIS_NATS_URL, the TLS certificate with its key, read as a pair.
	// Each file alone is checked by its own entry.
	{ForBoth, func(c *Config, bad func(string, ...any)) {
		err := c.NATSAuth().CheckTogether(c.NATSServers())
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				bad("%w", e)
			}
		} else if err != nil {
			bad("%w", err)
		}
	}},
	// ELLIPSIS_JWKS_URL and the settings that go with it. The URL's own
	// rule is package jwksurl's, which the gateway's JWKS client also
	// applies to every redirect.
	{ForGateway, func(c *Config, bad func(string, ...any)) {
		if c.JWKSCA != "" && c.JWKSURL == "" {
			bad("ELLIPSIS_JWKS_CA: only used with ELLIPSIS_JWKS_URL, which is empty")
		}
		if c.JWKSURL == "" {
			return
		}
		if c.JWKSFile != "" {
			bad("ELLIPSIS_JWKS_FILE and ELLIPSIS_JWKS_URL: set one of them, not both")
		}
		if err := jwksurl.Check(c.JWKSURL); err != nil {
			bad("ELLIPSIS_JWKS_URL: %w", err)
		}
		if c.JWKSReload < time.Second {
			bad("ELLIPSIS_JWKS_RELOAD: must be at least 1s with ELLIPSIS_JWKS_URL, got %s", c.JWKSReload)
		}
	}},
}

// Checks of single settings that are more than a range or a list of words.

func checkNATSURL(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("is required")
	}
	var errs []error
	for _, u := range strings.Split(v, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || p.Host == "" || (p.Scheme != "nats" && p.Scheme != "tls" && p.Scheme != "ws" && p.Scheme != "wss") {
			errs = append(errs, fmt.Errorf("%q is not a nats://, tls://, ws:// or wss:// URL with a host", natsconn.RedactURL(u)))
		}
	}
	return errors.Join(errs...)
}

func checkRedisURL(v string) error {
	if _, err := redisconn.Parse(v); err != nil {
		return fmt.Errorf("%q: %v", redisconn.Redact(v), err)
	}
	return nil
}

func checkSubjectPrefix(v string) error {
	if v == "" || strings.ContainsAny(v, " \t\r\n.*>") {
		return fmt.Errorf("%q must be one non-empty NATS subject token (no '.', '*', '>' or spaces)", v)
	}
	return nil
}

func checkKeyPrefix(v string) error {
	if strings.ContainsAny(v, "{}") {
		return fmt.Errorf("%q must not contain '{' or '}': Redis Cluster would hash every key on the prefix instead of its room", v)
	}
	return nil
}

func checkWholeMs(d time.Duration) error {
	if d > 0 && d%time.Millisecond != 0 {
		return fmt.Errorf("must be whole milliseconds, got %s", d)
	}
	return nil
}

func checkAudience(v []string) error {
	var errs []error
	for _, a := range v {
		if strings.TrimSpace(a) != a {
			errs = append(errs, fmt.Errorf("%q has surrounding spaces", a))
		}
	}
	return errors.Join(errs...)
}

func checkOrigins(v []string) error {
	var errs []error
	for _, o := range v {
		if o == "*" {
			continue
		}
		p, err := url.Parse(o)
		if err != nil || p.Scheme == "" || p.Host == "" || (p.Path != "" && p.Path != "/") {
			errs = append(errs, fmt.Errorf("%q is not an origin like https://chat.example.com or https://*.example.com", o))
		}
	}
	return errors.Join(errs...)
}

// checkGatewayID: the id goes into every connection id, which the worker
// checks with protocol.ValidateID (UTF-8, no control characters).
func checkGatewayID(v string) error {
	if v != "" && (len(v) > 64 || strings.ContainsAny(v, ": \t\r\n") || !utf8.ValidString(v) ||
		strings.IndexFunc(v, unicode.IsControl) >= 0) {
		return fmt.Errorf("%q must be at most 64 bytes of UTF-8 without ':', spaces or control characters", v)
	}
	return nil
}

// checkActivities checks ELLIPSIS_ACTIVITIES: at most 32 names, each
// 1..32 bytes of a-z and '_' (protocol.ValidateActivity's shape).
func checkActivities(v []string) error {
	if len(v) > 32 {
		return fmt.Errorf("at most 32 activities, got %d", len(v))
	}
	var errs []error
	for _, a := range v {
		ok := len(a) >= 1 && len(a) <= 32
		for i := 0; ok && i < len(a); i++ {
			ok = (a[i] >= 'a' && a[i] <= 'z') || a[i] == '_'
		}
		if !ok {
			errs = append(errs, fmt.Errorf("%q is not 1..32 bytes of a-z and _", a))
		}
	}
	return errors.Join(errs...)
}
