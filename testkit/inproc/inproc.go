// Package inproc starts Ellipsis presence workers and gateways inside one
// process, on one configuration: the dev stack of `make run` (package
// tools/devstack adds its NATS, Redis and demo chat service around it), the
// integration tests and benchmarks of module test, and the examples' tests.
//
// It imports the gateway and the worker, so it is a module of its own: the
// services' tests use package testkit (no service imports) instead, and an
// internal test of a service package can never import this one.
//
//	st, err := inproc.Start(ctx, inproc.Options{Config: cfg, Logger: log})
//	if err != nil { ... }
//	defer st.Shutdown(ctx)
package inproc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	gateway "github.com/ellipsis-chat/ellipsis/services/gateway"
	"github.com/ellipsis-chat/ellipsis/services/presence-worker/worker"
	"github.com/ellipsis-chat/ellipsis/shared/config"
)

// Options configures [Start].
type Options struct {
	// Config is what every worker and gateway runs with (validated by
	// their New).
	Config config.Config
	// Workers and Gateways are how many of each to start (0: none).
	Workers, Gateways int
	// GatewayIDSuffix, when set, gives gateway i the GatewayID
	// "gw<i>-<suffix>" (several gateways on one subject prefix need
	// distinct ids); otherwise Config.GatewayID is used.
	GatewayIDSuffix string
	// Logger receives the services' logs; with more than one worker
	// (gateway), each is named worker<i> (gateway<i>). Nil means none.
	Logger *zap.Logger
	// Registry, when set, receives every service's metrics, and the
	// workers run without an admin listener of their own: the gateways'
	// admin /metrics serves them all. Nil means each service its own.
	Registry *prometheus.Registry
	// DemoChat is handed to each gateway as gateway.Options.DemoChat.
	DemoChat http.Handler
}

// Stack is a running set of workers and gateways.
type Stack struct {
	Workers  []*worker.Server
	Gateways []*gateway.Server
}

// named is log named name<i> when there are more than one of them.
func named(log *zap.Logger, name string, i, n int) *zap.Logger {
	if n > 1 {
		return log.Named(fmt.Sprintf("%s%d", name, i))
	}
	return log
}

// Start starts the workers, then the gateways (a gateway's snapshots need a
// worker), and returns once every gateway serves. On error it shuts down
// what did start (within 10 s) and returns the error, which names the
// service and step that failed.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	s := &Stack{}
	fail := func(err error) (*Stack, error) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(sctx)
		return nil, err
	}
	nw, ng := opts.Workers, opts.Gateways
	for i := range nw {
		wcfg := opts.Config
		if opts.Registry != nil {
			wcfg.AdminAddr = "" // one admin listener: the gateway's serves the shared registry
		}
		w, err := worker.New(worker.Options{Config: wcfg, Logger: named(log, "worker", i, nw), Registry: opts.Registry})
		if err != nil {
			return fail(fmt.Errorf("presence worker: %w", err))
		}
		s.Workers = append(s.Workers, w)
		if err := w.Start(ctx); err != nil {
			return fail(fmt.Errorf("start the presence worker: %w", err))
		}
	}
	for i := range ng {
		gcfg := opts.Config
		if opts.GatewayIDSuffix != "" {
			gcfg.GatewayID = fmt.Sprintf("gw%d-%s", i, opts.GatewayIDSuffix)
		}
		g, err := gateway.New(gateway.Options{Config: gcfg, Logger: named(log, "gateway", i, ng), Registry: opts.Registry, DemoChat: opts.DemoChat})
		if err != nil {
			return fail(fmt.Errorf("gateway: %w", err))
		}
		s.Gateways = append(s.Gateways, g)
		if err := g.Start(ctx); err != nil {
			return fail(fmt.Errorf("start the gateway: %w", err))
		}
	}
	return s, nil
}

// StartT is [Start] for a test: 30 s at most, a failure ends the test with
// tb.Fatalf, and the stack is shut down (10 s at most) when the test ends.
func StartT(tb testing.TB, opts Options) *Stack {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		tb.Fatalf("stack: %v", err)
	}
	tb.Cleanup(func() { s.ShutdownWithin(10 * time.Second) })
	return s
}

// Shutdown shuts the gateways down first (their clients see their typists
// stop, their disconnect commands reach the workers), then the workers. It
// returns the errors joined; ctx bounds the graceful parts. Shutting down
// twice is safe: each service's Shutdown is.
func (s *Stack) Shutdown(ctx context.Context) error {
	var errs []error
	for _, g := range s.Gateways {
		if err := g.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("gateway shutdown: %w", err))
		}
	}
	for _, w := range s.Workers {
		if err := w.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("worker shutdown: %w", err))
		}
	}
	return errors.Join(errs...)
}

// ShutdownWithin is [Stack.Shutdown] within timeout, for a test that is
// ending (the errors are dropped).
func (s *Stack) ShutdownWithin(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = s.Shutdown(ctx)
}
