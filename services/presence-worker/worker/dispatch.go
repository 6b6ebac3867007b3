package worker

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
)

// shardQueue is the least command queue of a shard, in commands, and
// commandQueue what all shards queue together when there are 16 or
// fewer: a shard queues max(shardQueue, commandQueue / shards)
// (queueFor). The NATS delivery goroutine never waits for a shard (see
// dispatch): a command its shard has no room for is dropped and counted,
// so a slow shard (a hot connection, one slow Redis master on Cluster)
// only ever costs its own commands, never the other shards'. 1024
// commands is about a second of work for one shard at a typical
// sub-millisecond script round trip, one command at a time, and 16384
// for one shard about a second of pipelines of DefaultCommandBatch calls;
// a shard that far behind is overloaded, and queueing more would only
// apply commands later than the typing they describe.
const (
	shardQueue   = 1024
	commandQueue = 16 * shardQueue
)

// queueFor is the command queue of each of n shards (see shardQueue).
func queueFor(n int) int { return max(shardQueue, commandQueue/n) }

// startRoom is the queue depth from which a shard of queue q refuses
// starts (outcome shed) while it still takes stops, leaves and
// disconnects, up to q (beyond: outcome overflow): 3/4 of q. A lost start
// costs at most one refresh interval (ELLIPSIS_TYPING_REFRESH, 4 s) of
// "typing" not shown, or nothing when the user is shown already; a lost
// stop leaves the typist shown until the entry expires
// (ELLIPSIS_TYPING_TTL, 5 s, plus the sweep), which users notice more, so
// an overloaded shard keeps its last quarter for the commands that hide
// someone.
func startRoom(q int) int { return q * 3 / 4 }

// Shards is the number of command shards of a worker: workerShards
// (ELLIPSIS_WORKER_SHARDS), or for 0 (the default) one, and 16 when
// topology (of ELLIPSIS_REDIS_URL) is Redis Cluster. A gateway sends
// the commands of a batch window as one NATS message
// (ELLIPSIS_BATCH_WINDOW); one shard sends them to Redis in one
// pipeline, while 16 would cut it into 16 of about one command each
// (docs/BENCHMARKS.md, "Batching window": at L2 with a 2 ms window, 16
// shards cost Redis 85 µs per script call and the worker 114 µs per
// change, one shard 49 µs and 56 µs). A busy shard still pipelines: what
// arrives while its pipeline is in flight goes in the next, up to
// DefaultCommandBatch calls. On Cluster a pipeline waits for its slowest
// master, so one shard would let one slow master hold every command;
// with 16 it holds only the shards whose pipelines reach it
// (test/integration, cluster_slow_master_test.go).
func Shards(workerShards int, topology redisconn.Topology) int {
	if workerShards > 0 {
		return workerShards
	}
	if topology == redisconn.Cluster {
		return 16
	}
	return 1
}

// Dispatch outcomes, in ellipsis_worker_commands_total beside the store's:
// the command was dropped before reaching Redis (see dispatch).
const (
	OutcomeShed     = store.OutcomeShed     // start refused: its shard's queue was past startRoom
	OutcomeOverflow = store.OutcomeOverflow // any command refused: its shard's queue was full
)

// DefaultCommandBatch bounds the script calls a shard sends to Redis in one
// pipeline (one round trip): after taking a command from its queue, a shard
// also takes the commands already waiting there, without waiting for more,
// until the batch holds this many calls (a start, stop or leave is one, a
// disconnect one per room, and a command is never split). An idle worker
// therefore sends each command at once, alone, and a busy one up to 64 per
// round trip. docs/BENCHMARKS.md measured caps of 1, 16, 64 and 256 end to
// end: 64 reaches the plateau (2 to 5 times the commands per second of
// one command per round trip, Redis then the limit) and 256 adds nothing
// but a longer wait: a command waits for its whole pipeline, 64 calls of
// 20 to 75 µs of Redis time each, a few milliseconds at most (Redis serves
// other clients between the pipeline's calls). It is not a setting: tests
// and benchmarks change it through Options.commandBatch.
const DefaultCommandBatch = 64

