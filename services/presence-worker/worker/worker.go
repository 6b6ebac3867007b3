// Package worker is the Ellipsis presence worker: it owns all typing state
// in Redis and turns typing commands from NATS into normalized room events
// on Redis Pub/Sub (docs/protocol.md, "NATS" and "Redis"; docs/ARCHITECTURE.md).
//
//	gateway ─NATS <prefix>.typing.v1.cmd (queue group presence-worker)─► worker ─Lua─► Redis
//	                                                                        └─PUBLISH chat:room:{enc(room)}─► gateways
//
// Each command is one atomic Lua call per room that reads Redis TIME,
// applies the state-aware throttle and the connection's seq, updates the
// room's sorted set and publishes the event, so any number of workers run
// side by side without locks or duplicate events. A busy shard sends the
// calls of the commands waiting in its queue as one pipeline (dispatch.go).
// The state sits behind [Store]: the sorted set per room (Config.Store
// "zset", the default) or the seed's pattern 1, one TTL key per typist
// listed with SCAN ("keys").
// A sweeper on every worker
// pushes typing_stop(expired) for entries whose time ran out, and the worker
// answers snapshot requests on <prefix>.typing.v1.snapshot.
//
// A [Server] is built with [New], started with [Server.Start] and stopped
// with [Server.Shutdown]; cmd/presence-worker, the dev stack and the tests
// all run it the same way.
package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/shared/admin"
	"github.com/ellipsis-chat/ellipsis/shared/buildinfo"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
)

// Errors returned by [Server.Start].
var (
	// ErrStarted is returned by Start on a server that was started already.
	ErrStarted = errors.New("worker: already started")
	// ErrClosed is returned by Start after Shutdown (or a failed Start).
	ErrClosed = errors.New("worker: server closed")
)

// Options configure a [Server].
type Options struct {
	// Config holds the settings; the caller loaded and validated it
	// (config.Load). The worker reads NATSURL, RedisURL, SubjectPrefix,
	// KeyPrefix, AdminAddr, TypingTTL, TypingThrottle, SweepInterval,
	// SnapshotTimeout, SnapshotMax, WorkerShards, Store and NATSEvents, and [New] checks those
	// again (an unknown Store is refused, naming ELLIPSIS_STORE).
	Config config.Config
	// Logger receives the worker's logs. Nil means zap.NewNop().
	Logger *zap.Logger
	// Registry receives the ellipsis_worker_* metrics and is served on the
	// admin listener's /metrics. Nil means a private registry (with the Go
	// and process collectors). A shared registry may hold the metrics of
	// another worker already: they are then shared, not duplicated.
	Registry *prometheus.Registry

	// commandBatch bounds the script calls of one shard's pipeline; zero
	// means DefaultCommandBatch. Tests and benchmarks only (1 applies one
	// command per round trip, no batching): not a setting.
	commandBatch int
	// sweepInterval, when positive, replaces Config.SweepInterval beyond
	// the setting's range (at most 500 ms): tests that must find expired
	// entries unswept only.
	sweepInterval time.Duration
}

type serverState int

const (
	stateNew serverState = iota
	stateRunning
	stateStopping
	stateClosed
)

// Server is one presence worker. Its methods are safe for concurrent use.
type Server struct {
	cfg       config.Config
	log       *zap.Logger
	reg       *prometheus.Registry
	m         *metrics
	rl        *ratelog.Logger
	names     names.Names
	redisOpts *redisconn.Options

	mu    sync.Mutex // guards state and the fields set by Start
	state serverState
	done  chan struct{} // closed when Shutdown finished

	ready    atomic.Bool // true between a successful Start and Shutdown
	stopping atomic.Bool // set when Shutdown begins

	rdb redis.UniversalClient
	st  store.Store
	nc  *nats.Conn // natsConn.NC
	// subs are the command and snapshot subscriptions, drained first
	// by Shutdown (drainSubs).
	subs []*nats.Subscription
	// natsConn is the connection (natsconn.Connect); its Closed channel
	// is closed by the NATS ClosedHandler.
	natsConn *natsconn.Conn
	// events publishes room events on NATS; nil unless
	// Config.NATSEvents (natsevents.go).
	events *natsEvents

	// activities are the activities a start may name: the standard set
	// and ELLIPSIS_ACTIVITIES; activityList the same, in order, for errors.
	activities   map[string]bool
	activityList []string

	// shards apply commands; see dispatch.go.
	shards       []chan protocol.Command
	commandBatch int           // script calls per pipeline, see DefaultCommandBatch
	quit         chan struct{} // closed once NATS is drained: shards finish their queue and exit
	shardWG      sync.WaitGroup
	// runCtx bounds every Redis call of the shards and snapshot handlers;
	// cancelled when Shutdown's deadline passes (abandon in-flight retries).
	runCtx    context.Context
	runCancel context.CancelFunc

	sweepCancel context.CancelFunc
	sweepWG     sync.WaitGroup

	admin *admin.Server
	// unregisterReady removes admin's ellipsis_ready from reg
	// (admin.Server.RegisterReady); Shutdown calls it when set.
	unregisterReady func()
	adminLn         net.Listener
	adminAddr       string
}

