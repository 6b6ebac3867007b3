package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Admin listener timeouts: probes and scrapes are small and fast.
const (
	adminReadHeaderTimeout = 5 * time.Second
	adminReadTimeout       = 10 * time.Second
	adminWriteTimeout      = 30 * time.Second // a scrape of a busy registry
	adminIdleTimeout       = 60 * time.Second
	// readyPingTimeout bounds the Redis PING behind /readyz.
	readyPingTimeout = time.Second
)

// startAdmin serves the admin listener bound in Start (docs/protocol.md,
// "Admin listener"):
//
//	GET /healthz  200 {"status":"ok"}: the process is alive
//	GET /readyz   200 {"status":"ok"} when NATS is connected, Redis answers
//	              PING and the worker is not shutting down; else 503
//	              {"status":"unavailable","down":{"nats":"RECONNECTING","redis":"<error>","worker":"shutting down"}}
//	GET /metrics  Prometheus exposition of Options.Registry
func (s *Server) startAdmin() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.handleReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	if s.cfg.Pprof {
		// ELLIPSIS_PPROF: Go's profiles (a CPU profile of up to the
		// admin server's write timeout, 30 s).
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	s.admin = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		ErrorLog:          zap.NewStdLog(s.log.Named("admin")),
	}
	srv, ln := s.admin, s.adminLn
	s.adminWG.Add(1)
	go func() {
		defer s.adminWG.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin listener failed", zap.Error(err))
		}
	}()
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	down := map[string]string{}
	if !s.ready.Load() {
		down["worker"] = "shutting down"
	}
	if !s.nc.IsConnected() {
		down["nats"] = s.nc.Status().String()
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyPingTimeout)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		down["redis"] = err.Error()
	}
	if len(down) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "down": down})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
