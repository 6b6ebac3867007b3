// Package config reads the Ellipsis settings shared by the gateway, the
// presence worker and the dev stack from environment variables and flags.
// The names and defaults are docs/protocol.md's ("Configuration names"); every
// variable has a flag of the same name in lower case without the ELLIPSIS_
// prefix and with '-' for '_' (ELLIPSIS_TYPING_TTL is -typing-ttl). A flag
// wins over its variable, which wins over the default.
//
// # One table
//
// Every setting is defined once, as one entry of the table in settings.go
// ([Config.table]): its variable, which services read it, its field and
// default (and the dev stack's, when it differs), what it accepts, and what it
// means. [Default], [Dev], [Load] (environment and flags, with -h text),
// [Config.Validate], [EnvNames] and docs/configuration.md's table
// ([MarkdownTable], written by `make config-doc`) are derived from it;
// TestConfigurationTable fails when docs/configuration.md's table differs
// from the table.
//
// # Adding a setting
//
//  1. Add the field to [Config], with a one-line comment naming its variable.
//
//  2. Add one entry to the table in settings.go, where it belongs in the
//     table's order (docs/configuration.md's), e.g.
//
//     {Env: "ELLIPSIS_NATS_CREDS", For: ForBoth, V: str(&c.NATSCreds, ""),
//     Doc: "NATS credentials file (JWT and NKey seed)"},
//
//     V binds the field with its default and its own checks: str, dur,
//     integer, float, boolean or list, with checks such as positive,
//     notNegative, atLeast, atMost, between, oneOf, listenAddr, or
//     rule(desc, func) for anything else (value.go). Dev sets the dev
//     stack's value when it differs; DefaultDoc replaces the table's
//     default column ("random").
//
//  3. A check involving other settings (or only in some modes) goes in
//     settings.go's rules, naming every setting it involves.
//
//  4. A number (duration, integer, float) is bounded both ways, each bound
//     derived from the promise of docs/protocol.md it keeps (bounds.go), or
//     listed in promises_test.go's unbounded with the reason none is
//     needed; a promise that depends on it goes in promises_test.go's
//     promises, quoted from docs/protocol.md, and a rule coupling it to
//     other settings in coupled.
//
//  5. Run `make config-doc` to rewrite docs/configuration.md's table, and add
//     a line to CHANGELOG.md.
package config

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
)

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
	// authorisation, connection limits), so a worker sharing the gateway's
	// environment starts without the JWT secret.
	ServiceWorker = "presence-worker"
)

// Readers says which services read a setting (Setting.For).
type Readers uint8

const (
	ForGateway Readers = 1 << iota
	ForWorker
	ForBoth = ForGateway | ForWorker
)

// String is docs/configuration.md's "read by" column: gateway, worker or both.
func (r Readers) String() string {
	switch r {
	case ForGateway:
		return "gateway"
	case ForWorker:
		return "worker"
	case ForBoth:
		return "both"
	}
	return fmt.Sprintf("Readers(%d)", uint8(r))
}

// Setting is one entry of the settings table: everything about one setting.
type Setting struct {
	// Env is the environment variable, ELLIPSIS_...; the flag is
	// FlagName(Env).
	Env string
	// For is which services read it; Validate checks it only for those.
	For Readers
	// V binds the Config field, its default and its own checks (value.go).
	V value
	// Dev is the dev stack's value ([Dev]) when it differs from the default.
	Dev string
	// DefaultDoc, when set, is docs/configuration.md's default column in place of the
	// default value ("random", "same host").
	DefaultDoc string
	// Doc is the meaning, one line of Markdown (docs/configuration.md, -h).
	Doc string
}

// Default is the default value as text ("5s", "" when empty).
func (s Setting) Default() string {
	var c Config
	for _, e := range c.table() {
		if e.Env == s.Env {
			e.V.reset()
			return e.V.String()
		}
	}
	return ""
}

// Valid describes what the setting accepts ("1..500"; "" when anything).
func (s Setting) Valid() string { return s.V.valid() }

