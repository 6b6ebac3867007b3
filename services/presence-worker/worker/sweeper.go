package worker

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// legacySweepInterval is how often a worker moves rooms from the sweep
// index of older workers (one key) into the buckets: often enough that an
// expiry indexed there during a rolling upgrade is pushed within about
// this, and costs one ZRANGE when the key is empty.
const legacySweepInterval = time.Second

// legacyMigrator is a store that moves the pre-bucket sweep index
// (store.Store.MigrateLegacySweep of store.New).
type legacyMigrator interface {
	MigrateLegacySweep(ctx context.Context) (int, error)
}

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
	legacy := time.NewTicker(legacySweepInterval)
	defer legacy.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-legacy.C:
			if m, ok := s.st.(legacyMigrator); ok {
				if n, err := m.MigrateLegacySweep(ctx); err != nil && ctx.Err() == nil {
					s.rl.Error("legacy-sweep", "moving the pre-bucket sweep index failed", zap.Error(err))
				} else if n > 0 {
					log.Info("moved rooms from the pre-bucket sweep index (older workers still running?)", zap.Int("rooms", n))
				}
			}
			continue
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
