// Package admin is the admin listener of both services (docs/protocol.md,
// "Admin listener"), on ELLIPSIS_ADMIN_ADDR:
//
//	GET /healthz  200 {"status":"ok"} while the process runs
//	GET /readyz   200 {"ready":true,"checks":{"nats":"ok","redis":"ok"}}
//	              503 {"ready":false,"down":["redis"],"checks":{"nats":"ok","redis":"<what is wrong>"}}
//	              503 {"ready":false,"down":["start","redis"],"checks":{"start":"starting",...}} while starting
//	              503 {"ready":false,"down":["shutdown"],"checks":{"shutdown":"shutting down"}} once shutdown began
//	GET /metrics  Prometheus text format of Options.Gatherer
//
// The /readyz body is [Readiness] on both services; the checks are the
// service's ([Check]).
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Listener timeouts: probes and scrapes are small and fast.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second // a scrape of a busy registry
	idleTimeout       = 60 * time.Second
	// MaxProfileSeconds bounds the "seconds" of a /debug/pprof/ request
	// (CPU profile, trace, delta profile), in seconds; the CPU profile's
	// default (no parameter) is 30.
	MaxProfileSeconds = 30
	// DefaultProbeTimeout bounds each readiness check (Options.ProbeTimeout).
	DefaultProbeTimeout = time.Second
)

// ShutdownCheck is the name under which a shutting-down process reports
// itself down.
const ShutdownCheck = "shutdown"

// StartCheck is the name under which a process that has not finished
// starting reports itself down (Options.Starting).
const StartCheck = "start"

// Check is one readiness check.
type Check struct {
	// Name is the dependency: "nats", "redis". It is the key in checks
	// and the word in down.
	Name string
	// Probe returns nil when the dependency is usable, else what is wrong
	// (its text is shown: it must hold no secret). It must honour ctx,
	// which carries Options.ProbeTimeout.
	Probe func(ctx context.Context) error
}

// Readiness is the body of /readyz on both services: Ready, the names of
// the failed checks in Down (in the order of Options.Checks; absent when
// ready), and for every check "ok" or what is wrong.
type Readiness struct {
	Ready  bool              `json:"ready"`
	Down   []string          `json:"down,omitempty"`
	Checks map[string]string `json:"checks"`
}

// Options configure a [Server].
type Options struct {
	// Gatherer is served on /metrics. Nil: no /metrics.
	Gatherer prometheus.Gatherer
	// Checks run, one after the other, on every /readyz.
	Checks []Check
	// ShuttingDown, when it reports true, makes /readyz answer 503 at
	// once (down ["shutdown"], with ShutdownReason) without running the
	// checks: the lame duck. Nil: never.
	ShuttingDown func() bool
	// Starting, when it reports true, makes /readyz answer 503 with
	// "start" first in down (text "starting") and the checks' results
	// after it: what is not ready yet. Nil: never.
	Starting func() bool
	// ShutdownReason is the "shutdown" check's text; default "shutting down".
	ShutdownReason string
	// ProbeTimeout bounds each check; zero means DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// Logger receives listener errors. Nil: none.
	Logger *zap.Logger
	// Pprof also serves net/http/pprof's profiles under /debug/pprof/
	// (ELLIPSIS_PPROF). A "seconds" parameter (CPU profile, trace, delta
	// profiles) above MaxProfileSeconds, or not a number, is refused with
	// 400: net/http/pprof extends the write deadline by it.
	Pprof bool
}

// Server is one admin listener.
type Server struct {
	opts Options
	log  *zap.Logger
	srv  *http.Server
	ln   net.Listener
	wg   sync.WaitGroup
}

// New returns a server; it does no I/O until [Server.Serve].
func New(opts Options) *Server {
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.ShutdownReason == "" {
		opts.ShutdownReason = "shutting down"
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{opts: opts, log: log}
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          zap.NewStdLog(log.Named("admin")),
	}
	return s
}