// New checks the settings the worker uses (see checkConfig) and builds a
// Server. It does no I/O. Errors name the setting by its environment
// variable.
func New(opts Options) (*Server, error) {
	cfg := opts.Config
	if err := checkConfig(&cfg); err != nil {
		return nil, err
	}
	ropts, err := redisconn.Parse(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("worker: ELLIPSIS_REDIS_URL: %w", err)
	}
	// One retry loop, ours (store.eval: bounded, with backoff, counted and
	// logged), instead of go-redis's own on top of it; one dial per try
	// (go-redis dials 5 times by default); per-call contexts bound each try
	// (redisAttemptTimeout). Cluster redirects (MOVED, ASK) are still
	// followed by go-redis.
	ropts.Tune(redisconn.Tuning{MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true, ClientName: natsClientName})

	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("worker")
	reg, private := opts.Registry, false
	if reg == nil {
		reg, private = prometheus.NewRegistry(), true
	}
	m, err := newMetrics(reg, private)
	if err != nil {
		return nil, fmt.Errorf("worker: metrics: %w", err)
	}
	// Workers sharing one registry (tests, the dev stack) share the gauge.
	if err := reg.Register(buildinfo.Collector(config.ServiceWorker)); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return nil, fmt.Errorf("worker: metrics: %w", err)
	}
	if err := store.CheckScripts(); err != nil {
		return nil, err
	}
	batch := opts.commandBatch
	if batch <= 0 {
		batch = DefaultCommandBatch
	}
	if opts.sweepInterval > 0 {
		cfg.SweepInterval = opts.sweepInterval // after checkConfig: tests only
	}
	acts := cfg.AcceptedActivities()
	actSet := make(map[string]bool, len(acts))
	for _, a := range acts {
		actSet[a] = true
	}
	return &Server{
		activities:   actSet,
		activityList: acts,
		cfg:          cfg,
		log:          log,
		reg:          reg,
		m:            m,
		rl:           ratelog.New(log, ratelog.DefaultInterval),
		names:        names.New(cfg.KeyPrefix, cfg.SubjectPrefix),
		redisOpts:    ropts,
		done:         make(chan struct{}),
		quit:         make(chan struct{}),

		commandBatch: batch,
	}, nil
}

// checkConfig validates the settings the worker reads: config.Validate
// for the worker (gateway-only settings such as the JWT secret are not
// checked; the table holds the whole milliseconds the Lua scripts need).
func checkConfig(c *config.Config) error {
	c.Service = config.ServiceWorker
	if err := c.Validate(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// Start connects to Redis and NATS, subscribes to the command and snapshot
// subjects (queue group presence-worker), starts the shards and the
// sweeper, binds the admin listener, and returns once serving. ctx bounds
// the start-up I/O only (script preload, subscription flush); the server
// runs until Shutdown.
//
// Neither backend has to be up: NATS connects with RetryOnFailedConnect
// and reconnects forever, Redis calls retry per command, and /readyz says
// what is down. Start fails when the admin address cannot be bound or the
// subscriptions cannot be made; a failed Start releases what it took and
// leaves the server closed. It returns [ErrStarted] or [ErrClosed] when
// called twice or after Shutdown.
func (s *Server) Start(ctx context.Context) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case stateRunning:
		return ErrStarted
	case stateStopping, stateClosed:
		return ErrClosed
	}
	defer func() {
		if err != nil {
			s.abortStart()
		}
	}()

	if s.cfg.AdminAddr != "" {
		if s.adminLn, err = net.Listen("tcp", s.cfg.AdminAddr); err != nil {
			return fmt.Errorf("worker: admin listener %s: %w", s.cfg.AdminAddr, err)
		}
		s.adminAddr = s.adminLn.Addr().String()
	}

	s.rdb = s.redisOpts.NewClient()
	if s.st, err = store.New(store.Options{Kind: s.cfg.Store, PubSub: s.cfg.RedisPubSubMode(), Redis: s.rdb, Names: s.names, TTL: s.cfg.TypingTTL, Throttle: s.cfg.TypingThrottle, MaxThreads: s.cfg.MaxThreadsPerUser, Metrics: &s.m.Metrics, Log: s.log.Named("store"), RateLog: s.rl, Events: s.newEvents()}); err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := s.st.Prepare(lctx); err != nil {
		s.log.Warn("redis not ready at start, scripts will load on first use", zap.Error(err))
	}
	cancel()

	s.runCtx, s.runCancel = context.WithCancel(context.Background())
	s.startShards()

	if err = s.connectNATS(ctx); err != nil {
		return err
	}
	s.startEvents()

	sctx, scancel := context.WithCancel(context.Background())
	s.sweepCancel = scancel
	s.sweepWG.Add(1)
	go s.sweepLoop(sctx)

	if s.adminLn != nil {
		s.startAdmin()
	}
	s.state = stateRunning
	s.ready.Store(true)
	s.log.Info("presence worker started",
		zap.String("command_subject", s.names.CommandSubject()),
		zap.String("snapshot_subject", s.names.SnapshotSubject()),
		zap.String("key_prefix", s.names.KeyPrefix()),
		zap.String("store", s.cfg.Store),
		zap.Int("shards", len(s.shards)),
		zap.Duration("ttl", s.cfg.TypingTTL),
		zap.Duration("throttle", s.cfg.TypingThrottle),
		zap.Duration("sweep_interval", s.cfg.SweepInterval),
		zap.String("admin_addr", s.adminAddr))
	return nil
}

