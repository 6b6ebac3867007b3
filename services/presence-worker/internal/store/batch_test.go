package store

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Batching: the shards' drain (fill, runShard), Store.Apply on both stores
// and both backends (same outcomes and events as one command at a time,
// one pipeline per run of ordered commands, retries), and the whole worker
// with batches queued.

// redisBusy is a server reply of the kind Redis sends to the commands of a
// pipeline that arrive while a script is busy (retryable, nothing ran).
type redisBusy string

func (e redisBusy) Error() string { return string(e) }
func (redisBusy) RedisError()     {}

// isScriptCmd tells the store's script commands from what go-redis sends
// on its own (HELLO and CLIENT SETINFO when it opens a connection).
func isScriptCmd(c redis.Cmder) bool {
	switch c.Name() {
	case "evalsha", "eval", "script":
		return true
	}
	return false
}

// recordHook records what a store's client sends (a pipeline's size, a
// single command's name; script commands only) and injects faults.
type recordHook struct {
	mu        sync.Mutex
	pipelines []int
	singles   []string
	// pipeFault, when set, replaces the next pipeline's call (once).
	pipeFault func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error
	// loseEveryOtherReply: every other single command runs, then its reply
	// is lost (io.ErrUnexpectedEOF): each call's first try runs unseen and
	// its retry answers.
	loseEveryOtherReply bool
	singleCalls         int
}

func (h *recordHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *recordHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isScriptCmd(cmd) {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		h.singles = append(h.singles, cmd.Name())
		h.singleCalls++
		lose := h.loseEveryOtherReply && h.singleCalls%2 == 1
		h.mu.Unlock()
		err := next(ctx, cmd)
		if lose && err == nil {
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		return err
	}
}

func (h *recordHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || !isScriptCmd(cmds[0]) {
			return next(ctx, cmds)
		}
		h.mu.Lock()
		h.pipelines = append(h.pipelines, len(cmds))
		f := h.pipeFault
		h.pipeFault = nil
		h.mu.Unlock()
		if f != nil {
			return f(ctx, cmds, next)
		}
		return next(ctx, cmds)
	}
}

// sent returns and resets what was recorded.
func (h *recordHook) sent() (pipelines []int, singles []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pipelines, singles = h.pipelines, h.singles
	h.pipelines, h.singles, h.singleCalls = nil, nil, 0
	return pipelines, singles
}

// batchEnv is a store of one kind on one backend with a recording client,
// a long ttl and throttle (no window ends during a test, on a slow machine
// too), and a plain client for subscriptions.
type batchEnv struct {
	t      *testing.T
	st     Store
	hook   *recordHook
	rdb    *redis.Client // plain: subscriptions, inspection
	reg    *prometheus.Registry
	names  names.Names
	pubsub string
}

