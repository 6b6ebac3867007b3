package store

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// BenchmarkRoomSize measures the Redis time of each typing command against
// the number of live entries in the room (the goal: a throttled refresh
// at most 10 µs, a state change at most 25 µs, at 10, 1,000 and 10,000
// live entries), on a private redis-server, from INFO commandstats
// (usec of EVALSHA and EVAL) read around each single operation, so the
// room stays at its size: every new user is stopped again.
//
//	go test -run '^$' -bench RoomSize -benchtime 300x -timeout 20m
//
//	op=refresh      a start of a visible user inside the throttle window (throttled)
//	op=first_start  a start of a user not yet typing (started)
//	op=stop         that user's stop (stopped)
//	op=sweep        one Sweep with one expired entry in the room (all its scripts)
//	op=refresh_run  throttled refreshes back to back over the room's users
//	op=toggle_run   start and stop of a new user, back to back
//	op=refresh_batch  the refreshes of refresh_run as the worker sends
//	                  them: with a seq, pipelined 64 to a round trip (Apply)
//	threads/op=...  the same room with as many thread typists again, spread
//	                over 50 threads (docs/protocol.md, "Threads and
//	                activities"): refresh, first_start and stop in a thread,
//	                and leave: a connection typing in the room and in
//	                DefaultMaxThreads threads leaves (one script)
//	churned=10000/op=stop  a stop of a user after 10,000
//	                  connections of theirs each started, stopped and
//	                  disconnected in the room (a client that reconnects
//	                  in a loop): constant, as at entries=10/op=stop
//
// The *_run and *_batch operations report run-srv-µs/op: the server's
// time over the whole run divided by the calls, with Redis kept busy by
// one client (usec_per_call over the run); the refreshes also report
// zadd/op, the share of them that moved the user's score. The others read
// INFO around each call.
//
// The metrics are srv-µs/op, the server's mean time per operation, and its
// median and 10th percentile (p50-, p10-srv-µs/op): on a loaded machine
// the server thread is descheduled now and then inside a call, which
// inflates the mean; the low percentile is closest to the cost on an idle
// core.
func BenchmarkRoomSize(b *testing.B) {
	p := startPrivateRedis(b)
	ctx := context.Background()
	b.Run("op=eval_return_1", func(b *testing.B) { benchEvalReturn1(ctx, b, p) })
	for _, size := range []int{10, 1000, 10000} {
		for _, kind := range storetest.Kinds {
			pfx := "entries=" + strconv.Itoa(size) + "/store=" + kind
			st, n := benchStore(b, kind, p.rdb)
			fillRoom(b, st, "big", size)
			r := &roomSizeRun{ctx: ctx, parent: b, p: p, kind: kind, size: size, st: st, n: n}
			b.Run(pfx+"/op=refresh", r.refresh)
			b.Run(pfx+"/op=refresh_run", r.refreshRun)
			b.Run(pfx+"/op=refresh_batch", r.refreshBatch)
			b.Run(pfx+"/op=toggle_run", r.toggleRun)
			b.Run(pfx+"/op=first_start", r.firstStart)
			b.Run(pfx+"/op=stop", r.stop)
			b.Run(pfx+"/op=sweep", r.sweep)
			fillThreads(b, st, "big", size)
			b.Run(pfx+"/threads/op=refresh", r.threadRefresh)
			b.Run(pfx+"/threads/op=first_start", r.threadFirstStart)
			b.Run(pfx+"/threads/op=stop", r.threadStop)
			b.Run(pfx+"/threads/op=leave", r.threadLeave)
			p.dropPrefix(b, n.KeyPrefix())
		}
	}
	for _, kind := range storetest.Kinds {
		b.Run("churned="+strconv.Itoa(benchChurn)+"/store="+kind+"/op=stop", func(b *testing.B) {
			st, n := benchStore(b, kind, p.rdb)
			defer p.dropPrefix(b, n.KeyPrefix())
			benchChurnedStop(b, st, func() int64 { return evalsUsec(b, p) })
		})
	}
}

