package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Start implements [Store]: cmd as a run of its own (applyRun), so it is
// indexed for the sweep like a batched start.
func (st *redisStore) Start(ctx context.Context, cmd protocol.Command) (Outcome, error) {
	cmd.Op = protocol.OpStart
	outs, errs := make([]Outcome, 1), make([]error, 1)
	st.applyRun(ctx, []protocol.Command{cmd}, outs, errs)
	return outs[0], errs[0]
}

// Stop implements [Store] with the stop script.
func (st *redisStore) Stop(ctx context.Context, cmd protocol.Command, reason string) (Outcome, error) {
	defer observeSince(st.m, scriptStop)()
	calls := []scriptCall{st.commandCall(st.lua.stop, stopArgs(cmd, cmd.Room, reason))}
	res, errs, retried := st.evalRetryTracked(ctx, scriptStop, calls)
	st.emitCommands(calls, []string{cmd.Room}, res, errs)
	out, err := st.callOutcome(res[0], errs[0])
	st.indexDue(ctx, []string{cmd.Room}, res, errs, retried)
	return out, err
}

// Disconnect implements [Store]: the stop script in every room of
// cmd.Rooms with reason disconnected, pipelined (the rooms live in
// different hash slots, so each is its own atomic call).
func (st *redisStore) Disconnect(ctx context.Context, cmd protocol.Command) ([]Outcome, error) {
	calls := make([]scriptCall, len(cmd.Rooms))
	for i, room := range cmd.Rooms {
		calls[i] = st.commandCall(st.lua.stop, stopArgs(cmd, room, protocol.ReasonDisconnected))
	}
	defer observeSince(st.m, scriptDisconnect)()
	res, errs, retried := st.evalRetryTracked(ctx, scriptDisconnect, calls)
	st.emitCommands(calls, cmd.Rooms, res, errs)
	st.indexDue(ctx, cmd.Rooms, res, errs, retried)
	return st.roomOutcomes(cmd.Rooms, res, errs)
}

// Apply implements [Store]. It cuts cmds into runs: each maximal run of
// consecutive ordered commands is one pipeline (applyRun), and each
// unordered command is a run of its own.
//
// Why unordered commands go alone. A pipeline's calls are retried one by
// one: only those that failed are sent again, after the others ran. When
// the reply of a call that did run is lost (a dropped connection), its
// second run must not count; and when a call fails before running while a
// later one of the same pipeline runs (BUSY or LOADING answered to a
// prefix of the pipeline), the retry runs it after the later one. With a
// seq both are harmless, the way seq already orders commands across
// workers: the second run, or the late one, is stale. Without a seq
// neither is: a start and a stop of one user, run again together, would
// publish typing_start and typing_stop twice, and a late start would
// outlive the stop that followed it. Sent alone, an unordered command is
// retried on its own, in a pipeline of one: a second run of it finds its own
// effect (a start is a throttled refresh, a stop a noop) and nothing sent
// after it.
func (st *redisStore) Apply(ctx context.Context, cmds []protocol.Command) ([]Outcome, []error) {
	outs := make([]Outcome, len(cmds))
	errs := make([]error, len(cmds))
	for i := 0; i < len(cmds); {
		j := i + 1
		if ordered(cmds[i]) {
			for j < len(cmds) && ordered(cmds[j]) {
				j++
			}
		}
		st.applyRun(ctx, cmds[i:j], outs[i:j], errs[i:j])
		i = j
	}
	return outs, errs
}

// ordered reports whether cmd's scripts record its seq: a start, a stop or
// leave with Conn, or a disconnect, with Seq above 0. Running such a call a
// second time, after it or a later command of its connection ran, is
// stale: it changes nothing and publishes nothing.
func ordered(cmd protocol.Command) bool { return cmd.Seq != 0 && cmd.Conn != "" }

