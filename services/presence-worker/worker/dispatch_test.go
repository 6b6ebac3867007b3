package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
)

// dispatchServer is a Server with just what dispatch and the shards need,
// on st, with nShards shard queues (not started).
func dispatchServer(t *testing.T, st store.Store, nShards int) (*Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.WorkerShards = nShards
	s := &Server{
		cfg: cfg, st: st, m: m, log: zap.NewNop(), rl: ratelog.New(zap.NewNop(), time.Minute),
		commandBatch: DefaultCommandBatch, quit: make(chan struct{}), runCtx: context.Background(),
	}
	t.Cleanup(func() {
		select {
		case <-s.quit:
		default:
			close(s.quit)
		}
		s.shardWG.Wait()
	})
	return s, reg
}

// slowShardStore holds every Apply of one shard until release is closed:
// forever (delay 0: a hung master) or delay per call (a slow master). It
// records, per connection, the seqs applied, in order, and the worst time
// from a command's dispatch (sentAt, by key) to its Apply on another shard.
type slowShardStore struct {
	store.Store // only Apply is called
	shardOf     func(protocol.Command) int
	slow        int
	delay       time.Duration
	release     chan struct{}
	keys        map[string]int // conn/seq -> index in sentAt; read-only once fed
	sentAt      []atomic.Int64 // unix ns at dispatch

	mu      sync.Mutex
	seqs    map[string][]uint64
	worst   time.Duration // on the other shards
	fast    atomic.Int64  // commands applied on the other shards
	slowRun atomic.Int64  // commands applied on the slow shard
}

func cmdKey(c protocol.Command) string { return c.Conn + "/" + strconv.FormatUint(c.Seq, 10) }

func (f *slowShardStore) Apply(_ context.Context, cmds []protocol.Command) ([]store.Outcome, []error) {
	slow := f.shardOf(cmds[0]) == f.slow
	if slow {
		if f.delay == 0 {
			<-f.release
		} else {
			select {
			case <-f.release:
			case <-time.After(f.delay):
			}
		}
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	for _, c := range cmds {
		f.seqs[c.Conn] = append(f.seqs[c.Conn], c.Seq)
		if !slow {
			if d := time.Duration(now - f.sentAt[f.keys[cmdKey(c)]].Load()); d > f.worst {
				f.worst = d
			}
		}
	}
	f.mu.Unlock()
	if slow {
		f.slowRun.Add(int64(len(cmds)))
	} else {
		f.fast.Add(int64(len(cmds)))
	}
	outs := make([]store.Outcome, len(cmds))
	for i, c := range cmds {
		outs[i] = store.OutcomeStarted
		if c.Op != protocol.OpStart {
			outs[i] = store.OutcomeStopped
		}
	}
	return outs, make([]error, len(cmds))
}

// typingCmd is the i-th (from 0) command of conn's typing: start, stop,
// start, ..., with seq i+1.
func typingCmd(conn string, i int) protocol.Command {
	if i%2 == 0 {
		return start("r", conn, "", conn, uint64(i+1))
	}
	return stop("r", conn, conn, uint64(i+1))
}

// A shard whose store calls hang, or take 500 ms each, never delays the
// other shards' commands: the delivery goroutine (onCommand, called here
// as nats.go calls it, from one goroutine) never waits, every other
// shard's command is applied while the slow one is still held, within a
// generous bound of its dispatch (a dispatch that waited for the slow
// shard would hold them for ever, or for the 20 s the slow shard needs for
// its queue), the slow shard's overflow is dropped and counted, and every
// connection's commands are applied in the order sent.
func TestSlowShardDoesNotDelayOthers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"hung", 0}, {"500ms", 500 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) { testSlowShard(t, tc.delay) })
	}
}

// The traffic of testSlowShard.
const (
	slowConns = 30
	slowCmds  = 100 // per connection: 3000 on the slow shard, far past its queue
	fastConns = 120
	fastCmds  = 20 // per connection: about 160 per other shard, well within theirs
)

