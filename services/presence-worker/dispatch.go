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
// at a typical sub-millisecond script round trip.
const shardQueue = 1024

// startShards starts cfg.WorkerShards goroutines, each applying the
// commands of its queue one at a time. A connection's commands always hash
// to the same shard, so they are applied in the order this worker received
// them; across workers, seq restores order (see start.lua).
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
// still queued and returns.
func (s *Server) runShard(ch chan protocol.Command) {
	defer s.shardWG.Done()
	for {
		select {
		case cmd := <-ch:
			s.apply(s.runCtx, cmd)
		case <-s.quit:
			for {
				select {
				case cmd := <-ch:
					s.apply(s.runCtx, cmd)
				default:
					return
				}
			}
		}
	}
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
		s.m.commands.WithLabelValues(cmd.Op, OutcomeError).Inc()
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

// apply runs one command against Redis and counts its outcome in
// ellipsis_worker_commands_total. A disconnect counts once, with outcome
// stopped if any room published a stop, error if any room failed, stale if
// every room was stale, noop otherwise.
func (s *Server) apply(ctx context.Context, cmd protocol.Command) {
	var (
		outcome string
		err     error
	)
	switch cmd.Op {
	case protocol.OpStart:
		outcome, err = s.st.Start(ctx, cmd)
	case protocol.OpStop:
		outcome, err = s.st.Stop(ctx, cmd, protocol.ReasonStopped)
	case protocol.OpLeave:
		outcome, err = s.st.Stop(ctx, cmd, protocol.ReasonLeft)
	case protocol.OpDisconnect:
		var outs []string
		outs, err = s.st.Disconnect(ctx, cmd)
		outcome = disconnectOutcome(outs, err)
	default: // DecodeCommand admits no other op
		return
	}
	if err != nil {
		outcome = OutcomeError
		s.rl.Error("command-"+cmd.Op, "typing command failed",
			zap.String("op", cmd.Op), zap.String("room", cmd.Room), zap.Int("rooms", len(cmd.Rooms)),
			zap.String("user_id", cmd.User), zap.String("conn_id", cmd.Conn), zap.Error(err))
	}
	s.m.commands.WithLabelValues(cmd.Op, outcome).Inc()
}

func disconnectOutcome(outs []string, err error) string {
	if err != nil {
		return OutcomeError
	}
	stale := len(outs) > 0
	for _, o := range outs {
		if o == OutcomeStopped {
			return OutcomeStopped
		}
		stale = stale && o == OutcomeStale
	}
	if stale {
		return OutcomeStale
	}
	return OutcomeNoop
}