// commandScript is the "script" label a command's calls are timed under in
// ellipsis_worker_script_duration_seconds: start, stop (stop and leave) or
// disconnect, as when each command was its own call.
func commandScript(op string) string {
	switch op {
	case protocol.OpStart:
		return scriptStart
	case protocol.OpDisconnect:
		return scriptDisconnect
	}
	return scriptStop
}

// calls builds the script calls of cmds (one per start, stop or leave, one
// per room of a disconnect) and the room of each.
func (st *redisStore) calls(cmds []protocol.Command) ([]scriptCall, []string) {
	calls := make([]scriptCall, 0, len(cmds))
	rooms := make([]string, 0, len(cmds))
	for _, cmd := range cmds {
		switch cmd.Op {
		case protocol.OpStart:
			calls = append(calls, st.commandCall(st.lua.start, st.startArgs(cmd)))
			rooms = append(rooms, cmd.Room)
		case protocol.OpStop:
			calls = append(calls, st.commandCall(st.lua.stop, stopArgs(cmd, cmd.Room, protocol.ReasonStopped)))
			rooms = append(rooms, cmd.Room)
		case protocol.OpLeave:
			calls = append(calls, st.commandCall(st.lua.stop, stopArgs(cmd, cmd.Room, protocol.ReasonLeft)))
			rooms = append(rooms, cmd.Room)
		case protocol.OpDisconnect:
			for _, room := range cmd.Rooms {
				calls = append(calls, st.commandCall(st.lua.stop, stopArgs(cmd, room, protocol.ReasonDisconnected)))
				rooms = append(rooms, room)
			}
		}
	}
	return calls, rooms
}

// applyRun sends the script calls of cmds as one pipeline with evalRetry,
// and fills outs and errs. Each command is timed in the duration histogram
// under its own script, with the time of the whole pipeline (its own
// call's round trip, retries included), so the histogram counts commands
// as it did when each was its own call. On Redis Cluster the rooms the
// scripts ask for are then indexed (indexDue).
func (st *redisStore) applyRun(ctx context.Context, cmds []protocol.Command, outs []Outcome, errs []error) {
	calls, rooms := st.calls(cmds)
	if len(calls) == 0 {
		return // only ops DecodeCommand does not admit
	}
	name := scriptBatch
	if len(cmds) == 1 {
		name = commandScript(cmds[0].Op)
	}
	began := time.Now()
	res, cerrs, retried := st.evalRetryTracked(ctx, name, calls)
	st.emitCommands(calls, rooms, res, cerrs)
	k := 0
	for i, cmd := range cmds {
		switch cmd.Op {
		case protocol.OpStart, protocol.OpStop, protocol.OpLeave:
			outs[i], errs[i] = st.callOutcome(res[k], cerrs[k])
			k++
		case protocol.OpDisconnect:
			n := len(cmd.Rooms)
			outcomes, err := st.roomOutcomes(cmd.Rooms, res[k:k+n], cerrs[k:k+n])
			outs[i], errs[i] = disconnectOutcome(outcomes, err), err
			k += n
		}
	}
	st.indexDue(ctx, rooms, res, cerrs, retried)
	took := time.Since(began).Seconds()
	for _, cmd := range cmds {
		switch cmd.Op {
		case protocol.OpStart, protocol.OpStop, protocol.OpLeave, protocol.OpDisconnect:
			st.m.ScriptDuration.WithLabelValues(commandScript(cmd.Op)).Observe(took)
		}
	}
}

