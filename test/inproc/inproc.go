// Package inproc starts Ellipsis presence workers and gateways inside the
// test process, each with its own copy of one configuration, for the
// integration tests and the benchmarks of this module.
package inproc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	gateway "github.com/ellipsis-chat/ellipsis/services/gateway"
	"github.com/ellipsis-chat/ellipsis/services/presence-worker/worker"
	"github.com/ellipsis-chat/ellipsis/shared/config"
)

// Services are started workers and gateways.
type Services struct {
	Workers  []*worker.Server
	Gateways []*gateway.Server
}

// Start starts nWorkers workers, then nGateways gateways, on cfg (gateway i
// gets the GatewayID "gw<i>-<idSuffix>"), logging to log under the names
// worker<i> and gateway<i>. Starting takes 30 s at most; a failure ends the
// test with tb.Fatalf, after shutting down what did start. The caller
// shuts them down with [Services.Shutdown].
func Start(tb testing.TB, cfg config.Config, nWorkers, nGateways int, idSuffix string, log *zap.Logger) *Services {
	tb.Helper()
	s := &Services{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fail := func(format string, a ...any) {
		tb.Helper()
		s.Shutdown(10 * time.Second)
		tb.Fatalf(format, a...)
	}
	for i := range nWorkers {
		w, err := worker.New(worker.Options{Config: cfg, Logger: log.Named(fmt.Sprintf("worker%d", i))})
		if err != nil {
			fail("worker.New: %v", err)
		}
		if err := w.Start(ctx); err != nil {
			fail("worker.Start: %v", err)
		}
		s.Workers = append(s.Workers, w)
	}
	for i := range nGateways {
		gcfg := cfg
		gcfg.GatewayID = fmt.Sprintf("gw%d-%s", i, idSuffix)
		g, err := gateway.New(gateway.Options{Config: gcfg, Logger: log.Named(fmt.Sprintf("gateway%d", i))})
		if err != nil {
			fail("gateway.New: %v", err)
		}
		if err := g.Start(ctx); err != nil {
			fail("gateway.Start: %v", err)
		}
		s.Gateways = append(s.Gateways, g)
	}
	return s
}

// Shutdown shuts the gateways down, then the workers, within timeout in
// all. Errors are ignored: the test is ending.
func (s *Services) Shutdown(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, g := range s.Gateways {
		_ = g.Shutdown(ctx)
	}
	for _, w := range s.Workers {
		_ = w.Shutdown(ctx)
	}
}