// benchEvalReturn1 is op=eval_return_1, the machine's floor: an empty
// script, EVALSHA "return 1".
func benchEvalReturn1(ctx context.Context, b *testing.B, p *privateRedis) {
	script := redisScriptReturn1
	_ = script.Load(ctx, p.rdb).Err()
	var s samples
	for range b.N {
		before := evalsUsec(b, p)
		if err := script.Run(ctx, p.rdb, nil).Err(); err != nil {
			b.Fatal(err)
		}
		s.add(evalsUsec(b, p) - before)
	}
	s.report(b)
}

// roomSizeRun is one room of BenchmarkRoomSize: a store of kind holding
// size live entries in room "big"; its methods are the operations
// measured on it, each a sub-benchmark.
type roomSizeRun struct {
	ctx    context.Context
	parent *testing.B // the benchmark whose INFO reads fail it
	p      *privateRedis
	kind   string
	size   int
	st     Store
	n      names.Names
}

// evals is the server's total time in EVALSHA and EVAL so far (µs).
func (r *roomSizeRun) evals() int64 { return evalsUsec(r.parent, r.p) }

// measure runs f b.N times and reports the server time of each call.
func (r *roomSizeRun) measure(b *testing.B, f func(i int)) {
	var s samples
	for i := range b.N {
		before := r.evals()
		f(i)
		s.add(r.evals() - before)
	}
	s.report(b)
}

func (r *roomSizeRun) refresh(b *testing.B) {
	ok := mustOutcome(b, OutcomeThrottled)
	cmd := protocol.Command{V: 1, Op: "start", Room: "big", User: "user-1", Name: "Some Body", Conn: "gw:1"}
	r.measure(b, func(int) { ok(r.st.Start(r.ctx, cmd)) })
}

// refreshRun is the same throttled refresh back to back, spread over the
// room's users (user-i, round robin), one client: Redis stays busy, and
// the mean is usec_per_call as INFO commandstats gives it over a run,
// without the per-call INFO of op=refresh. A pass over every user first
// (not measured) makes each user's score recent, so that every size
// measures the same call: a throttled refresh moves the score (ZADD) only
// when it lags by more than the index lag (scripts/lib.lua, INDEX_LAG_MS:
// once a second per user), and without the pass the first refresh of each
// user would, which is half the calls at 10,000 entries and almost none at
// 10. zadd/op reports the share that still did.
func (r *roomSizeRun) refreshRun(b *testing.B) {
	ok := mustOutcome(b, OutcomeThrottled)
	refresh := func(i int) {
		u := strconv.Itoa(i % r.size)
		ok(r.st.Start(r.ctx, protocol.Command{V: 1, Op: "start", Room: "big", User: "user-" + u, Name: "Some Body", Conn: "gw:" + u}))
	}
	for i := range r.size {
		refresh(i)
	}
	run := startRun(b, r.p)
	for i := range b.N {
		refresh(i)
	}
	run.report(b)
}

// refreshBatch is the throttled refreshes of refresh_run (after the same
// pass), each with its connection's next seq, 64 per Apply: one pipeline
// per round trip, as a busy worker's shards send what they took off NATS
// (an idle worker sends each command alone, as refresh_run does). The seq
// adds a field to the call's writes: the q:<conn> field of the user hash.
func (r *roomSizeRun) refreshBatch(b *testing.B) {
	const batch = 64
	cmds := make([]protocol.Command, 0, batch)
	seq0 := uint64(runID.Add(1)) << 32 // above fillRoom's seq 1 and every earlier run's
	// flush applies the commands queued so far, if any.
	flush := func() {
		if len(cmds) == 0 {
			return
		}
		outs, errs := r.st.Apply(r.ctx, cmds)
		for i := range cmds {
			if errs[i] != nil || outs[i] != OutcomeThrottled {
				b.Fatalf("outcome %q, %v; want %q", outs[i], errs[i], OutcomeThrottled)
			}
		}
		cmds = cmds[:0]
	}
	refresh := func(i int, seq uint64) {
		u := strconv.Itoa(i % r.size)
		cmds = append(cmds, protocol.Command{V: 1, Op: "start", Room: "big", User: "user-" + u, Name: "Some Body", Conn: "gw:" + u, Seq: seq})
		if len(cmds) == batch {
			flush()
		}
	}
	for i := range r.size {
		refresh(i, seq0)
	}
	flush()
	run := startRun(b, r.p)
	for i := range b.N {
		refresh(i, seq0+1+uint64(i/r.size))
	}
	flush()
	run.report(b)
}