// Config holds every setting; the meaning, default and checks of each are
// its entry in the table (settings.go, docs/configuration.md). The
// zero value is not useful: start from [Default] (or [Dev]) and [Load] over
// it.
type Config struct {
	HTTPAddr  string // ELLIPSIS_HTTP_ADDR
	AdminAddr string // ELLIPSIS_ADMIN_ADDR
	NATSURL   string // ELLIPSIS_NATS_URL; see NATSServers
	// NATS credentials besides user info in NATSURL: file paths, empty when
	// unused; see NATSAuth (package natsconn).
	NATSCreds   string // ELLIPSIS_NATS_CREDS
	NATSNKey    string // ELLIPSIS_NATS_NKEY
	NATSTLSCert string // ELLIPSIS_NATS_TLS_CERT
	NATSTLSKey  string // ELLIPSIS_NATS_TLS_KEY
	NATSTLSCA   string // ELLIPSIS_NATS_TLS_CA
	RedisURL    string // ELLIPSIS_REDIS_URL; forms: package redisconn
	RedisPubSub string // ELLIPSIS_REDIS_PUBSUB; see RedisPubSubMode

	SubjectPrefix string // ELLIPSIS_SUBJECT_PREFIX
	KeyPrefix     string // ELLIPSIS_KEY_PREFIX

	Auth              string        // ELLIPSIS_AUTH
	JWTSecret         string        // ELLIPSIS_JWT_SECRET
	JWKSFile          string        // ELLIPSIS_JWKS_FILE
	JWKSURL           string        // ELLIPSIS_JWKS_URL
	JWKSReload        time.Duration // ELLIPSIS_JWKS_RELOAD
	JWKSTimeout       time.Duration // ELLIPSIS_JWKS_TIMEOUT
	JWKSCA            string        // ELLIPSIS_JWKS_CA
	JWTIssuer         string        // ELLIPSIS_JWT_ISSUER
	JWTAudience       []string      // ELLIPSIS_JWT_AUDIENCE
	JWTLeeway         time.Duration // ELLIPSIS_JWT_LEEWAY
	AllowedOrigins    []string      // ELLIPSIS_ALLOWED_ORIGINS
	Authz             string        // ELLIPSIS_AUTHZ
	AuthzTimeout      time.Duration // ELLIPSIS_AUTHZ_TIMEOUT
	AuthzCacheTTL     time.Duration // ELLIPSIS_AUTHZ_CACHE_TTL
	AuthzDenyCacheTTL time.Duration // ELLIPSIS_AUTHZ_DENY_CACHE_TTL

	TypingTTL      time.Duration // ELLIPSIS_TYPING_TTL
	TypingThrottle time.Duration // ELLIPSIS_TYPING_THROTTLE
	TypingRefresh  time.Duration // ELLIPSIS_TYPING_REFRESH
	TypingIdleStop time.Duration // ELLIPSIS_TYPING_IDLE_STOP

	ShutdownDrain      time.Duration // ELLIPSIS_SHUTDOWN_DRAIN
	LameDuck           time.Duration // ELLIPSIS_LAME_DUCK
	SweepInterval      time.Duration // ELLIPSIS_SWEEP_INTERVAL
	SnapshotTimeout    time.Duration // ELLIPSIS_SNAPSHOT_TIMEOUT
	PubSubPingInterval time.Duration // ELLIPSIS_PUBSUB_PING_INTERVAL
	PubSubPingTimeout  time.Duration // ELLIPSIS_PUBSUB_PING_TIMEOUT
	BatchWindow        time.Duration // ELLIPSIS_BATCH_WINDOW (gateway; 0: no window)
	WorkerBatchWindow  time.Duration // ELLIPSIS_WORKER_BATCH_WINDOW (0: no wait)

	MaxFrameBytes       int           // ELLIPSIS_MAX_FRAME_BYTES
	MaxRoomsPerConn     int           // ELLIPSIS_MAX_ROOMS_PER_CONN
	InboundRate         float64       // ELLIPSIS_INBOUND_RATE, frames/s
	InboundBurst        int           // ELLIPSIS_INBOUND_BURST, frames
	OutboundQueue       int           // ELLIPSIS_OUTBOUND_QUEUE, frames
	InboundMaxRejected  int           // ELLIPSIS_INBOUND_MAX_REJECTED
	RoomSummaryMembers  int           // ELLIPSIS_ROOM_SUMMARY_MEMBERS, local members
	RoomSummaryInterval time.Duration // ELLIPSIS_ROOM_SUMMARY_INTERVAL
	MaxWatchedRooms     int           // ELLIPSIS_MAX_WATCHED_ROOMS, rooms per connection (0: watching off)
	WatchInterval       time.Duration // ELLIPSIS_WATCH_INTERVAL
	MaxConns            int           // ELLIPSIS_MAX_CONNS
	MaxConnsPerUser     int           // ELLIPSIS_MAX_CONNS_PER_USER
	SnapshotRate        float64       // ELLIPSIS_SNAPSHOT_RATE, snapshots/s per user (its connections on a gateway)
	SnapshotBurst       int           // ELLIPSIS_SNAPSHOT_BURST, snapshots
	HTTPSnapshotRate    float64       // ELLIPSIS_HTTP_SNAPSHOT_RATE, snapshots/s per user
	HTTPSnapshotBurst   int           // ELLIPSIS_HTTP_SNAPSHOT_BURST, snapshots
	HTTPSnapshotUsers   int           // ELLIPSIS_HTTP_SNAPSHOT_USERS, users tracked
	SnapshotUsers       int           // ELLIPSIS_SNAPSHOT_USERS, idle users whose WebSocket snapshot budget is kept
	PongWait            time.Duration // ELLIPSIS_PONG_WAIT
	WriteWait           time.Duration // ELLIPSIS_WRITE_WAIT
	WriteStall          time.Duration // ELLIPSIS_WRITE_STALL

	WorkerShards int    // ELLIPSIS_WORKER_SHARDS
	SnapshotMax  int    // ELLIPSIS_SNAPSHOT_MAX
	Store        string // ELLIPSIS_STORE
	NATSEvents   bool   // ELLIPSIS_NATS_EVENTS
	GatewayID    string // ELLIPSIS_GATEWAY_ID
	DemoPage     bool   // ELLIPSIS_DEMO_PAGE
	Pprof        bool   // ELLIPSIS_PPROF
	LogLevel     string // ELLIPSIS_LOG_LEVEL
	LogFormat    string // ELLIPSIS_LOG_FORMAT

	// Threads and activities (docs/protocol.md, "Threads and activities").
	MaxThreadsPerUser int           // ELLIPSIS_MAX_THREADS_PER_USER
	ServiceMaxTTL     time.Duration // ELLIPSIS_SERVICE_MAX_TTL
	Activities        []string      // ELLIPSIS_ACTIVITIES, besides the standard set

	// Service selects which settings Validate checks: [ServiceAll] (zero
	// value), [ServiceGateway] or [ServiceWorker]. Not read from the
	// environment: each main sets it.
	Service string

	set map[string]bool
}