func newBatchEnv(t *testing.T, be storetest.Backend, kind string) *batchEnv {
	t.Helper()
	requireServices(t)
	url, _ := storetest.RedisURLFor(t, be)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = -1 // as New sets it: one retry loop, the store's
	srdb := redis.NewClient(opts)
	hook := &recordHook{}
	srdb.AddHook(hook)
	rdb := redis.NewClient(opts)
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, false)
	if err != nil {
		t.Fatal(err)
	}
	n := names.New("t-"+testkit.RandHex(5)+":", "")
	st, err := New(Options{Kind: kind, PubSub: be.PubSub, Redis: srdb, Names: n, TTL: 10 * time.Second, Throttle: 5 * time.Second, Metrics: m, Log: testkit.Logger(), RateLog: testRateLog{zap.NewNop()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	hook.sent()
	t.Cleanup(func() {
		if !be.Mini {
			testkit.CleanupKeys(rdb, n.KeyPrefix())
		}
		srdb.Close()
		rdb.Close()
	})
	return &batchEnv{t: t, st: st, hook: hook, rdb: rdb, reg: reg, names: n, pubsub: be.PubSub}
}

// oneByOne applies cmds one at a time with Start, Stop and Disconnect, as
// the shards did before batching, and returns each command's outcome as
// Apply reports it.
func oneByOne(t *testing.T, st Store, cmds []protocol.Command) []Outcome {
	t.Helper()
	ctx := context.Background()
	var outs []Outcome
	for _, c := range cmds {
		var out Outcome
		var err error
		switch c.Op {
		case protocol.OpStart:
			out, err = st.Start(ctx, c)
		case protocol.OpStop:
			out, err = st.Stop(ctx, c, protocol.ReasonStopped)
		case protocol.OpLeave:
			out, err = st.Stop(ctx, c, protocol.ReasonLeft)
		case protocol.OpDisconnect:
			var rooms []Outcome
			rooms, err = st.Disconnect(ctx, c)
			out = disconnectOutcome(rooms, err)
		}
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		outs = append(outs, out)
	}
	return outs
}

// applied applies cmds with one Apply and fails on any error.
func applied(t *testing.T, st Store, cmds []protocol.Command) []Outcome {
	t.Helper()
	outs, errs := st.Apply(context.Background(), cmds)
	if len(outs) != len(cmds) || len(errs) != len(cmds) {
		t.Fatalf("Apply: %d outcomes, %d errors for %d commands", len(outs), len(errs), len(cmds))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Apply: command %d %+v: %v", i, cmds[i], err)
		}
	}
	return outs
}

// eventsByRoom collects the events arriving within d as "type user
// reason" per room (Pub/Sub keeps the order of one channel).
func eventsByRoom(s *storetest.Stream, d time.Duration) map[string][]string {
	out := map[string][]string{}
	for _, r := range s.Drain(d) {
		out[r.Ev.Room] = append(out[r.Ev.Room], strings.TrimSpace(r.Ev.Type+" "+r.Ev.User+" "+r.Ev.Reason))
	}
	return out
}

func leave(room, user, conn string, seq uint64) protocol.Command {
	return protocol.Command{V: 1, Op: protocol.OpLeave, Room: room, User: user, Conn: conn, Seq: seq}
}

func disconnect(user, conn string, seq uint64, rooms ...string) protocol.Command {
	return protocol.Command{V: 1, Op: protocol.OpDisconnect, Rooms: rooms, User: user, Conn: conn, Seq: seq}
}

// Apply gives every command the outcome, and publishes the events, that
// applying them one at a time gives; consecutive ordered commands share
// one pipeline, an unordered one (seq 0, or a stop without conn) is sent
// alone; the histogram counts each command under its own script.
func TestContractApplyMatchesOneByOne(t *testing.T) {
	storetest.ForEachKindAndBackend(t, func(t *testing.T, be storetest.Backend, kind string) {
		cmds := []protocol.Command{
			start("r1", "alice", "Alice", "phone", 1),
			start("r1", "alice", "Alice", "phone", 2),
			start("r1", "alice", "Alice", "laptop", 1),
			stop("r1", "alice", "phone", 3),
			start("r1", "bob", "", "b1", 1),
			start("r1", "bob", "", "b1", 1),
			leave("r1", "bob", "b1", 2),
			start("r2", "carol", "", "c1", 1),
			stop("r1", "alice", "", 0),           // unordered: every connection
			start("r2", "dave", "Dave", "d1", 0), // unordered
			start("r2", "dave", "Dave", "d1", 0), // unordered
			disconnect("carol", "c1", 2, "r2", "r3"),
			start("r3", "erin", "", "e1", 5),
			stop("r3", "erin", "e1", 4),
			stop("r2", "dave", "d1", 0), // unordered
		}
		want := []Outcome{
			OutcomeStarted, OutcomeThrottled, OutcomeThrottled, OutcomeNoop,
			OutcomeStarted, OutcomeStale, OutcomeStopped, OutcomeStarted,
			OutcomeStopped, OutcomeStarted, OutcomeThrottled,
			OutcomeStopped, OutcomeStarted, OutcomeStale,
			OutcomeStopped,
		}
		wantEvents := map[string][]string{
			"r1": {"typing_start alice", "typing_start bob", "typing_stop bob left", "typing_stop alice stopped"},
			"r2": {"typing_start carol", "typing_start dave", "typing_stop carol disconnected", "typing_stop dave stopped"},
			"r3": {"typing_start erin"},
		}

		seq := newBatchEnv(t, be, kind)
		s1 := storetest.SubscribeRooms(t, seq.rdb, seq.names, seq.pubsub, "r1", "r2", "r3")
		if got := oneByOne(t, seq.st, cmds); !slices.Equal(got, want) {
			t.Fatalf("one by one:\n got %v\nwant %v", got, want)
		}
		bat := newBatchEnv(t, be, kind)
		s2 := storetest.SubscribeRooms(t, bat.rdb, bat.names, bat.pubsub, "r1", "r2", "r3")
		if got := applied(t, bat.st, cmds); !slices.Equal(got, want) {
			t.Fatalf("Apply:\n got %v\nwant %v", got, want)
		}
		for name, s := range map[string]*storetest.Stream{"one by one": s1, "Apply": s2} {
			got := eventsByRoom(s, 300*time.Millisecond)
			for room, w := range wantEvents {
				if !slices.Equal(got[room], w) {
					t.Errorf("%s: events of %s:\n got %q\nwant %q", name, room, got[room], w)
				}
			}
		}
		// Runs: 8 ordered starts/stops; the 3 unordered ones alone; the
		// disconnect (2 rooms) and 2 more ordered; the last unordered alone.
		pipes, singles := bat.hook.sent()
		if !slices.Equal(pipes, []int{8, 4}) || !slices.Equal(singles, []string{"evalsha", "evalsha", "evalsha", "evalsha"}) {
			t.Errorf("Apply sent pipelines %v and single commands %v; want [8 4] and 4 evalsha", pipes, singles)
		}
		for _, script := range []string{scriptStart, scriptStop, scriptDisconnect} {
			l := map[string]string{"script": script}
			a := storetest.GatherSum(t, seq.reg, "ellipsis_worker_script_duration_seconds", l)
			b := storetest.GatherSum(t, bat.reg, "ellipsis_worker_script_duration_seconds", l)
			if a != b || a == 0 {
				t.Errorf("script_duration_seconds{script=%q}: %v observations one by one, %v batched", script, a, b)
			}
		}
		for _, typ := range []string{protocol.TypeTypingStart, protocol.TypeTypingStop} {
			l := map[string]string{"type": typ}
			if a, b := storetest.GatherSum(t, seq.reg, "ellipsis_worker_events_published_total", l), storetest.GatherSum(t, bat.reg, "ellipsis_worker_events_published_total", l); a != b {
				t.Errorf("events_published_total{type=%q}: %v one by one, %v batched", typ, a, b)
			}
		}
	})
}

// A pipeline whose replies are lost after it ran (a dropped connection) is
// retried from the first lost reply: with seq, every rerun is stale, so
// each event is published once.
func TestApplyRetryAfterLostRepliesPublishesOnce(t *testing.T) {
	storetest.ForEachKindAndBackend(t, func(t *testing.T, be storetest.Backend, kind string) {
		e := newBatchEnv(t, be, kind)
		s := storetest.SubscribeRooms(t, e.rdb, e.names, e.pubsub, "r1")
		e.hook.pipeFault = func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
			err := next(ctx, cmds)
			for _, c := range cmds[1:] {
				c.SetErr(io.ErrUnexpectedEOF)
			}
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		got := applied(t, e.st, []protocol.Command{
			start("r1", "u1", "", "c1", 1),
			start("r1", "u2", "", "c2", 1),
			stop("r1", "u1", "c1", 2),
			start("r1", "u3", "", "c3", 1),
		})
		// The three lost replies ran on the first try: their reruns are stale.
		if want := []Outcome{OutcomeStarted, OutcomeStale, OutcomeStale, OutcomeStale}; !slices.Equal(got, want) {
			t.Fatalf("outcomes %v, want %v", got, want)
		}
		ev := eventsByRoom(s, 300*time.Millisecond)["r1"]
		if want := []string{"typing_start u1", "typing_start u2", "typing_stop u1 stopped", "typing_start u3"}; !slices.Equal(ev, want) {
			t.Fatalf("events %q, want %q (once each)", ev, want)
		}
		if pipes, _ := e.hook.sent(); !slices.Equal(pipes, []int{4, 3}) {
			t.Fatalf("pipelines %v, want [4 3] (the 3 lost calls retried together)", pipes)
		}
		if n := storetest.GatherSum(t, e.reg, "ellipsis_worker_redis_errors_total", nil); n != 3 {
			t.Fatalf("redis_errors_total %v, want 3 (one per failed call)", n)
		}
	})
}

// Unordered commands are retried one at a time, each alone: the
// rerun of a start that ran is a throttled refresh, of a stop a noop, and
// nothing is published twice. (Pipelined together, the rerun of the pair
// would publish typing_start and typing_stop a second time.)
func TestApplyRetryOfUnorderedCommandsPublishesOnce(t *testing.T) {
	storetest.ForEachKindAndBackend(t, func(t *testing.T, be storetest.Backend, kind string) {
		e := newBatchEnv(t, be, kind)
		s := storetest.SubscribeRooms(t, e.rdb, e.names, e.pubsub, "r1")
		e.hook.mu.Lock()
		e.hook.loseEveryOtherReply = true
		e.hook.mu.Unlock()
		got := applied(t, e.st, []protocol.Command{
			start("r1", "u1", "", "c1", 0),
			stop("r1", "u1", "c1", 0),
			start("r1", "u2", "", "c2", 0),
			stop("r1", "u2", "", 0),
		})
		if want := []Outcome{OutcomeThrottled, OutcomeNoop, OutcomeThrottled, OutcomeNoop}; !slices.Equal(got, want) {
			t.Fatalf("outcomes %v, want %v (the reruns of applied commands)", got, want)
		}
		ev := eventsByRoom(s, 300*time.Millisecond)["r1"]
		if want := []string{"typing_start u1", "typing_stop u1 stopped", "typing_start u2", "typing_stop u2 stopped"}; !slices.Equal(ev, want) {
			t.Fatalf("events %q, want %q (once each)", ev, want)
		}
		if pipes, singles := e.hook.sent(); len(pipes) != 0 || len(singles) != 8 {
			t.Fatalf("pipelines %v, single commands %v; want none and 8 (2 tries each)", pipes, singles)
		}

		// The hazard: the same two calls in one pipeline, replies lost after
		// they ran, retried together, publish both events twice.
		e.hook.mu.Lock()
		e.hook.loseEveryOtherReply = false
		e.hook.mu.Unlock()
		e.hook.pipeFault = func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
			_ = next(ctx, cmds)
			for _, c := range cmds {
				c.SetErr(io.ErrUnexpectedEOF)
			}
			return io.ErrUnexpectedEOF
		}
		st := e.st.(*redisStore)
		_, errs := st.evalRetry(context.Background(), "test", []scriptCall{
			st.commandCall(st.lua.start, st.startArgs(start("r1", "u3", "", "c3", 0))),
			st.commandCall(st.lua.stop, stopArgs(stop("r1", "u3", "c3", 0), "r1", protocol.ReasonStopped)),
		})
		if errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		ev = eventsByRoom(s, 300*time.Millisecond)["r1"]
		if want := []string{"typing_start u3", "typing_stop u3 stopped", "typing_start u3", "typing_stop u3 stopped"}; !slices.Equal(ev, want) {
			t.Fatalf("pipelined unordered pair, retried: events %q, want %q", ev, want)
		}
	})
}

