package worker

import (
	"encoding/json"
	"flag"
	"sync"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The soak: a long randomized interleaving of the whole worker. Three
// real workers (two with one ELLIPSIS_TYPING_TTL, one with a longer one,
// as in a rollout) share one Redis, each with its sweeper, behind the NATS
// queue group; the test plays the gateways and the platform: churned
// connections of users with several devices start, stop, toggle faster
// than the event rate limit, leave, disconnect or vanish without a
// disconnect, the platform stops users without conn, and every command
// is published after its own random delay, so one connection's commands
// reach the workers out of order. The test subscribes to the rooms'
// channels as a gateway does and checks, against the model
// (soak_model_test.go), every event as it arrives and, at a quiescent
// point after every burst, the workers' snapshots (soak_check_test.go).
//
// `make test` runs it for soakDefaultDuration per store with seed 1. Run
// it longer, or with another seed (0 = from the clock, printed):
//
//	go test -race -run 'TestSoak$' -soak.duration=10m -soak.seed=7 .
//
// A failure prints the store, the seed, the step and the typist's last
// actions and events; the same seed replays the same actions (the clock,
// and so the workers' interleaving, is not replayed).
var (
	soakSeed     = flag.Int64("soak.seed", 1, "seed of the soak's actions (0: from the clock, printed)")
	soakDuration = flag.Duration("soak.duration", soakDefaultDuration, "how long the soak generates commands, per store")
)

const (
	soakDefaultDuration = 24 * time.Second
	// soakTTL and soakRolloutTTL are the workers' ttls. They exceed the
	// quiet time of a checkpoint (soakSettle and the barrier) by enough
	// that the entries of a burst's last second or so are still live when
	// it is checked.
	soakTTL        = 3 * time.Second
	soakRolloutTTL = 4 * time.Second
	soakThrottle   = testThrottle
	// soakDelayMax bounds the random delay between generating a command
	// and publishing it (the network and queues between a gateway and the
	// workers).
	soakDelayMax = 40 * time.Millisecond
	// soakSlack is the real-clock allowance added to every documented
	// bound: publish delays, the workers' queues and Pub/Sub delivery
	// under -race on a loaded 2-vCPU machine (measured: well under 100 ms;
	// the margin is 20 times that).
	soakSlack = 2 * time.Second
	// soakSettle is docs/protocol.md's bound ("Throttle") for a coalesced
	// transition: "the workers' sweeper publishes the user's true final
	// state ... within throttle + 1 s" of the last command.
	soakSettle = soakThrottle + time.Second
	// soakExpiryPush is docs/protocol.md's "expiry push: within ttl + 1 s"
	// ("Timing"), beyond the ttl.
	soakExpiryPush = time.Second
	// soakHiddenMargin: an entry must be live this long past a snapshot's
	// reply (or the check of the stream) for the check to require its
	// typist. The entry's end is a lower bound (generation time + the
	// shorter ttl: the worker applied it later, maybe with the longer
	// one), and Redis TIME and the test read one clock, so the margin
	// only covers rounding to the millisecond.
	soakHiddenMargin = 100 * time.Millisecond
	// soakStepsPerBurst commands steps between checkpoints (about 2 s);
	// steps are counted, not timed, so a seed replays the same bursts.
	soakStepsPerBurst = 150
	soakUsers         = 8
	soakRooms         = 3
)

func TestSoak(t *testing.T) {
	requireServices(t)
	seed := *soakSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	for _, kind := range []string{config.StoreZSet, config.StoreKeys} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			runSoak(t, kind, seed, *soakDuration)
		})
	}
}

// soakRun is one store's soak.
type soakRun struct {
	t      *testing.T
	e      *env
	kind   string
	seed   int64
	m      *soakModel
	s      *storetest.Stream
	step   int
	ttlMin int64 // ms
	ttlMax int64 // ms
	thr    int64 // throttle, ms

	sent     int     // commands generated
	required int     // typists the hidden-typist check required and found
	base     float64 // commands processed before the first
	inflight sync.WaitGroup
	pubErr   chan error // the first failed publish
}

func runSoak(t *testing.T, kind string, seed int64, d time.Duration) {
	e := newEnv(t, storetest.Backend{Name: "redis", PubSub: storetest.PubSub}, func(c *config.Config) {
		c.Store = kind
		c.TypingTTL = soakTTL
		c.TypingThrottle = soakThrottle
		c.TypingRefresh = time.Second
		c.TypingIdleStop = time.Second
	})
	e.startWorker()
	e.startWorker()
	e.startWorker(func(c *config.Config) { c.TypingTTL = soakRolloutTTL })
	m := newSoakModel(seed, soakUsers, soakRooms)
	r := &soakRun{
		t: t, e: e, kind: kind, seed: seed, m: m, s: e.subscribe(m.rooms...),
		ttlMin: soakTTL.Milliseconds(), ttlMax: soakRolloutTTL.Milliseconds(), thr: soakThrottle.Milliseconds(),
		base: e.processed(), pubErr: make(chan error, 1),
	}
	t.Logf("soak: store %s, seed %d, %s (replay: go test -race -run 'TestSoak/%s$' -soak.seed=%d -soak.duration=%s .)", kind, seed, d, kind, seed, d)
	began := time.Now()
	rounds := 0
	for time.Since(began) < d {
		r.burst()
		r.checkpoint()
		rounds++
	}
	r.finish()
	t.Logf("soak: store %s: %d rounds, %d steps, %d commands, %d live typists checked in snapshots, in %s", kind, rounds, r.step, r.sent, r.required, time.Since(began).Round(time.Millisecond))
	r.checkCoverage()
}

// burst runs soakStepsPerBurst steps: each generates commands (recorded in
// the model, published after a random delay), then checks the events that
// came in, then sleeps up to 25 ms.
func (r *soakRun) burst() {
	for range soakStepsPerBurst {
		r.step++
		now := time.Now().UnixMilli()
		cmds, ordered := r.m.next(now)
		for i, c := range cmds {
			r.m.record(r.step, c, now)
			delay := time.Duration(r.m.rnd.Int64N(int64(soakDelayMax) + 1))
			if ordered {
				// A toggle's commands leave in order, 3 ms apart, so that
				// most reach Redis in order and spend the rate limit.
				delay = time.Duration(i) * 3 * time.Millisecond
			}
			r.publish(c, delay)
		}
		r.pump()
		time.Sleep(time.Duration(r.m.rnd.IntN(25)) * time.Millisecond)
	}
}

// publish sends c on the command subject after delay, from a timer, so the
// commands of one connection may overtake each other.
func (r *soakRun) publish(c protocol.Command, delay time.Duration) {
	b, err := json.Marshal(c)
	if err != nil {
		r.t.Fatalf("encode %+v: %v", c, err)
	}
	r.sent++
	r.inflight.Add(1)
	time.AfterFunc(delay, func() {
		defer r.inflight.Done()
		if err := r.e.nc.Publish(r.e.names.CommandSubject(), b); err != nil {
			select {
			case r.pubErr <- err:
			default:
			}
		}
	})
}
