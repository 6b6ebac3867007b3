// Package gateway is the Ellipsis WebSocket gateway as an importable server
// (docs/ARCHITECTURE.md): it authenticates clients, turns their typing
// frames into NATS commands for the presence workers, subscribes the Redis
// Pub/Sub channels of the rooms its clients joined, and fans room events out
// to them (docs/protocol.md is the contract).
//
// The cmd/gateway main, the dev stack and tests all run it the same way:
//
//	s, err := gateway.New(gateway.Options{Config: cfg, Logger: log})
//	if err != nil { ... }
//	if err := s.Start(ctx); err != nil { ... }
//	defer s.Shutdown(ctx)
//
// Public listener (cfg.HTTPAddr): GET /v1/ws (WebSocket), GET
// /v1/rooms/{room}/typing (snapshot), GET /v1/config (client timing), and,
// when cfg.DemoPage, the demo page at / and the JS client at /src/ (and
// Options.DemoChat under /demo/chat/). Admin
// listener (cfg.AdminAddr): /healthz, /readyz, /metrics.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/backend"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/origin"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/pubsub"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/session"
	"github.com/ellipsis-chat/ellipsis/shared/admin"
	"github.com/ellipsis-chat/ellipsis/shared/buildinfo"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
)

// Options configure a [Server].
type Options struct {
	// Config is the loaded and validated configuration (config.Load).
	Config config.Config
	// Logger receives the server's logs. Nil means no logs.
	Logger *zap.Logger
	// Registry receives the ellipsis_gateway_* metrics. Nil means a private
	// registry (with the Go and process collectors added). Either way it is
	// served on the admin listener's /metrics.
	Registry *prometheus.Registry
	// DemoChat, when set and cfg.DemoPage, is the demo page's chat service,
	// served under /demo/chat/ on the public listener (prefix stripped).
	// The dev stack passes one (examples/go/chat); the page keeps its
	// messages in the tab without it.
	DemoChat http.Handler
}

// Errors of [Server.Start].
var (
	ErrStarted = errors.New("gateway: already started")
	ErrStopped = errors.New("gateway: shut down")
)

// HTTP server timeouts of both listeners. Hijacked WebSocket connections
// set their own deadlines (ELLIPSIS_PONG_WAIT, ELLIPSIS_WRITE_WAIT). The
// write timeout is the settings package's, which bounds the JWKS and
// snapshot timeouts so that every answer is written within it.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = config.HTTPWriteTimeout
	idleTimeout       = 120 * time.Second
	// redisPingTimeout bounds the Redis PING of Start.
	redisPingTimeout = time.Second
	// sentinelPoll is how often the hub asks Sentinel which master is
	// current (redisconn.Options.WatchMaster): a master switch reaches
	// the Pub/Sub connection within this.
	sentinelPoll = 500 * time.Millisecond
)

const (
	stateNew = iota
	stateStarted
	stateStopped
)

// Server is one gateway. Create it with [New]; [Server.Start] connects and
// serves; [Server.Shutdown] stops it.
type Server struct {
	cfg       config.Config
	log       *zap.Logger
	reg       *prometheus.Registry
	met       *metrics.Metrics
	natsMet   *metrics.NATS
	batchMet  *metrics.Batches // command batches on NATS (ELLIPSIS_BATCH_WINDOW)
	names     names.Names
	gatewayID string
	authn     auth.Authenticator
	sec       *security // connection limits, security metrics (security.go)
	origins   *origin.Checker
	redisOpt  *redisconn.Options
	upgrader  websocket.Upgrader
	warn      *ratelog.Logger // shared by connections for repetitive warnings
	connLog   *zap.Logger     // "conn", shared by connections
	connSeq   atomic.Uint64
	demoChat  http.Handler // Options.DemoChat

	// shuttingDown is the lame-duck flag, set first by Shutdown: /readyz
	// answers 503 at once and new upgrades are refused (503).
	shuttingDown atomic.Bool

	mu      sync.Mutex
	state   int
	conns   map[*session.Conn]struct{}
	connsWG sync.WaitGroup // one per registered connection

	// Set by Start, read-only afterwards.
	rdb      redis.UniversalClient
	pres     *backend.NATS
	hub      *hub.Hub
	authz    authz.Authorizer
	httpSrv  *http.Server
	adminSrv *admin.Server
	// unregisterReady removes adminSrv's ellipsis_ready from reg
	// (admin.Server.RegisterReady); Shutdown calls it when set.
	unregisterReady func()
	httpLn          net.Listener
	adminLn         net.Listener
	serveWG         sync.WaitGroup // the listeners' Serve goroutines

	shutdownOnce sync.Once
	shutdownErr  error
}

