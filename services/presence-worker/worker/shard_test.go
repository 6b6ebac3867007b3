package worker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
)

// Batching in the shards: the drain (fill, runShard) hands what is queued
// to Store.Apply in order (the store's side is in internal/store,
// batch_test.go).

// fakeStore records the batches a shard hands to Apply.
type fakeStore struct {
	store.Store // only Apply is called
	mu          sync.Mutex
	batches     [][]protocol.Command
	applied     chan int // receives each batch's length
}

func (f *fakeStore) Apply(_ context.Context, cmds []protocol.Command) ([]store.Outcome, []error) {
	f.mu.Lock()
	f.batches = append(f.batches, slices.Clone(cmds))
	f.mu.Unlock()
	f.applied <- len(cmds)
	outs := make([]store.Outcome, len(cmds))
	for i := range outs {
		outs[i] = store.OutcomeStarted
	}
	return outs, make([]error, len(cmds))
}

// shardServer is a Server with just what runShard needs, on a fakeStore.
func shardServer(t *testing.T, batch int) (*Server, *fakeStore) {
	m, err := newMetrics(prometheus.NewRegistry(), false)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeStore{applied: make(chan int, 4096)}
	return &Server{
		st: f, m: m, log: zap.NewNop(), rl: ratelog.New(zap.NewNop(), time.Minute),
		commandBatch: batch, quit: make(chan struct{}), runCtx: context.Background(),
	}, f
}

func cmdN(i int) protocol.Command {
	return start("r", "u", "", "c", uint64(i+1))
}

// fill takes what is queued, up to the cap in script calls, never waits,
// and never splits a command.
func TestFillTakesOnlyWhatIsQueued(t *testing.T) {
	for _, tc := range []struct {
		batch, queued int
		first         protocol.Command
		want          int
	}{
		{64, 0, cmdN(0), 1}, // idle: the command alone, at once
		{64, 3, cmdN(0), 4}, // what is there, no more
		{64, 100, cmdN(0), 64},
		{1, 10, cmdN(0), 1}, // cap 1: one command per round trip
		{4, 10, disconnect("u", "c", 1, "a", "b", "c"), 2},                // 3 calls + 1
		{4, 10, disconnect("u", "c", 1, "a", "b", "c", "d", "e", "f"), 1}, // whole, alone
	} {
		s, _ := shardServer(t, tc.batch)
		ch := make(chan protocol.Command, shardQueue)
		for i := range tc.queued {
			ch <- cmdN(i + 1)
		}
		done := make(chan []protocol.Command)
		go func() { done <- s.fill(ch, []protocol.Command{tc.first}, nil) }()
		select {
		case got := <-done:
			if len(got) != tc.want || len(ch) != tc.queued-(tc.want-1) {
				t.Errorf("cap %d, %d queued: took %d, left %d; want %d", tc.batch, tc.queued, len(got), len(ch), tc.want)
			}
		case <-time.After(waitLong):
			t.Fatalf("cap %d, %d queued: fill waited", tc.batch, tc.queued)
		}
	}
}

// A shard hands Apply everything queued behind the command it takes, in
// order, in batches of at most the cap; a command arriving at an idle
// shard is applied alone at once; on quit the queue is finished.
func TestShardBatchesWhatIsQueued(t *testing.T) {
	s, f := shardServer(t, 64)
	ch := make(chan protocol.Command, shardQueue)
	for i := range 100 {
		ch <- cmdN(i)
	}
	s.shardWG.Add(1)
	go s.runShard(ch)
	if n := <-f.applied; n != 64 {
		t.Fatalf("first batch of %d, want 64 (the cap)", n)
	}
	if n := <-f.applied; n != 36 {
		t.Fatalf("second batch of %d, want 36 (the rest)", n)
	}
	ch <- cmdN(100)
	select {
	case n := <-f.applied:
		if n != 1 {
			t.Fatalf("idle shard applied %d commands, want 1", n)
		}
	case <-time.After(waitLong):
		t.Fatal("idle shard waited for a batch to fill")
	}
	for i := range 10 {
		ch <- cmdN(101 + i)
	}
	close(s.quit)
	s.shardWG.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []protocol.Command
	for _, b := range f.batches {
		all = append(all, b...)
	}
	if len(all) != 111 {
		t.Fatalf("%d commands applied, want 111", len(all))
	}
	for i, c := range all {
		if c.Seq != uint64(i+1) {
			t.Fatalf("command %d applied with seq %d: order lost", i, c.Seq)
		}
	}
	if n := gatherSumB(s.m, store.OutcomeStarted.String()); n != 111 {
		t.Fatalf("commands_total %v, want 111 (one per command)", n)
	}
}

// The whole worker, one shard, batches queued: every connection's commands
// apply in order, every outcome is counted once.
func TestBatchedCommandsKeepConnectionOrder(t *testing.T) {
	storetest.ForEachKindAndBackend(t, func(t *testing.T, be storetest.Backend, kind string) {
		e := newEnv(t, be, func(c *config.Config) {
			c.Store = kind
			c.WorkerShards = 1
			c.TypingTTL = 20 * time.Second // nothing expires meanwhile, on a slow machine too
		})
		e.startWorker()
		var cmds []protocol.Command
		var want []string
		for i := range 100 {
			u, c := fmt.Sprintf("u%d", i), fmt.Sprintf("c%d", i)
			if i%2 == 0 { // start, refresh, stop, start again: typing at the end
				cmds = append(cmds, start("r", u, "", c, 1), start("r", u, "", c, 2), stop("r", u, c, 3), start("r", u, "", c, 4))
				want = append(want, u+"/")
			} else { // start, stop
				cmds = append(cmds, start("r", u, "", c, 1), stop("r", u, c, 2))
			}
		}
		e.send(cmds...)
		slices.Sort(want)
		if got := typists(e.snapshot("r")); !slices.Equal(got, want) {
			t.Fatalf("typing %v\nwant %v", got, want)
		}
		count := func(op, outcome string) float64 {
			return e.metric("ellipsis_worker_commands_total", map[string]string{"op": op, "outcome": outcome})
		}
		if n := count("start", store.OutcomeStarted.String()); n != 150 {
			t.Errorf("started %v, want 150", n)
		}
		if n := count("start", store.OutcomeThrottled.String()) + count("start", store.OutcomeRefreshed.String()); n != 50 {
			t.Errorf("refreshes %v, want 50", n)
		}
		if n := count("stop", store.OutcomeStopped.String()); n != 100 {
			t.Errorf("stopped %v, want 100", n)
		}
		if n := e.processed(); n != float64(len(cmds)) {
			t.Errorf("processed %v, want %d", n, len(cmds))
		}
	})
}

func disconnect(user, conn string, seq uint64, rooms ...string) protocol.Command {
	return protocol.Command{V: 1, Op: protocol.OpDisconnect, Rooms: rooms, User: user, Conn: conn, Seq: seq}
}