// A call that fails before running while a later call of its pipeline runs
// (BUSY or LOADING answered to a prefix of the pipeline) is retried after
// it: with seq the late one is stale, as a command overtaken across
// workers is, and the newer state stands.
func TestApplyRetryAfterLaterCallRanIsStale(t *testing.T) {
	storetest.ForEachKindAndBackend(t, func(t *testing.T, be storetest.Backend, kind string) {
		e := newBatchEnv(t, be, kind)
		s := storetest.SubscribeRooms(t, e.rdb, e.names, e.pubsub, "r1")
		e.hook.pipeFault = func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
			cmds[0].SetErr(redisBusy("BUSY Redis is busy running a script."))
			return next(ctx, cmds[1:])
		}
		got := applied(t, e.st, []protocol.Command{
			start("r1", "u1", "", "c1", 1),
			stop("r1", "u1", "c1", 2),
			start("r1", "u2", "", "c2", 1),
		})
		if want := []Outcome{OutcomeStale, OutcomeNoop, OutcomeStarted}; !slices.Equal(got, want) {
			t.Fatalf("outcomes %v, want %v", got, want)
		}
		if ev := eventsByRoom(s, 300*time.Millisecond)["r1"]; !slices.Equal(ev, []string{"typing_start u2"}) {
			t.Fatalf("events %q, want only u2's start", ev)
		}
	})
}

