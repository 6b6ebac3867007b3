package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// claim is one room a sweep round claimed in its bucket (scripts/due.lua).
type claim struct {
	bucket         int
	room           string
	encRoom, claim string
	lag            float64 // seconds between the room's due time and the claim
}

// Sweep implements [Store]: rounds of claim (due.lua, one call per bucket,
// pipelined), settle (sweep.lua per claimed room, pipelined) and reschedule
// (reschedule.lua, one call per bucket). Buckets that had a full batch get
// another round, up to sweepMaxBatches rounds per call. A room whose sweep
// failed keeps its claim and is swept again when the claim lease
// (sweepClaimLease) ends.
func (st *redisStore) Sweep(ctx context.Context) (SweepResult, error) {
	var total SweepResult
	buckets := make([]int, names.SweepBuckets)
	for b := range buckets {
		buckets[b] = b
	}
	for round := 0; round < sweepMaxBatches && len(buckets) > 0; round++ {
		claims, full, err := st.claimDue(ctx, buckets)
		if len(claims) > 0 {
			err = errors.Join(err, st.settle(ctx, claims, &total))
		}
		if err != nil {
			return total, err
		}
		buckets = full
	}
	return total, nil
}

// claimDue claims up to sweepBatch due rooms in each of buckets. It returns
// the claims, the buckets whose batch was full (more may be due), and the
// buckets' errors joined. Members not written by a worker are dropped.
func (st *redisStore) claimDue(ctx context.Context, buckets []int) ([]claim, []int, error) {
	calls := make([]scriptCall, len(buckets))
	for i, b := range buckets {
		calls[i] = scriptCall{st.lua.due, []string{st.names.SweepKey(b)}, []any{sweepBatch, sweepClaimLease.Milliseconds(), sweepClaimOffset}}
	}
	res, errs := st.eval(ctx, scriptDue, calls)
	var (
		claims []claim
		full   []int
		failed []error
	)
	for i, b := range buckets {
		if errs[i] != nil {
			failed = append(failed, errs[i])
			continue
		}
		a, ok := res[i].([]any)
		if !ok || len(a) < 1 || len(a)%3 != 1 {
			failed = append(failed, fmt.Errorf("worker: unexpected due reply %v", res[i]))
			continue
		}
		now, _ := a[0].(int64)
		if (len(a)-1)/3 >= sweepBatch {
			full = append(full, b)
		}
		for j := 1; j+2 < len(a); j += 3 {
			if c, ok := st.parseClaim(ctx, b, now, a[j:j+3]); ok {
				claims = append(claims, c)
			}
		}
	}
	return claims, full, errors.Join(failed...)
}

// parseClaim reads one {enc(room), claim, due} triple of a due reply; a
// member that is no valid room of bucket b is removed from the index.
func (st *redisStore) parseClaim(ctx context.Context, b int, now int64, v []any) (claim, bool) {
	encRoom, _ := v[0].(string)
	cl, _ := v[1].(string)
	dueS, _ := v[2].(string)
	room, err := names.Dec(encRoom)
	if err != nil || protocol.ValidateID("room", room) != nil || names.SweepBucket(room) != b {
		st.rl.Warn("sweep-bad-member", "dropping a malformed sweep index member", zap.String("member", encRoom), zap.Int("bucket", b))
		if err := st.rdb.ZRem(ctx, st.names.SweepKey(b), encRoom).Err(); err != nil {
			st.m.RedisErrors.Inc()
		}
		return claim{}, false
	}
	c := claim{bucket: b, room: room, encRoom: encRoom, claim: cl, lag: -1}
	if due, err := strconv.ParseFloat(dueS, 64); err == nil {
		c.lag = max(0, float64(now)-due) / 1000
	}
	return c, true
}

// settle runs the sweep script of every claimed room, adds its results to
// total, and reschedules the rooms it swept.
func (st *redisStore) settle(ctx context.Context, claims []claim, total *SweepResult) error {
	calls := make([]scriptCall, len(claims))
	for i, c := range claims {
		call, err := st.sweepCall(c.room)
		if err != nil {
			return err
		}
		calls[i] = call
		if c.lag >= 0 {
			st.m.SweepLag.Observe(c.lag)
		}
	}
	res, errs := st.eval(ctx, scriptSweep, calls)
	var failed []error
	resched := map[int][]any{}
	for i, c := range claims {
		if errs[i] != nil {
			failed = append(failed, errs[i])
			continue
		}
		v, ok := res[i].([]any)
		if !ok || len(v) < 5 {
			failed = append(failed, fmt.Errorf("worker: unexpected sweep reply %v", res[i]))
			continue
		}
		stops, _ := v[0].(int64)
		removed, _ := v[1].(int64)
		next, _ := v[3].(int64)
		starts, _ := v[4].(int64)
		total.Rooms++
		total.Stops += int(stops)
		total.Starts += int(starts)
		total.Removed += int(removed)
		st.m.ExpiredStops.Add(float64(stops))
		st.m.EventsPublished.WithLabelValues(protocol.TypeTypingStop).Add(float64(stops))
		st.m.EventsPublished.WithLabelValues(protocol.TypeTypingStart).Add(float64(starts))
		resched[c.bucket] = append(resched[c.bucket], c.encRoom, c.claim, next)
		st.emitSweep(c.room, v)
	}
	rcalls := make([]scriptCall, 0, len(resched))
	for b, args := range resched {
		rcalls = append(rcalls, scriptCall{st.lua.reschedule, []string{st.names.SweepKey(b)}, args})
	}
	if len(rcalls) > 0 {
		_, rerrs := st.eval(ctx, scriptReschedule, rcalls)
		failed = append(failed, rerrs...)
	}
	return errors.Join(failed...)
}

// sweepCall builds the sweep script call of room (scripts/sweep.lua).
func (st *redisStore) sweepCall(room string) (scriptCall, error) {
	head, tail, err := stopTemplate(room)
	if err != nil {
		return scriptCall{}, err
	}
	n := st.names
	keys := []string{n.UsersKey(room), n.PendingKey(room), n.RoomChannel(room), threadUsersKey(n, room)}
	args := []any{n.UserKeyPrefix(room), st.lay.typistPrefix(n, room), head, tail, st.throttleMs, st.keyPxMs, sweepRoomLimit, st.eventsFlag()}
	return scriptCall{st.lua.sweep, keys, args}, nil
}

// stopTemplate splits the typing_stop(expired) event of room around the
// user's JSON string: head ends with `"user":`, tail is
// `,"reason":"expired","ts_ms":`. The sweep script inserts the user it finds
// between them, so the event has exactly the shared codec's shape.
func stopTemplate(room string) (head, tail []byte, err error) {
	const mark = "\x01" // never in a valid id; marshals as "\u0001"
	p := protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: room, User: mark, Reason: protocol.ReasonExpired})
	i := bytes.Index(p, []byte(`"user":"\u0001"`))
	if i < 0 {
		return nil, nil, fmt.Errorf("worker: protocol.RoomEventPrefix has no user field: %s", p)
	}
	i += len(`"user":`)
	return p[:i], p[i+len(`"\u0001"`):], nil
}