// startShards starts Shards(cfg) goroutines, each applying the
// commands of its queue in order, in batches (see DefaultCommandBatch). A
// connection's commands always hash to the same shard, so they are applied
// in the order this worker received them (a pipeline runs its calls in
// order); across workers, seq restores order (see start.lua).
func (s *Server) startShards() {
	var topology redisconn.Topology // a Server built by hand (tests): standalone
	if s.redisOpts != nil {
		topology = s.redisOpts.Topology
	}
	s.shards = make([]chan protocol.Command, Shards(s.cfg.WorkerShards, topology))
	q := queueFor(len(s.shards))
	for i := range s.shards {
		ch := make(chan protocol.Command, q)
		s.shards[i] = ch
		s.shardWG.Add(1)
		go s.runShard(ch)
	}
}

// runShard applies commands until quit is closed, then applies what is
// still queued and returns. It waits for the first command of a batch,
// then, with ELLIPSIS_WORKER_BATCH_WINDOW above 0, up to the window for more
// (fill); without one, fill takes only what is queued already.
func (s *Server) runShard(ch chan protocol.Command) {
	defer s.shardWG.Done()
	batch := make([]protocol.Command, 0, s.commandBatch)
	var window *time.Timer
	if s.cfg.WorkerBatchWindow > 0 {
		window = time.NewTimer(s.cfg.WorkerBatchWindow)
		window.Stop()
	}
	run := func(first protocol.Command) {
		batch = s.fill(ch, append(batch[:0], first), window)
		s.m.queued.Sub(float64(len(batch)))
		s.applyBatch(s.runCtx, batch)
		clear(batch) // drop the commands' strings until the next batch
	}
	for {
		select {
		case cmd := <-ch:
			run(cmd)
		case <-s.quit:
			window = nil // shutting down: no more waiting
			for {
				select {
				case cmd := <-ch:
					run(cmd)
				default:
					return
				}
			}
		}
	}
}

// fill appends to batch the commands waiting in ch until the batch holds
// s.commandBatch script calls (see DefaultCommandBatch) or ch is empty.
// With window (the shard's timer; nil: no window) it then waits, until
// ELLIPSIS_WORKER_BATCH_WINDOW after it was called, for more commands to arrive,
// so the commands of one window go to Redis in one pipeline; quit (the
// shutdown) ends the wait at once. A command therefore waits at most one
// window before its pipeline is sent, plus the pipeline's round trip.
func (s *Server) fill(ch <-chan protocol.Command, batch []protocol.Command, window *time.Timer) []protocol.Command {
	calls := 0
	for _, c := range batch {
		calls += callCount(c)
	}
	for calls < s.commandBatch {
		select {
		case cmd := <-ch:
			batch = append(batch, cmd)
			calls += callCount(cmd)
			continue
		default:
		}
		break // ch is empty
	}
	if window == nil || calls >= s.commandBatch {
		return batch
	}
	window.Reset(s.cfg.WorkerBatchWindow)
	defer window.Stop()
	for calls < s.commandBatch {
		select {
		case cmd := <-ch:
			batch = append(batch, cmd)
			calls += callCount(cmd)
		case <-window.C:
			return batch
		case <-s.quit:
			return batch
		}
	}
	return batch
}

// callCount is how many script calls apply cmd: one per room of a
// disconnect, one otherwise.
func callCount(cmd protocol.Command) int {
	if cmd.Op == protocol.OpDisconnect {
		return len(cmd.Rooms)
	}
	return 1
}