// Handler routes /healthz, /readyz, /metrics and, with Options.Pprof,
// /debug/pprof/.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rd := s.Ready(r.Context())
		code := http.StatusOK
		if !rd.Ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, rd)
	})
	if s.opts.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	}
	if s.opts.Pprof {
		mux.Handle("GET /debug/pprof/", boundSeconds(pprof.Index))
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.Handle("GET /debug/pprof/profile", boundSeconds(pprof.Profile))
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.Handle("GET /debug/pprof/trace", boundSeconds(pprof.Trace))
	}
	return mux
}

// boundSeconds refuses, with 400, a request whose "seconds" parameter is
// not a number or above MaxProfileSeconds; net/http/pprof would extend the
// connection's write deadline by it (a profile of any length).
func boundSeconds(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("seconds"); v != "" {
			sec, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(sec) || sec > MaxProfileSeconds {
				http.Error(w, "seconds: must be a number of at most "+strconv.Itoa(MaxProfileSeconds), http.StatusBadRequest)
				return
			}
		}
		h(w, r)
	})
}

// Ready runs the checks (or reports the shutdown) as /readyz does.
func (s *Server) Ready(ctx context.Context) Readiness {
	if s.opts.ShuttingDown != nil && s.opts.ShuttingDown() {
		return Readiness{Down: []string{ShutdownCheck}, Checks: map[string]string{ShutdownCheck: s.opts.ShutdownReason}}
	}
	rd := Readiness{Ready: true, Checks: make(map[string]string, len(s.opts.Checks))}
	for _, c := range s.opts.Checks {
		pctx, cancel := context.WithTimeout(ctx, s.opts.ProbeTimeout)
		err := c.Probe(pctx)
		cancel()
		if err == nil {
			rd.Checks[c.Name] = "ok"
			continue
		}
		rd.Ready = false
		rd.Down = append(rd.Down, c.Name)
		rd.Checks[c.Name] = err.Error()
	}
	if s.opts.Starting != nil && s.opts.Starting() {
		rd.Ready = false
		rd.Down = append([]string{StartCheck}, rd.Down...)
		rd.Checks[StartCheck] = "starting"
	}
	return rd
}

// ReadyCollector returns the gauge ellipsis_ready{service}: 1 when /readyz
// would answer 200 (every check passes, not starting, not shutting down),
// else 0. It runs the checks at scrape time ([Server.Ready], each bounded
// by Options.ProbeTimeout), so an alert can say an instance is out of its
// load balancer whatever the cause (deploy/monitoring, EllipsisNotReady).
func (s *Server) ReadyCollector(service string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "ellipsis_ready",
		Help:        "1 when this instance's /readyz answers 200 (every readiness check passes), else 0; evaluated at scrape time.",
		ConstLabels: prometheus.Labels{"service": service},
	}, func() float64 {
		if s.Ready(context.Background()).Ready {
			return 1
		}
		return 0
	})
}

// RegisterReady registers [Server.ReadyCollector] in reg and returns the
// func that unregisters it (call it at shutdown, so that a later instance
// on the same registry exports its own). When reg already holds an
// ellipsis_ready{service} (several instances on one registry: tests), the
// first one stays and the returned func does nothing.
func (s *Server) RegisterReady(reg prometheus.Registerer, service string) (unregister func()) {
	c := s.ReadyCollector(service)
	if reg.Register(c) != nil {
		return func() {}
	}
	return func() { reg.Unregister(c) }
}

// Serve serves ln in the background until [Server.Shutdown].
func (s *Server) Serve(ln net.Listener) {
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin listener failed", zap.String("addr", ln.Addr().String()), zap.Error(err))
		}
	}()
}

// Addr is the bound address, "" before Serve.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Shutdown closes the listener and waits, up to ctx, for requests in
// flight; past ctx it closes their connections and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	s.wg.Wait()
	return err
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