// New checks opts and builds a server. Its only I/O is reading the JWKS
// file (ELLIPSIS_JWKS_FILE) or fetching the JWKS URL (ELLIPSIS_JWKS_URL,
// within ELLIPSIS_JWKS_TIMEOUT), which must hold a usable key; with a URL
// it starts the key refresh, which Shutdown stops. It fails on an
// invalid configuration (every problem at once, as config.Validate reports
// them for config.ServiceGateway), on an unusable JWKS and when the
// metrics cannot be registered on opts.Registry.
func New(opts Options) (*Server, error) {
	cfg := opts.Config
	// Check what the gateway reads, whichever service the caller loaded for.
	check := cfg
	check.Service = config.ServiceGateway
	if err := check.Validate(); err != nil {
		return nil, fmt.Errorf("gateway: config: %w", err)
	}
	redisOpt, err := parseRedis(cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	met, err := registerMetrics(reg)
	if err != nil {
		return nil, err
	}
	sec, err := newSecurity(cfg, reg, log.Named("gateway"))
	if err != nil {
		return nil, err
	}
	natsMet, err := metrics.NewNATS(reg)
	if err != nil {
		sec.close()
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	batchMet, err := metrics.NewBatches(reg)
	if err != nil {
		sec.close()
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	id := bootID(cfg.GatewayID)
	s := &Server{
		cfg:       cfg,
		log:       log.Named("gateway").With(zap.String("gateway_id", id)),
		reg:       reg,
		met:       met,
		natsMet:   natsMet,
		batchMet:  batchMet,
		names:     names.New(cfg.KeyPrefix, cfg.SubjectPrefix),
		gatewayID: id,
		authn:     sec.authn,
		sec:       sec,
		origins:   origin.New(cfg.AllowedOrigins),
		redisOpt:  redisOpt,
		upgrader:  newUpgrader(),
		warn:      ratelog.New(log, time.Minute),
		demoChat:  opts.DemoChat,
		conns:     map[*session.Conn]struct{}{},
	}
	s.connLog = s.log.Named("conn")
	return s, nil
}

// parseRedis parses ELLIPSIS_REDIS_URL for the gateway's client. The
// client only hosts the Pub/Sub broker's connections (which redial with
// their own jittered backoff, internal/pubsub) and the start-up PING: no
// go-redis retries, so a failure is seen at once with its real cause
// (connection refused) instead of after retry backoffs; call contexts
// bound each call, dial and handshake included, so that the start-up PING
// of a Redis that accepts TCP and never answers ends within
// redisPingTimeout.
func parseRedis(url string) (*redisconn.Options, error) {
	redisOpt, err := redisconn.Parse(url)
	if err != nil {
		return nil, fmt.Errorf("gateway: ELLIPSIS_REDIS_URL: %w", err)
	}
	redisOpt.Tune(redisconn.Tuning{MaxRetries: -1, ContextTimeoutEnabled: true})
	return redisOpt, nil
}

// registerMetrics registers the ellipsis_gateway_* metrics and the build
// info on reg.
func registerMetrics(reg *prometheus.Registry) (*metrics.Metrics, error) {
	met, err := metrics.New(reg)
	if err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	if err := reg.Register(buildinfo.Collector(config.ServiceGateway)); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	return met, nil
}

// bootID is the gateway id of this process: "gw-" and 8 random hex digits,
// or configured (ELLIPSIS_GATEWAY_ID) plus "-" and 6. Connection ids are
// "<id>:<n>" with n counting from 1 at every boot. Workers remember a
// connection's last seq for ttl + grace, so a restarted gateway must never
// reuse an id: a configured one gets a per-boot random suffix.
func bootID(configured string) string {
	var boot [4]byte
	_, _ = rand.Read(boot[:])
	if configured != "" {
		return configured + "-" + hex.EncodeToString(boot[:3])
	}
	return "gw-" + hex.EncodeToString(boot[:])
}

// maxHeaderBytes bounds a request's header block (net/http adds 4 KiB of
// slack): room for one 16 KiB token plus the browser's own headers.
const maxHeaderBytes = 64 << 10

// newUpgrader is the WebSocket upgrader of the public listener.
func newUpgrader() websocket.Upgrader {
	return websocket.Upgrader{
		HandshakeTimeout: readHeaderTimeout,
		// Client frames are small (typing frames are about 60 bytes, at
		// most ELLIPSIS_MAX_FRAME_BYTES): a 256-byte read buffer holds
		// several, and is 768 bytes less of every idle connection than
		// 1 KiB (gorilla reads a larger frame in pieces; a control frame's
		// 125 bytes and header fit).
		ReadBufferSize:  256,
		WriteBufferSize: 1024,
		// Write buffers are taken from the pool for one message and given
		// back after it is flushed: an idle connection holds none.
		WriteBufferPool: &sync.Pool{},
		// The Origin is checked before Upgrade, with a JSON 403.
		CheckOrigin: func(*http.Request) bool { return true },
		// Selected when offered; the ellipsis.bearer.<JWT> entry is never
		// echoed (docs/protocol.md, "Where the token travels").
		Subprotocols: []string{auth.ProtocolV1},
	}
}

// GatewayID returns the id used in connection ids ("<id>:<n>"): a random
// "gw-xxxxxxxx", or ELLIPSIS_GATEWAY_ID plus a per-boot suffix
// ("<configured>-xxxxxx"), unique to this process.
func (s *Server) GatewayID() string { return s.gatewayID }

// Start connects to NATS and Redis, binds the public and admin listeners
// and returns once they serve. NATS and Redis being down is not an error:
// the gateway serves anyway (answering unavailable, /readyz 503) and
// reconnects in the background. It fails when a listener cannot be bound,
// when called twice ([ErrStarted]) or after Shutdown ([ErrStopped]).
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case stateStarted:
		return ErrStarted
	case stateStopped:
		return ErrStopped
	}
	if s.cfg.Auth == config.AuthNone {
		s.log.Warn("authentication is OFF (ELLIPSIS_AUTH=none): any client can claim any user with ?user=; development only")
	}
	httpLn, adminLn, err := s.listen()
	if err != nil {
		return err
	}
	pres, err := backend.Connect(s.cfg.NATSServers(), s.cfg.NATSAuth(), s.names, s.cfg.SnapshotTimeout, s.log.Named("nats"), s.natsMet.Error)
	if err != nil {
		httpLn.Close()
		if adminLn != nil {
			adminLn.Close()
		}
		return fmt.Errorf("gateway: %w", err)
	}
	redisUp := s.connectRedis(ctx)
	if !pres.Connected() {
		s.log.Warn("nats not connected at start; retrying in the background", zap.String("urls", natsconn.RedactURLs(s.cfg.NATSURL)))
	}
	pres.EnableBatching(s.cfg.BatchWindow, s.batchMet)
	s.pres = pres
	s.natsMet.WatchConnection(pres.Connected)
	s.startHub(pres)
	if redisUp {
		s.awaitBackplane(ctx, s.cfg.PubSubPingTimeout)
	}
	pres.OnReconnect(s.hub.Resync)
	s.authz = s.sec.authorizer(s.cfg, pres, s.names.AuthzJoinSubject(), s.log.Named("authz"))
	s.serveListeners(httpLn, adminLn)
	s.state = stateStarted
	s.log.Info("gateway serving", zap.String("http_addr", s.HTTPAddr()), zap.String("admin_addr", s.AdminAddr()),
		zap.String("auth", s.cfg.Auth), zap.String("authz", s.cfg.Authz))
	return nil
}

// listen binds the public listener and the admin one (nil when
// cfg.AdminAddr is empty); on an error it has closed what it bound.
func (s *Server) listen() (httpLn, adminLn net.Listener, err error) {
	httpLn, err = net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: listen ELLIPSIS_HTTP_ADDR %s: %w", s.cfg.HTTPAddr, err)
	}
	if s.cfg.AdminAddr != "" {
		if adminLn, err = net.Listen("tcp", s.cfg.AdminAddr); err != nil {
			httpLn.Close()
			return nil, nil, fmt.Errorf("gateway: listen ELLIPSIS_ADMIN_ADDR %s: %w", s.cfg.AdminAddr, err)
		}
	}
	return httpLn, adminLn, nil
}