// Scripts missing from the server's cache (a restart, SCRIPT FLUSH) are
// loaded and the pipeline's calls rerun: miniredis only (never flush the
// shared Redis).
func TestApplyReloadsFlushedScripts(t *testing.T) {
	for _, kind := range storetest.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newBatchEnv(t, storetest.Backend{Name: "miniredis", Mini: true, PubSub: storetest.PubSub}, kind)
			if err := e.rdb.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			got := applied(t, e.st, []protocol.Command{
				start("r1", "u1", "", "c1", 1),
				start("r1", "u2", "", "c2", 1),
				stop("r1", "u1", "c1", 2),
			})
			if want := []Outcome{OutcomeStarted, OutcomeStarted, OutcomeStopped}; !slices.Equal(got, want) {
				t.Fatalf("outcomes %v, want %v", got, want)
			}
			if pipes, singles := e.hook.sent(); !slices.Equal(pipes, []int{3, 3}) || len(singles) != 2 {
				t.Fatalf("pipelines %v, single commands %v; want [3 3] and 2 SCRIPT LOADs", pipes, singles)
			}
		})
	}
}

// On Redis Cluster (the worker indexes rooms after the scripts), a start
// without seq whose first run applied but lost its reply is retried and
// answers throttled, without a due time: the room is still indexed, or its
// typist's expired stop would never be pushed.
func TestApplyLostUnorderedStartReplyStillIndexed(t *testing.T) {
	storetest.ForEachKindAndBackend(t, func(t *testing.T, be storetest.Backend, kind string) {
		e := newBatchEnv(t, be, kind)
		st := e.st.(*redisStore)
		st.indexAfter = true
		e.hook.mu.Lock()
		e.hook.loseEveryOtherReply = true
		e.hook.mu.Unlock()
		if got := applied(t, e.st, []protocol.Command{start("r1", "u1", "", "c1", 0)}); !slices.Equal(got, []Outcome{OutcomeThrottled}) {
			t.Fatalf("outcomes %v, want the rerun's throttled", got)
		}
		bucket := e.names.SweepKey(names.SweepBucket("r1"))
		if _, err := e.rdb.ZScore(context.Background(), bucket, names.Enc("r1")).Result(); err != nil {
			t.Fatalf("room not in its sweep bucket after a retried start: %v", err)
		}
	})
}