// indexDue adds to their sweep buckets, on Redis Cluster (st.indexAfter),
// the rooms whose scripts returned a due time (a new earliest expiry or a
// coalesced transition), and, due now, the rooms whose call failed, was
// stale or was sent more than once (retried): its first
// run may have applied with the reply lost, and the reply of the second
// (a throttled refresh, a stale seq) carries no due time. An extra entry
// costs one empty sweep, a missing one loses an expired stop. A bucket lives in another hash slot
// than its rooms there, so this cannot be part of the scripts; doing it
// after them, not before, is what keeps a concurrent sweep from dropping
// the room (see scripts/due.lua). Elsewhere the scripts index the room
// themselves, in the same atomic step.
func (st *redisStore) indexDue(ctx context.Context, rooms []string, res []any, errs []error, retried []bool) {
	if !st.indexAfter {
		return
	}
	due := sweepIndex{}
	for i, room := range rooms {
		// The next sweep of a room indexed now finds nothing due and
		// reschedules it exactly.
		if out, _ := outcomeOf(res[i]); errs[i] != nil || out == OutcomeStale || retried[i] {
			due.add(room, time.Now().UnixMilli())
		} else if d := replyDue(res[i]); d > 0 {
			due.add(room, d)
		}
	}
	st.index(ctx, due)
}

// roomOutcomes reads the outcomes of a disconnect's stop calls, one per
// room, counting the events they published; err joins the rooms' errors.
func (st *redisStore) roomOutcomes(rooms []string, res []any, errs []error) ([]Outcome, error) {
	outs := make([]Outcome, len(rooms))
	var all []error
	for i, room := range rooms {
		out, err := st.callOutcome(res[i], errs[i])
		if err != nil {
			all = append(all, fmt.Errorf("room %q: %w", room, err))
		}
		outs[i] = out
	}
	return outs, errors.Join(all...)
}

// callOutcome reads the outcome of one start or stop script call from its
// reply and error, counting the event it published.
func (st *redisStore) callOutcome(res any, err error) (Outcome, error) {
	if err != nil {
		return OutcomeError, err
	}
	out, err := outcomeOf(res)
	if err != nil {
		return OutcomeError, err
	}
	if typ := publishedBy(out); typ != "" {
		st.m.EventsPublished.WithLabelValues(typ).Inc()
	}
	// A leave's or disconnect's stops in the room's threads (stop.lua).
	if a, _ := res.([]any); len(a) > 3 {
		if evs, _ := a[3].([]any); len(evs) > 0 {
			st.m.EventsPublished.WithLabelValues(protocol.TypeTypingStop).Add(float64(len(evs)))
		}
	}
	return out, nil
}

// index adds rooms to their sweep buckets: one ZADD LT per bucket, all in
// one pipeline, retried as a whole (ZADD LT is idempotent). LT moves a
// room's score only earlier, and always replaces a sweep claim, which
// scores above every due time (scripts/due.lua). A failure after retries
// is logged: the commands did apply, and if their rooms are not indexed
// the typists' stops are not pushed, but their entries still lapse, so
// snapshots and the clients' local expiry hide them.
func (st *engine) index(ctx context.Context, x sweepIndex) {
	if len(x) == 0 {
		return
	}
	err := st.call(ctx, scriptIndex, func(ctx context.Context) error {
		pipe := st.rdb.Pipeline()
		for b, rooms := range x {
			zs := make([]redis.Z, 0, len(rooms))
			for enc, due := range rooms {
				zs = append(zs, redis.Z{Score: float64(due), Member: enc})
			}
			pipe.ZAddLT(ctx, st.names.SweepKey(b), zs...)
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		st.rl.Error("sweep-index", "adding rooms to the sweep index failed; their typists' stops will not be pushed", zap.Error(err))
	}
}

// sweepIndex collects rooms to add to their sweep buckets (engine.index):
// bucket -> enc(room) -> earliest due unix ms.
type sweepIndex map[int]map[string]int64

// add records room due at unix ms due (the earliest of several wins).
func (x sweepIndex) add(room string, due int64) {
	b := names.SweepBucket(room)
	m := x[b]
	if m == nil {
		m = map[string]int64{}
		x[b] = m
	}
	enc := names.Enc(room)
	if cur, ok := m[enc]; !ok || due < cur {
		m[enc] = due
	}
}
