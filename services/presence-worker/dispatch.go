package worker

import (
	"context"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// shardQueue is the command queue of each shard. When it is full, the NATS
// delivery goroutine waits in dispatch (commands are never dropped here),
// so the subscription's pending queue in nats.go grows instead; beyond its
// limits (cmdPendingMsgs, cmdPendingBytes) NATS drops messages and reports
// a slow consumer. 1024 commands is about a second of work for one shard
// at a typical sub-millisecond script round trip, one command at a time
// (a few batches when they queue up: see DefaultCommandBatch).
const shardQueue = 1024

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

// startShards starts cfg.WorkerShards goroutines, each applying the
// commands of its queue in order, in batches (see DefaultCommandBatch). A
// connection's commands always hash to the same shard, so they are applied
// in the order this worker received them (a pipeline runs its calls in
// order); across workers, seq restores order (see start.lua).
func (s *Server) startShards() {
	s.shards = make([]chan protocol.Command, s.cfg.WorkerShards)
	for i := range s.shards {
		ch := make(chan protocol.Command, shardQueue)
		s.shards[i] = ch
		s.shardWG.Add(1)
		go s.runShard(ch)
	}
}

// runShard applies commands until quit is closed, then applies what is
// still queued and returns. It waits for the first command of a batch
// only: fill takes what else is queued without waiting.
func (s *Server) runShard(ch chan protocol.Command) {
	defer s.shardWG.Done()
	batch := make([]protocol.Command, 0, s.commandBatch)
	run := func(first protocol.Command) {
		batch = s.fill(ch, append(batch[:0], first))
		s.applyBatch(s.runCtx, batch)
		clear(batch) // drop the commands' strings until the next batch
	}
	for {
		select {
		case cmd := <-ch:
			run(cmd)
		case <-s.quit:
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

// fill appends to batch the commands waiting in ch, never waiting for one,
// until the batch holds s.commandBatch script calls (see
// DefaultCommandBatch) or ch is empty.
func (s *Server) fill(ch <-chan protocol.Command, batch []protocol.Command) []protocol.Command {
	calls := 0
	for _, c := range batch {
		calls += callCount(c)
	}
	for calls < s.commandBatch {
		select {
		case cmd := <-ch:
			batch = append(batch, cmd)
			calls += callCount(cmd)
		default:
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

// dispatch queues cmd on its shard: hash(conn), or hash(room, user) for a
// command without conn (a stop for every connection of a user). It blocks
// while the queue is full, unless the worker is shutting down.
func (s *Server) dispatch(cmd protocol.Command) {
	var h uint32
	if cmd.Conn != "" {
		h = fnv1a(fnvOffset, cmd.Conn)
	} else {
		h = fnv1a(fnv1a(fnv1a(fnvOffset, cmd.Room), "\x00"), cmd.User)
	}
	select {
	case s.shards[h%uint32(len(s.shards))] <- cmd:
	case <-s.quit:
		s.m.commands.WithLabelValues(opLabel(cmd.Op), OutcomeError).Inc()
	}
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
		if outcome == "" && err == nil {
			continue // an op DecodeCommand does not admit
		}
		if err != nil {
			outcome = OutcomeError
			s.rl.Error("command-"+cmd.Op, "typing command failed",
				zap.String("op", cmd.Op), zap.String("room", cmd.Room), zap.Int("rooms", len(cmd.Rooms)),
				zap.String("user_id", cmd.User), zap.String("conn_id", cmd.Conn), zap.Error(err))
		}
		s.m.commands.WithLabelValues(opLabel(cmd.Op), outcome).Inc()
	}
}
