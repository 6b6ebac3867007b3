package worker

import (
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// A typing_start that the sweeper publishes for a start the event rate
// limit held back (the trailing edge, scripts/sweep.lua, settle) opens a
// refresh window like start.lua's: docs/protocol.md ("Throttle") says
// refreshes fan out "only when the user's refresh window has ended", so a
// refresh right after the trailing start fans out nothing within the
// throttle.
func TestRefreshRightAfterTrailingStartFansOutNothing(t *testing.T) {
	for _, kind := range []string{config.StoreZSet, config.StoreKeys} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, storetest.Backend{Name: "redis", PubSub: storetest.PubSub}, func(c *config.Config) { c.Store = kind })
			e.startWorker()
			s := e.subscribe("r")
			at := func(c protocol.Command) protocol.Command { c.TsMs = time.Now().UnixMilli(); return c }
			// Four transitions spend the bucket's burst of 4 ("Throttle").
			e.send(at(start("r", "u", "U", "c", 1)))
			s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
			e.send(at(stop("r", "u", "c", 2)))
			s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonStopped, waitLong)
			e.send(at(start("r", "u", "U", "c", 3)))
			third := s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
			e.send(at(stop("r", "u", "c", 4)))
			s.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonStopped, waitLong)
			// The fifth is held back; the sweeper publishes it.
			e.send(at(start("r", "u", "U", "c", 5)))
			trailing := s.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
			// A refresh once the third start's window is over, well inside
			// the throttle after the trailing start.
			time.Sleep(time.Until(time.UnixMilli(max(trailing.Ev.TsMs, third.Ev.TsMs+testThrottle.Milliseconds()) + 10)))
			refresh := at(start("r", "u", "U", "c", 6))
			if d := refresh.TsMs - trailing.Ev.TsMs; d >= testThrottle.Milliseconds()-50 {
				t.Fatalf("could not place the refresh inside the throttle: %d ms after the trailing start (a stalled machine, not the bug)", d)
			}
			e.send(refresh)
			if r, ok := s.Next(testThrottle); ok {
				t.Fatalf("a refresh %d ms after the sweeper's typing_start fanned out %s; want nothing within the throttle (%s)",
					refresh.TsMs-trailing.Ev.TsMs, r.Raw, testThrottle)
			}
		})
	}
}