// toggleRun is a start then stop of a new user, back to back (two state
// changes per iteration): the mean per call over the run.
func (r *roomSizeRun) toggleRun(b *testing.B) {
	okStart, okStop := mustOutcome(b, OutcomeStarted), mustOutcome(b, OutcomeStopped)
	before := r.evals()
	for range b.N {
		i := strconv.FormatInt(runID.Add(1), 10)
		u, c := "tog-"+i, "gw:t"+i
		okStart(r.st.Start(r.ctx, protocol.Command{V: 1, Op: "start", Room: "big", User: u, Name: "New", Conn: c}))
		okStop(r.st.Stop(r.ctx, protocol.Command{V: 1, Op: "stop", Room: "big", User: u, Conn: c}, protocol.ReasonStopped))
	}
	b.ReportMetric(float64(r.evals()-before)/float64(2*b.N), "run-srv-µs/op")
}

func (r *roomSizeRun) firstStart(b *testing.B) {
	ok, okStop := mustOutcome(b, OutcomeStarted), mustOutcome(b, OutcomeStopped)
	var s samples
	for range b.N {
		i := strconv.FormatInt(runID.Add(1), 10)
		u, c := "new-"+i, "gw:n"+i
		before := r.evals()
		ok(r.st.Start(r.ctx, protocol.Command{V: 1, Op: "start", Room: "big", User: u, Name: "New", Conn: c}))
		s.add(r.evals() - before)
		okStop(r.st.Stop(r.ctx, protocol.Command{V: 1, Op: "stop", Room: "big", User: u, Conn: c}, protocol.ReasonStopped))
	}
	s.report(b)
}

func (r *roomSizeRun) stop(b *testing.B) {
	ok := mustOutcome(b, OutcomeStopped)
	var s samples
	for range b.N {
		i := strconv.FormatInt(runID.Add(1), 10)
		u := "stop-" + i
		_, _ = r.st.Start(r.ctx, protocol.Command{V: 1, Op: "start", Room: "big", User: u, Conn: "gw:s" + i})
		before := r.evals()
		ok(r.st.Stop(r.ctx, protocol.Command{V: 1, Op: "stop", Room: "big", User: u, Conn: "gw:s" + i}, protocol.ReasonStopped))
		s.add(r.evals() - before)
	}
	s.report(b)
}

func (r *roomSizeRun) sweep(b *testing.B) {
	m, _ := newMetrics(prometheus.NewRegistry(), false)
	short, err := New(Options{Kind: r.kind, PubSub: storetest.PubSub, Redis: r.p.rdb, Names: r.n, TTL: 20 * time.Millisecond, Throttle: 10 * time.Millisecond, Metrics: m, Log: zap.NewNop(), RateLog: testRateLog{zap.NewNop()}})
	if err != nil {
		b.Fatal(err)
	}
	_, _ = r.st.Sweep(r.ctx) // settle the index
	var s samples
	for range b.N {
		_, _ = short.Start(r.ctx, protocol.Command{V: 1, Op: "start", Room: "big", User: "exp-" + strconv.FormatInt(runID.Add(1), 10), Conn: "gw:e"})
		time.Sleep(30 * time.Millisecond)
		before := r.evals()
		res, err := r.st.Sweep(r.ctx)
		s.add(r.evals() - before)
		if err != nil || res.Stops != 1 {
			b.Fatalf("sweep: %+v, %v; want 1 stop", res, err)
		}
	}
	s.report(b)
}

// benchChurn is how many connections of one user op=stop/churned ran
// through the room before it measures.
const benchChurn = 10000

// churnCmds are one connection's life in room: a start (when typed), a
// stop, then its disconnect, seq 1, 2, 3 (as a gateway numbers them).
func churnCmds(room, user, conn string, typed bool) []protocol.Command {
	cmds := []protocol.Command{
		{V: 1, Op: "stop", Room: room, User: user, Conn: conn, Seq: 2},
		{V: 1, Op: "disconnect", Rooms: []string{room}, User: user, Conn: conn, Seq: 3},
	}
	if typed {
		cmds = append([]protocol.Command{{V: 1, Op: "start", Room: room, User: user, Name: "Churn", Conn: conn, Seq: 1}}, cmds...)
	}
	return cmds
}