func testSlowShard(t *testing.T, delay time.Duration) {
	const (
		shards = 16 // each queues shardQueue (queueFor)
		// bound on a command's dispatch-to-Apply time on a healthy shard:
		// generous for a loaded machine under -race, and far below what
		// waiting on the slow shard costs (for ever, or 2000 commands at
		// 64 per 500 ms: 15 s).
		bound = waitLong
	)
	f := &slowShardStore{delay: delay, release: make(chan struct{}), seqs: map[string][]uint64{}, keys: map[string]int{}}
	s, reg := dispatchServer(t, f, shards)
	s.startShards()
	f.shardOf = s.shardOf
	released := false
	defer func() {
		if !released {
			close(f.release)
		}
	}()

	f.slow = s.shardOf(typingCmd("conn-0", 0))
	sent, conns := slowShardConns(s, f)
	feedSlowShard(t, s, f, slowShardMsgs(t, f, conns, sent), bound)
	wantFast := int64(fastConns * fastCmds)
	deadline := time.Now().Add(bound)
	for f.fast.Load() < wantFast {
		if time.Now().After(deadline) {
			t.Fatalf("other shards applied %d of %d commands while one shard was slow", f.fast.Load(), wantFast)
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.mu.Lock()
	worst := f.worst
	f.mu.Unlock()
	t.Logf("slow shard %v: %d commands of the other shards applied, worst %v from dispatch; slow shard applied %d so far",
		map[bool]string{true: "hung", false: delay.String() + " per call"}[delay == 0], wantFast, worst.Round(time.Millisecond), f.slowRun.Load())
	if worst > bound {
		t.Fatalf("a command of a healthy shard waited %v (bound %v)", worst, bound)
	}
	if delay == 0 && f.slowRun.Load() != 0 {
		t.Fatalf("the hung shard applied %d commands", f.slowRun.Load())
	}

	drops := func(outcome string) int64 {
		return int64(storetest.GatherSum(t, reg, "ellipsis_worker_commands_total", map[string]string{"outcome": outcome}))
	}
	shed, overflow := drops(OutcomeShed.String()), drops(OutcomeOverflow.String())
	if shed == 0 || overflow == 0 {
		t.Fatalf("shed %d, overflow %d: the slow shard's %d commands should have filled its queue", shed, overflow, slowConns*slowCmds)
	}
	if d := storetest.GatherSum(t, reg, "ellipsis_worker_queued_commands", nil); d > shardQueue {
		t.Fatalf("queued_commands %v, more than one shard's queue (%d)", d, shardQueue)
	}

	close(f.release)
	released = true
	wantSlow := int64(slowConns*slowCmds) - shed - overflow
	deadline = time.Now().Add(bound)
	for f.slowRun.Load() < wantSlow {
		if time.Now().After(deadline) {
			t.Fatalf("slow shard applied %d, want %d (sent %d, shed %d, overflow %d)", f.slowRun.Load(), wantSlow, slowConns*slowCmds, shed, overflow)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := storetest.GatherSum(t, reg, "ellipsis_worker_queued_commands", nil); d != 0 {
		t.Errorf("queued_commands %v after every queue drained, want 0", d)
	}

	checkSlowShardOrder(t, f, conns, sent)
}

// slowShardConns picks slowConns connections on the slow shard and
// fastConns on the others; sent is how many commands each one sends.
func slowShardConns(s *Server, f *slowShardStore) (sent map[string]int, conns []string) {
	sent = map[string]int{}
	var slowList, fastList []string
	for i := 0; len(slowList) < slowConns || len(fastList) < fastConns; i++ {
		conn := fmt.Sprintf("conn-%d", i)
		if s.shardOf(typingCmd(conn, 0)) == f.slow {
			if len(slowList) < slowConns {
				slowList = append(slowList, conn)
				sent[conn] = slowCmds
			}
		} else if len(fastList) < fastConns {
			fastList = append(fastList, conn)
			sent[conn] = fastCmds
		}
	}
	return sent, append(append([]string(nil), slowList...), fastList...)
}

// slowShardMsgs encodes the commands of conns round robin, as interleaved
// traffic arrives, and records each one's index in f.keys.
func slowShardMsgs(t *testing.T, f *slowShardStore, conns []string, sent map[string]int) []*nats.Msg {
	t.Helper()
	var msgs []*nats.Msg
	for round := range slowCmds {
		for _, conn := range conns {
			if round < sent[conn] {
				c := typingCmd(conn, round)
				data, err := json.Marshal(c)
				if err != nil {
					t.Fatal(err)
				}
				f.keys[cmdKey(c)] = len(msgs)
				msgs = append(msgs, &nats.Msg{Subject: "cmd", Data: data})
			}
		}
	}
	return msgs
}

// feedSlowShard hands msgs to onCommand from one goroutine, as nats.go
// does, and fails if that goroutine takes longer than bound.
func feedSlowShard(t *testing.T, s *Server, f *slowShardStore, msgs []*nats.Msg, bound time.Duration) {
	t.Helper()
	f.sentAt = make([]atomic.Int64, len(msgs))
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		for i, m := range msgs {
			f.sentAt[i].Store(time.Now().UnixNano())
			s.onCommand(m)
		}
	}()
	select {
	case <-fed:
	case <-time.After(bound):
		t.Fatal("the delivery goroutine waited for the slow shard")
	}
}

// checkSlowShardOrder checks that every connection's commands were applied
// in the order sent, and all of them on the other shards.
func checkSlowShardOrder(t *testing.T, f *slowShardStore, conns []string, sent map[string]int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, conn := range conns {
		seqs := f.seqs[conn]
		for i := 1; i < len(seqs); i++ {
			if seqs[i] <= seqs[i-1] {
				t.Fatalf("%s: applied seqs out of order: %v", conn, seqs)
			}
		}
		if sent[conn] == fastCmds && len(seqs) != fastCmds {
			t.Errorf("%s (other shard): %d commands applied, want all %d", conn, len(seqs), fastCmds)
		}
	}
}

// The overflow rule, step by step on one queue nobody takes from: starts
// are taken up to shardStartRoom, then shed; stops, leaves and disconnects
// up to shardQueue, then dropped as overflow; the delivery goroutine never
// waits; after Shutdown a command counts as an error.
func TestDispatchOverflowRule(t *testing.T) {
	const shardStartRoom = shardQueue * 3 / 4 // startRoom(shardQueue)
	s, reg := dispatchServer(t, &fakeStore{}, 1)
	s.shards = []chan protocol.Command{make(chan protocol.Command, shardQueue)}
	count := func(op, outcome string) float64 {
		return storetest.GatherSum(t, reg, "ellipsis_worker_commands_total", map[string]string{"op": op, "outcome": outcome})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range shardStartRoom + 5 {
			s.dispatch(start("r", "u", "", "c", uint64(i+1)))
		}
		for i := range shardQueue - shardStartRoom {
			s.dispatch(stop("r", "u", "c", uint64(10000+i)))
		}
		s.dispatch(stop("r", "u", "c", 20000))
		s.dispatch(protocol.Command{V: 1, Op: protocol.OpLeave, Room: "r", User: "u", Conn: "c", Seq: 20001})
		s.dispatch(disconnect("u", "c", 20002, "r", "s"))
		s.dispatch(start("r", "u", "", "c", 20003))
	}()
	select {
	case <-done:
	case <-time.After(waitLong):
		t.Fatal("dispatch waited on a full queue")
	}
	if n := len(s.shards[0]); n != shardQueue {
		t.Fatalf("queue holds %d, want %d", n, shardQueue)
	}
	for _, c := range []struct {
		op, outcome string
		want        float64
	}{
		{protocol.OpStart, OutcomeShed.String(), 6},
		{protocol.OpStop, OutcomeOverflow.String(), 1},
		{protocol.OpLeave, OutcomeOverflow.String(), 1},
		{protocol.OpDisconnect, OutcomeOverflow.String(), 1},
		{protocol.OpStart, OutcomeOverflow.String(), 0},
	} {
		if got := count(c.op, c.outcome); got != c.want {
			t.Errorf("commands_total{op=%s,outcome=%s} = %v, want %v", c.op, c.outcome, got, c.want)
		}
	}
	if d := storetest.GatherSum(t, reg, "ellipsis_worker_queued_commands", nil); d != shardQueue {
		t.Errorf("queued_commands %v, want %d", d, shardQueue)
	}
	// The queue's order is the order taken: the starts, then the stops.
	first, last := <-s.shards[0], protocol.Command{}
	for len(s.shards[0]) > 0 {
		last = <-s.shards[0]
	}
	if first.Seq != 1 || last.Seq != uint64(10000+shardQueue-shardStartRoom-1) {
		t.Errorf("queue from seq %d to %d", first.Seq, last.Seq)
	}

	close(s.quit)
	s.dispatch(start("r", "u", "", "c", 30000))
	if got := count(protocol.OpStart, store.OutcomeError.String()); got != 1 {
		t.Errorf("after quit: commands_total{op=start,outcome=error} = %v, want 1", got)
	}
}

// nopStore applies nothing: the shards only take their queues.
type nopStore struct{ store.Store }

func (nopStore) Apply(_ context.Context, cmds []protocol.Command) ([]store.Outcome, []error) {
	outs := make([]store.Outcome, len(cmds))
	for i := range outs {
		outs[i] = store.OutcomeThrottled
	}
	return outs, make([]error, len(cmds))
}

// BenchmarkOnCommand measures the command subscription's delivery
// goroutine, which every command of a worker goes through: decode,
// validate, hash, queue on one of 16 shards (whose store does nothing).
// ns/op bounds the commands per second one worker can take off NATS.
func BenchmarkOnCommand(b *testing.B) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, false)
	if err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	s := &Server{
		cfg: cfg, st: nopStore{}, m: m, log: zap.NewNop(), rl: ratelog.New(zap.NewNop(), time.Minute),
		commandBatch: DefaultCommandBatch, quit: make(chan struct{}), runCtx: context.Background(),
	}
	s.startShards()
	msgs := make([]*nats.Msg, 1600)
	for i := range msgs {
		c := fmt.Sprintf("gw-0123456789:%d", i)
		data, _ := json.Marshal(start(fmt.Sprintf("room-%d", i%100), fmt.Sprintf("user-%d", i), "User Name", c, uint64(i+1)))
		msgs[i] = &nats.Msg{Subject: "cmd", Data: data}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s.onCommand(msgs[i%len(msgs)])
		if i%512 == 511 {
			for storetest.GatherSum(b, reg, "ellipsis_worker_queued_commands", nil) > 4096 {
				time.Sleep(50 * time.Microsecond) // let the shards catch up: measure dispatch, not drops
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cmds/s")
	close(s.quit)
	s.shardWG.Wait()
	if d := storetest.GatherSum(b, reg, "ellipsis_worker_commands_total", map[string]string{"outcome": OutcomeShed.String()}) +
		storetest.GatherSum(b, reg, "ellipsis_worker_commands_total", map[string]string{"outcome": OutcomeOverflow.String()}); d != 0 {
		b.Logf("%v commands dropped (shards slower than the loop)", d)
	}
}

// One shard by default (a gateway's batch stays one pipeline), 16 on
// Redis Cluster (a slow master holds only some), a setting
// above 0 as it is; every count queues at least shardQueue per shard and
// commandQueue in all up to 16 shards.
func TestShardsDefaultAndQueues(t *testing.T) {
	def := config.Default().WorkerShards
	if n := Shards(def, redisconn.Standalone); n != 1 {
		t.Fatalf("default shards = %d, want 1", n)
	}
	if n := Shards(def, redisconn.Sentinel); n != 1 {
		t.Fatalf("default shards on Sentinel = %d, want 1", n)
	}
	if n := Shards(def, redisconn.Cluster); n != 16 {
		t.Fatalf("default shards on Redis Cluster = %d, want 16", n)
	}
	if n := Shards(4, redisconn.Cluster); n != 4 {
		t.Fatalf("ELLIPSIS_WORKER_SHARDS=4 gave %d shards", n)
	}
	for n, want := range map[int]int{1: commandQueue, 4: commandQueue / 4, 16: shardQueue, 64: shardQueue} {
		if q := queueFor(n); q != want {
			t.Errorf("queueFor(%d) = %d, want %d", n, q, want)
		}
	}
	if r := startRoom(commandQueue); r != commandQueue*3/4 {
		t.Errorf("startRoom(%d) = %d", commandQueue, r)
	}
}