// dispatch queues cmd on its shard (see shardOf) and never waits: it runs
// on the command subscription's delivery goroutine, which a wait would
// stall for every shard. When the shard's queue holds startRoom of its
// size a start is dropped (outcome shed), and when it is full any
// command is dropped (outcome overflow); both are counted in
// ellipsis_worker_commands_total and logged (rate-limited) with the shard.
// This is nats.go's own rule for a subscription's pending queue (drop the
// newest, count, report a slow consumer), applied per shard, with room
// kept for the commands that hide a typist. Commands taken are applied in
// order per shard, so one connection's stay in order (dropping one of
// them does not reorder the others; seq makes a later one win). After
// Shutdown stopped the shards, a command is counted as an error.
func (s *Server) dispatch(cmd protocol.Command) {
	select {
	case <-s.quit:
		s.m.command(cmd.Op, store.OutcomeError)
		return
	default:
	}
	i := s.shardOf(cmd)
	ch := s.shards[i]
	if cmd.Op == protocol.OpStart && len(ch) >= startRoom(cap(ch)) {
		s.dropCommand(i, cmd, OutcomeShed)
		return
	}
	s.m.queued.Inc()
	select {
	case ch <- cmd:
	default:
		s.m.queued.Dec()
		s.dropCommand(i, cmd, OutcomeOverflow)
	}
}

// shardOf returns the index of cmd's shard in s.shards: FNV-1a of conn, or
// of (room, user) for a command without conn (a stop for every connection
// of a user).
func (s *Server) shardOf(cmd protocol.Command) int {
	var h uint32
	if cmd.Conn != "" {
		h = fnv1a(fnvOffset, cmd.Conn)
	} else {
		h = fnv1a(fnv1a(fnv1a(fnvOffset, cmd.Room), "\x00"), cmd.User)
	}
	return int(h % uint32(len(s.shards)))
}

// dropCommand counts and logs (at most once per ratelog.DefaultInterval for each outcome)
// a command dispatch refused.
func (s *Server) dropCommand(shard int, cmd protocol.Command, outcome store.Outcome) {
	s.m.command(cmd.Op, outcome)
	s.rl.Warn("dispatch-"+outcome.String(), "shard queue full: dropping commands (a dropped stop shows the typist until the entry expires)",
		zap.Int("shard", shard), zap.Stringer("outcome", outcome), zap.String("op", cmd.Op),
		zap.Int("queued", len(s.shards[shard])), zap.Int("queue_size", cap(s.shards[shard])))
}

const (
	fnvOffset = 2166136261
	fnvPrime  = 16777619
)

// fnv1a folds s into the 32-bit FNV-1a hash h, without allocating.
func fnv1a(h uint32, s string) uint32 {
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= fnvPrime
	}
	return h
}

// apply runs one command as a batch of its own (see applyBatch).
func (s *Server) apply(ctx context.Context, cmd protocol.Command) {
	s.applyBatch(ctx, []protocol.Command{cmd})
}

// applyBatch runs cmds against Redis, in order, with [Store.Apply], and
// counts each command's outcome in ellipsis_worker_commands_total. A
// disconnect counts once, with outcome stopped if any room published a
// stop, error if any room failed, stale if every room was stale, noop
// otherwise. A failed command is logged (rate-limited) on its own, as when
// commands were applied one at a time.
func (s *Server) applyBatch(ctx context.Context, cmds []protocol.Command) {
	outs, errs := s.st.Apply(ctx, cmds)
	for i, cmd := range cmds {
		outcome, err := outs[i], errs[i]
		if outcome == store.OutcomeNone && err == nil {
			continue // an op DecodeCommand does not admit
		}
		if err != nil {
			outcome = store.OutcomeError
			s.rl.Error("command-"+cmd.Op, "typing command failed",
				zap.String("op", cmd.Op), zap.String("room", cmd.Room), zap.Int("rooms", len(cmd.Rooms)),
				zap.String("user_id", cmd.User), zap.String("conn_id", cmd.Conn), zap.Error(err))
		}
		s.m.command(cmd.Op, outcome)
	}
}
