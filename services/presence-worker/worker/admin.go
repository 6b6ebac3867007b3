package worker

import (
	"context"
	"errors"

	"github.com/ellipsis-chat/ellipsis/shared/admin"
	"github.com/ellipsis-chat/ellipsis/shared/config"
)

// startAdmin serves the admin listener bound in Start (package admin,
// docs/protocol.md "Admin listener"): /readyz is 200 when NATS is
// connected and Redis answers PING (within admin.DefaultProbeTimeout) and
// Start has finished; 503 naming "start" (and any check that fails) while
// Start has not finished, and 503 "shutdown" once Shutdown began.
func (s *Server) startAdmin() {
	s.admin = admin.New(admin.Options{
		Gatherer: s.reg,
		Checks: []admin.Check{
			{Name: "nats", Probe: func(context.Context) error {
				if !s.natsConn.Connected() { // never waits on nats.go's lock
					// The status carries the last NATS error ("RECONNECTING:
					// nats: authorization violation"); never a secret.
					return errors.New("not connected (" + s.natsConn.Status() + ")")
				}
				return nil
			}},
			{Name: "redis", Probe: func(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }},
		},
		Starting:     func() bool { return !s.ready.Load() && !s.stopping.Load() },
		ShuttingDown: s.stopping.Load,
		Logger:       s.log,
		Pprof:        s.cfg.Pprof,
	})
	s.unregisterReady = s.admin.RegisterReady(s.reg, config.ServiceWorker)
	s.admin.Serve(s.adminLn)
}