// Default returns the production defaults (the table's).
func Default() Config {
	var c Config
	for _, s := range c.table() {
		s.V.reset()
	}
	return c
}

// Dev returns the dev stack's defaults: [Default] with the table's Dev
// values (auth "none", console logs and no lame duck: one process on a
// developer's machine, no load balancer to tell, Ctrl-C closes at once).
func Dev() Config {
	c := Default()
	for _, s := range c.table() {
		if s.Dev != "" {
			if err := s.V.set(s.Dev); err != nil {
				panic(fmt.Sprintf("config: the table's Dev value of %s: %v", s.Env, err))
			}
		}
	}
	return c
}

// Settings returns the table, bound to a Config holding the defaults (for
// documentation: [MarkdownTable], the configdoc command).
func Settings() []Setting {
	c := Default()
	return c.table()
}

// IsSet reports whether the setting named by its environment variable (e.g.
// "ELLIPSIS_REDIS_URL") was given explicitly, by variable or flag.
func (c *Config) IsSet(env string) bool { return c.set[env] }

// AcceptedActivities is every activity a typing start may name: the
// standard ones (protocol.StandardActivities, typing first), then
// ELLIPSIS_ACTIVITIES (docs/protocol.md, "Threads and activities"). The
// worker and the gateway read it alike; a fresh slice each call.
func (c *Config) AcceptedActivities() []string {
	return append(protocol.StandardActivities(), c.Activities...)
}