// connectRedis makes the Redis client and PINGs Redis within
// redisPingTimeout; it reports whether Redis answered (a Redis down is
// logged, not an error: joins answer unavailable until it is up).
func (s *Server) connectRedis(ctx context.Context) bool {
	s.rdb = s.redisOpt.NewClient()
	pctx, cancel := context.WithTimeout(ctx, redisPingTimeout)
	defer cancel()
	if err := s.rdb.Ping(pctx).Err(); err != nil {
		s.log.Warn("redis not reachable at start; serving anyway, joins answer unavailable until it is", zap.Error(err))
		return false
	}
	return true
}

// startHub starts the hub over the Redis Pub/Sub broker, with pres for
// the snapshots.
func (s *Server) startHub(pres *backend.NATS) {
	broker := pubsub.NewRedis(pubsub.RedisOptions{
		Client:       s.rdb,
		Sharded:      s.cfg.RedisPubSubMode() == redisconn.PubSubSharded,
		WatchMaster:  s.watchMaster(),
		PingInterval: s.cfg.PubSubPingInterval,
		PingTimeout:  s.cfg.PubSubPingTimeout,
		CheckChannel: aclCheckChannel(s.names),
		Metrics:      s.met,
		Logger:       s.log.Named("pubsub"),
	})
	s.hub = hub.New(hub.Options{
		Broker:          broker,
		Names:           s.names,
		Backend:         pres,
		ReadyTimeout:    s.cfg.SnapshotTimeout,
		PendingLimit:    s.cfg.OutboundQueue,
		SummaryMembers:  s.cfg.RoomSummaryMembers,
		SummaryInterval: s.cfg.RoomSummaryInterval,
		WatchInterval:   s.cfg.WatchInterval,
		Metrics:         s.met,
		Logger:          s.log.Named("hub"),
	})
	s.hub.Start()
}

