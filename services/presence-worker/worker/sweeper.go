package worker

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// sweepLoop runs the expiry sweep every cfg.SweepInterval until ctx ends.
// Every worker sweeps: the per-room sweep script is atomic, so parallel
// sweeps of one room publish each expired typist's stop once. An entry that
// expires at T is pushed by T + SweepInterval + one round trip, well inside
// docs/protocol.md's ttl + 1 s ("Timing") with the default 250 ms interval.
func (s *Server) sweepLoop(ctx context.Context) {
	defer s.sweepWG.Done()
	log := s.log.Named("sweeper")
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := s.st.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			s.rl.Error("sweep", "expiry sweep failed", zap.Error(err))
		}
		if res.Stops > 0 {
			log.Debug("pushed expired stops", zap.Int("rooms", res.Rooms), zap.Int("stops", res.Stops), zap.Int("entries", res.Removed))
		}
	}
}