// benchChurnedStop measures the Redis time of a typing_stop of a user
// after benchChurn connections of theirs started, stopped and
// disconnected in the room (64 connections per Apply), each iteration
// another such connection, its stop measured with evals.
func benchChurnedStop(b *testing.B, st Store, evals func() int64) {
	ctx := context.Background()
	id := strconv.FormatInt(runID.Add(1), 10)
	user := "churned-" + id
	var cmds []protocol.Command
	for i := range benchChurn {
		cmds = append(cmds, churnCmds("churn", user, "gw:c"+id+"-"+strconv.Itoa(i), true)...)
		if len(cmds) >= 3*64 || i == benchChurn-1 {
			for _, err := range second(st.Apply(ctx, cmds)) {
				if err != nil {
					b.Fatal(err)
				}
			}
			cmds = cmds[:0]
		}
	}
	// The user toggles faster than the event rate limit allows, so the
	// outcomes vary (started or coalesced, stopped, coalesced or noop):
	// only errors fail.
	ok := func(_ Outcome, err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	var s samples
	b.ResetTimer()
	for i := range b.N {
		c := churnCmds("churn", user, "gw:m"+id+"-"+strconv.Itoa(i), true)
		ok(st.Start(ctx, c[0]))
		before := evals()
		ok(st.Stop(ctx, c[1], protocol.ReasonStopped))
		s.add(evals() - before)
		if _, err := st.Disconnect(ctx, c[2]); err != nil {
			b.Fatal(err)
		}
	}
	s.report(b)
}

// second returns the second of two values (the errors of Apply).
func second[A, B any](_ A, v B) B { return v }

// fillRoom adds size typists (one connection each) to room, 256 starts per
// pipeline.
func fillRoom(b *testing.B, st Store, room string, size int) {
	b.Helper()
	var cmds []protocol.Command
	flush := func() {
		_, errs := st.Apply(context.Background(), cmds)
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		cmds = cmds[:0]
	}
	for i := range size {
		cmds = append(cmds, protocol.Command{V: 1, Op: "start", Room: room, User: "user-" + strconv.Itoa(i), Name: "Some Body", Conn: "gw:" + strconv.Itoa(i), Seq: 1})
		if len(cmds) == 256 {
			flush()
		}
	}
	if len(cmds) > 0 {
		flush()
	}
}

// runID makes the users of every run of a benchmark function distinct (the
// framework runs it more than once).
var runID atomic.Int64

// samples are per-operation server times in µs.
type samples []int64

func (s *samples) add(usec int64) { *s = append(*s, usec) }

func (s samples) report(b *testing.B) {
	if len(s) == 0 {
		return
	}
	var sum int64
	for _, v := range s {
		sum += v
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	b.ReportMetric(float64(sum)/float64(len(s)), "srv-µs/op")
	b.ReportMetric(float64(sorted[len(sorted)/2]), "p50-srv-µs/op")
	b.ReportMetric(float64(sorted[len(sorted)/10]), "p10-srv-µs/op")
}

var redisScriptReturn1 = redis.NewScript("return 1")

// runStats is INFO commandstats at the start of a *_run or *_batch
// operation.
type runStats struct {
	p      *privateRedis
	before map[string]cmdStat
}

func startRun(b *testing.B, p *privateRedis) runStats {
	return runStats{p: p, before: p.cmdStats(b)}
}

// report adds run-srv-µs/op, the server's time in EVALSHA and EVAL over the
// run per operation (usec_per_call over the run), and zadd/op, the ZADD
// calls the scripts made per operation.
func (r runStats) report(b *testing.B) {
	after := r.p.cmdStats(b)
	b.ReportMetric(float64(scriptUsec(after)-scriptUsec(r.before))/float64(b.N), "run-srv-µs/op")
	b.ReportMetric(float64(after["zadd"].calls-r.before["zadd"].calls)/float64(b.N), "zadd/op")
}

// evalsUsec is the server's total time in EVALSHA and EVAL so far (µs).
func evalsUsec(b *testing.B, p *privateRedis) int64 {
	return scriptUsec(p.cmdStats(b))
}

// scriptUsec is the time in EVALSHA and EVAL (µs) of INFO commandstats s.
func scriptUsec(s map[string]cmdStat) int64 {
	return s["evalsha"].usec + s["eval"].usec
}

// fillThreads adds size thread typists to room: tuser-i in thread
// th-(i mod 50), one connection each, 256 starts per pipeline.
func fillThreads(b *testing.B, st Store, room string, size int) {
	b.Helper()
	var cmds []protocol.Command
	for i := range size {
		cmds = append(cmds, protocol.Command{V: 1, Op: "start", Room: room, Thread: "th-" + strconv.Itoa(i%50), User: "tuser-" + strconv.Itoa(i), Name: "Some Body", Conn: "gw:t" + strconv.Itoa(i), Seq: 1})
		if len(cmds) == 256 || i == size-1 {
			if _, errs := st.Apply(context.Background(), cmds); errs[0] != nil {
				b.Fatal(errs[0])
			}
			cmds = cmds[:0]
		}
	}
}

func (r *roomSizeRun) threadRefresh(b *testing.B) {
	ok := mustOutcome(b, OutcomeThrottled)
	cmd := protocol.Command{V: 1, Op: "start", Room: "big", Thread: "th-1", User: "tuser-1", Name: "Some Body", Conn: "gw:t1"}
	_, _ = r.st.Start(r.ctx, cmd)
	r.measure(b, func(int) { ok(r.st.Start(r.ctx, cmd)) })
}

func (r *roomSizeRun) threadFirstStart(b *testing.B) {
	ok, okStop := mustOutcome(b, OutcomeStarted), mustOutcome(b, OutcomeStopped)
	var s samples
	for range b.N {
		i := strconv.FormatInt(runID.Add(1), 10)
		u, c := "tnew-"+i, "gw:tn"+i
		before := r.evals()
		ok(r.st.Start(r.ctx, protocol.Command{V: 1, Op: "start", Room: "big", Thread: "th-7", User: u, Name: "New", Conn: c}))
		s.add(r.evals() - before)
		okStop(r.st.Stop(r.ctx, protocol.Command{V: 1, Op: "stop", Room: "big", Thread: "th-7", User: u, Conn: c}, protocol.ReasonStopped))
	}
	s.report(b)
}

func (r *roomSizeRun) threadStop(b *testing.B) {
	ok := mustOutcome(b, OutcomeStopped)
	var s samples
	for range b.N {
		i := strconv.FormatInt(runID.Add(1), 10)
		u := "tstop-" + i
		_, _ = r.st.Start(r.ctx, protocol.Command{V: 1, Op: "start", Room: "big", Thread: "th-3", User: u, Conn: "gw:ts" + i})
		before := r.evals()
		ok(r.st.Stop(r.ctx, protocol.Command{V: 1, Op: "stop", Room: "big", Thread: "th-3", User: u, Conn: "gw:ts" + i}, protocol.ReasonStopped))
		s.add(r.evals() - before)
	}
	s.report(b)
}

// threadLeave is the leave of a connection typing in the room and in
// DefaultMaxThreads threads: one stop script ending six scopes.
func (r *roomSizeRun) threadLeave(b *testing.B) {
	ok := mustOutcome(b, OutcomeStopped)
	var s samples
	for range b.N {
		i := strconv.FormatInt(runID.Add(1), 10)
		u, c := "tleave-"+i, "gw:tl"+i
		cmds := []protocol.Command{{V: 1, Op: "start", Room: "big", User: u, Conn: c, Seq: 1}}
		for k := range DefaultMaxThreads {
			cmds = append(cmds, protocol.Command{V: 1, Op: "start", Room: "big", Thread: "th-" + strconv.Itoa(k), User: u, Conn: c, Seq: uint64(2 + k)})
		}
		if _, errs := r.st.Apply(r.ctx, cmds); errs[0] != nil {
			b.Fatal(errs[0])
		}
		before := r.evals()
		ok(r.st.Stop(r.ctx, protocol.Command{V: 1, Op: "leave", Room: "big", User: u, Conn: c, Seq: 100}, protocol.ReasonLeft))
		s.add(r.evals() - before)
	}
	s.report(b)
}