// EnvNames lists every environment variable that [Load] reads, in order.
func EnvNames() []string {
	var c Config
	var out []string
	for _, s := range c.table() {
		out = append(out, s.Env)
	}
	return out
}

// Shown is how a setting's value may be shown (flag usage, logs): the
// secrets are hidden, ELLIPSIS_JWT_SECRET as "(set)", the password or
// token of every ELLIPSIS_NATS_URL and the user info of ELLIPSIS_JWKS_URL
// as xxxxx and ELLIPSIS_REDIS_URL's
// password as redisconn.Redact does; other values unchanged (the
// credential settings are file paths).
func Shown(env, value string) string {
	switch {
	case value == "":
		return value
	case env == "ELLIPSIS_JWT_SECRET":
		return "(set)"
	case env == "ELLIPSIS_NATS_URL":
		return natsconn.RedactURLs(value)
	case env == "ELLIPSIS_JWKS_URL": // user info is sent as basic auth
		return natsconn.RedactURL(value)
	case env == "ELLIPSIS_REDIS_URL":
		return redisconn.Redact(value)
	}
	return value
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
	settings := c.table()
	for _, s := range settings {
		v, ok := lookup(s.Env)
		if !ok {
			continue
		}
		c.set[s.Env] = true
		if err := s.V.set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Env, err))
		}
	}
	if fs != nil {
		for _, s := range settings {
			usage := strings.ReplaceAll(s.Doc, "`", "") + " (" + s.Env + ", now " + strconv.Quote(Shown(s.Env, s.V.String())) + ")"
			fs.Func(FlagName(s.Env), usage, func(v string) error {
				c.set[s.Env] = true
				return s.V.set(v)
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

// readers maps Service to the settings it reads.
func (c *Config) readers() (Readers, error) {
	switch c.Service {
	case ServiceAll:
		return ForBoth, nil
	case ServiceGateway:
		return ForGateway, nil
	case ServiceWorker:
		return ForWorker, nil
	}
	return ForBoth, fmt.Errorf("config: Service %q must be empty, %q or %q", c.Service, ServiceGateway, ServiceWorker)
}

// Validate reports every invalid setting at once (errors.Join), each error
// naming its variable, the value and the limit: the table's checks of each
// setting the service reads ("ELLIPSIS_SNAPSHOT_MAX: must be 1..500, got
// 0"), then the rules across settings (settings.go), such as the seed
// design's throttle < refresh < ttl and idle_stop < ttl.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	readers, err := c.readers()
	if err != nil {
		errs = append(errs, err)
	}
	for _, s := range c.table() {
		if s.For&readers == 0 {
			continue
		}
		for _, err := range s.V.check() {
			// A check may join several problems (one per URL of a list):
			// each is reported on its own, named.
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					errs = append(errs, fmt.Errorf("%s: %w", s.Env, e))
				}
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %w", s.Env, err))
		}
	}
	for _, r := range rules {
		if r.For&readers != 0 {
			r.check(c, bad)
		}
	}
	return errors.Join(errs...)
}

// NATSAuth returns the NATS credential settings (ELLIPSIS_NATS_CREDS,
// _NKEY, _TLS_CERT, _TLS_KEY, _TLS_CA) for [natsconn.Connect].
func (c *Config) NATSAuth() natsconn.Auth {
	return natsconn.Auth{CredsFile: c.NATSCreds, NKeyFile: c.NATSNKey, TLSCert: c.NATSTLSCert, TLSKey: c.NATSTLSKey, TLSCA: c.NATSTLSCA}
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