// serveListeners serves the public listener, and the admin one unless
// nil.
func (s *Server) serveListeners(httpLn, adminLn net.Listener) {
	s.httpLn = httpLn
	s.httpSrv = newHTTPServer(s.publicHandler(), s.log)
	s.serve(s.httpSrv, httpLn)
	if adminLn != nil {
		s.adminLn = adminLn
		s.adminSrv = s.newAdmin()
		s.unregisterReady = s.adminSrv.RegisterReady(s.reg, config.ServiceGateway)
		s.adminSrv.Serve(adminLn)
	}
}

// awaitBackplane waits up to d (ELLIPSIS_PUBSUB_PING_TIMEOUT, the first
// PING's deadline) for the Pub/Sub links' first round trip, so that a
// gateway whose Redis answered the start-up PING is ready (/readyz 200)
// when Start returns. A link still down by then keeps /readyz 503 until
// it answers; Start does not fail for it.
func (s *Server) awaitBackplane(ctx context.Context, d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for !s.hub.Health().OK {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-poll.C:
		}
	}
}

// watchMaster is the hub's master watch on Redis Sentinel (a poll every
// sentinelPoll), nil on the other topologies.
func (s *Server) watchMaster() func(ctx context.Context, changed func(addr string)) {
	if s.redisOpt.Topology != redisconn.Sentinel {
		return nil
	}
	return func(ctx context.Context, changed func(addr string)) {
		s.redisOpt.WatchMaster(ctx, sentinelPoll, changed)
	}
}

func newHTTPServer(h http.Handler, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		// A token is at most 16 KiB (auth.MaxTokenBytes) in any one header;
		// larger header blocks get 431 before any handler runs.
		MaxHeaderBytes: maxHeaderBytes,
		ErrorLog:       zap.NewStdLog(log.Named("http")),
	}
}

func (s *Server) serve(srv *http.Server, ln net.Listener) {
	s.serveWG.Add(1)
	go func() {
		defer s.serveWG.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("listener failed", zap.String("addr", ln.Addr().String()), zap.Error(err))
		}
	}()
}

// HTTPAddr returns the bound public address (host:port), "" before Start.
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// AdminAddr returns the bound admin address, "" before Start or when the
// admin listener is disabled (empty cfg.AdminAddr).
func (s *Server) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// aclCheckChannel is the channel every Redis Pub/Sub connection of the
// gateway subscribes once to learn whether Redis accepts room channels
// (pubsub.RedisOptions.CheckChannel): "<prefix>chat:room:acl-check". It
// matches the room channels' ACL pattern ("&<prefix>chat:room:*") and is
// no room's channel (those end in a {hash tag}), so no client joins it
// and no worker publishes on it.
func aclCheckChannel(n names.Names) string {
	return strings.TrimSuffix(n.RoomChannel(""), names.RoomTag("")) + "acl-check"
}
