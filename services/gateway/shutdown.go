package gateway

// The connection registry and the graceful shutdown: lame duck, drain,
// then the backends (docs/protocol.md, "Outages and shutdown").

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/session"
)

// register adds a new connection unless the gateway is shutting down.
func (s *Server) register(c *session.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shuttingDown.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	s.connsWG.Add(1)
	return true
}

func (s *Server) unregister(c *session.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.connsWG.Done()
}

// Shutdown stops the gateway gracefully (docs/protocol.md, "Outages and
// shutdown"), in this order:
//
//  1. lame duck: at once, /readyz answers 503 and new WebSocket upgrades
//     are refused (503 with a JSON error), while the open connections are
//     served normally for cfg.LameDuck (at most half the time left
//     before ctx's deadline), so load balancers polling /readyz stop
//     sending clients before any is closed;
//  2. the public listener stops accepting and in-flight HTTP requests end;
//  3. connections are closed with 1001 spread over cfg.ShutdownDrain (at
//     most half the time left before ctx's deadline), so their clients do
//     not all reconnect elsewhere in the same instant; each publishes its
//     disconnect command right before its close frame, so receivers see
//     its typing_stop(disconnected) within a second of the close. When ctx
//     ends the rest are closed at once;
//  4. the hub's Redis subscription, NATS (drained) and Redis are closed, and
//     finally the admin listener.
//
// It returns ctx's error if ctx ended first, or the first listener error.
// Safe to call twice (the second call returns the first result) and before
// Start (then it only prevents Start).
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() {
		s.shutdownErr = s.shutdown(ctx)
		s.sec.close() // the JWKS refresh, whether or not the server started
	})
	return s.shutdownErr
}

func (s *Server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	prev := s.state
	s.state = stateStopped
	s.shuttingDown.Store(true) // under mu: register admits nothing after this
	open := len(s.conns)
	s.mu.Unlock()
	if prev != stateStarted {
		return nil
	}
	lameDuck := s.cfg.LameDuck
	if dl, ok := ctx.Deadline(); ok {
		lameDuck = min(lameDuck, time.Until(dl)/2)
	}
	s.log.Info("shutting down: lame duck, /readyz 503 and new connections refused",
		zap.Int("connections", open), zap.Duration("lame_duck", lameDuck), zap.Duration("drain", s.cfg.ShutdownDrain))
	sleepCtx(ctx, lameDuck)

	var errs []error
	httpDone := make(chan error, 1) // one result, read once below
	go func() { httpDone <- s.httpSrv.Shutdown(ctx) }()

	s.mu.Lock()
	conns := make([]*session.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	window := s.cfg.ShutdownDrain
	if dl, ok := ctx.Deadline(); ok {
		window = min(window, time.Until(dl)/2)
	}
	s.log.Info("closing connections", zap.Int("connections", len(conns)), zap.Duration("window", window))
	// Connection i is closed at window*i/n after the start: on schedule,
	// so timer overshoots do not add up over thousands of connections (a
	// late close is caught up at once).
	began := time.Now()
	for i, c := range conns {
		if i > 0 && window > 0 {
			sleepCtx(ctx, time.Until(began.Add(time.Duration(float64(window)*float64(i)/float64(len(conns))))))
		}
		c.Disconnect()
		c.Close(session.CloseGoingAway, "gateway shutting down")
	}
	connsDone := make(chan struct{})
	go func() { s.connsWG.Wait(); close(connsDone) }()
	select {
	case <-connsDone:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("gateway: waiting for connections: %w", ctx.Err()))
	}

	s.hub.Close()
	if err := s.pres.Close(ctx); err != nil { // drains: the last disconnect commands go out
		errs = append(errs, err)
	}
	if err := s.rdb.Close(); err != nil {
		errs = append(errs, fmt.Errorf("gateway: redis close: %w", err))
	}
	if err := <-httpDone; err != nil {
		errs = append(errs, fmt.Errorf("gateway: public listener: %w", err))
	}
	if s.unregisterReady != nil {
		s.unregisterReady()
	}
	if s.adminSrv != nil {
		if err := s.adminSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("gateway: admin listener: %w", err))
		}
	}
	s.serveWG.Wait()
	s.log.Info("shut down")
	return errors.Join(errs...)
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 || ctx.Err() != nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