// abortStart releases what a failed Start took. Called with s.mu held.
func (s *Server) abortStart() {
	s.stopping.Store(true)
	if s.nc != nil {
		s.nc.Close()
	}
	close(s.quit)
	s.shardWG.Wait()
	if s.runCancel != nil {
		s.runCancel()
	}
	if s.sweepCancel != nil {
		s.sweepCancel()
		s.sweepWG.Wait()
	}
	s.stopEvents()
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	if s.adminLn != nil {
		_ = s.adminLn.Close()
	}
	s.adminAddr = ""
	s.state = stateClosed
	close(s.done)
}

// AdminAddr returns the bound admin address (host:port, useful with port
// 0), or "" when Config.AdminAddr is empty or the server is not started.
func (s *Server) AdminAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.adminAddr
}

// Shutdown stops the worker gracefully (docs/protocol.md, "Outages and shutdown"):
//
//  1. /readyz turns 503;
//  2. the NATS subscriptions are drained: no new commands or snapshot
//     requests are taken, those already received are handed to the shards
//     or answered;
//  3. the shards finish the commands queued to them;
//  4. the sweeper stops, and the room events on NATS (ELLIPSIS_NATS_EVENTS)
//     still queued are published;
//  5. the NATS connection is drained (publishes flushed) and closes;
//  6. the Redis client closes, the admin server stops.
//
// When ctx ends first, the drain is cut short (the NATS connection is
// closed, in-flight Redis retries are abandoned) and ctx's error is
// returned. Shutdown is safe to call before Start (it then only marks the
// server closed) and more than once: later calls wait for the first to
// finish (or for their own ctx) and return nil.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	switch s.state {
	case stateNew:
		s.state = stateClosed
		close(s.done)
		s.mu.Unlock()
		return nil
	case stateStopping, stateClosed:
		s.mu.Unlock()
		select {
		case <-s.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.state = stateStopping
	s.mu.Unlock()

	err := s.shutdown(ctx)

	s.mu.Lock()
	s.state = stateClosed
	s.mu.Unlock()
	close(s.done)
	return err
}

func (s *Server) shutdown(ctx context.Context) error {
	s.stopping.Store(true)
	s.ready.Store(false)
	s.log.Info("presence worker shutting down")
	var errs []error

	// 2. Stop taking commands and snapshot requests: drain the
	// subscriptions; those already received are handed to the shards or
	// answered. The connection stays open for the events still to come.
	if err := s.drainSubs(ctx); err != nil {
		s.nc.Close()
		errs = append(errs, fmt.Errorf("worker: NATS drain: %w", err))
	}

	// 3. Shards finish what is queued. No handler sends any more (the drain
	// waited for them); if one still does after a cut-short drain, quit
	// makes it give up instead of blocking.
	close(s.quit)
	shardsDone := make(chan struct{})
	go func() { s.shardWG.Wait(); close(shardsDone) }()
	select {
	case <-shardsDone:
	case <-ctx.Done():
		s.runCancel() // abandon retries; the rest of the queues fail fast
		<-shardsDone
		if len(errs) == 0 {
			errs = append(errs, fmt.Errorf("worker: finishing commands: %w", ctx.Err()))
		}
	}
	s.runCancel()

	// 4. The sweeper stops; the room events of the shards and the sweeper
	// are published on the still open connection.
	s.sweepCancel()
	s.sweepWG.Wait()
	s.stopEvents()

	// 5. Drain the connection (no subscription left: flush the publishes)
	// and wait until it is closed.
	if err := s.nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		// Not connected (reconnecting): Drain has closed the connection.
		s.log.Warn("NATS drain impossible, connection closed", zap.Error(err))
	}
	select {
	case <-s.natsConn.Closed():
	case <-ctx.Done():
		s.nc.Close()
		if len(errs) == 0 {
			errs = append(errs, fmt.Errorf("worker: NATS flush: %w", ctx.Err()))
		}
	}

	// 6. Redis, admin.
	if err := s.rdb.Close(); err != nil {
		errs = append(errs, fmt.Errorf("worker: closing redis: %w", err))
	}
	if s.unregisterReady != nil {
		s.unregisterReady()
	}
	if s.admin != nil {
		if err := s.admin.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("worker: admin server: %w", err))
		}
	}
	s.log.Info("presence worker stopped")
	return errors.Join(errs...)
}
