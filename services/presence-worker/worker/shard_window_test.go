package worker

import (
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// windowShard is a shard's server with ELLIPSIS_WORKER_BATCH_WINDOW set, and its
// timer as runShard makes it.
func windowShard(t *testing.T, batch int, window time.Duration) (*Server, *time.Timer) {
	s, _ := shardServer(t, batch)
	s.cfg.WorkerBatchWindow = window
	tm := time.NewTimer(window)
	tm.Stop()
	return s, tm
}

func fillAsync(s *Server, ch chan protocol.Command, first protocol.Command, tm *time.Timer) chan []protocol.Command {
	done := make(chan []protocol.Command, 1)
	go func() { done <- s.fill(ch, []protocol.Command{first}, tm) }()
	return done
}

// With a window, commands that arrive while it is open join the batch,
// and a batch that fills by count is sent at once, without waiting for
// the window (10 min here).
func TestWindowFillsByCount(t *testing.T) {
	s, tm := windowShard(t, 4, 10*time.Minute)
	ch := make(chan protocol.Command, shardQueue)
	done := fillAsync(s, ch, cmdN(0), tm)
	for i := 1; i <= 5; i++ {
		ch <- cmdN(i) // after fill began waiting, or before: either way in order
	}
	select {
	case got := <-done:
		if len(got) != 4 {
			t.Fatalf("took %d commands, want 4 (the cap)", len(got))
		}
		for i, c := range got {
			if c.Seq != uint64(i+1) {
				t.Fatalf("command %d has seq %d: out of order", i, c.Seq)
			}
		}
		if len(ch) != 2 {
			t.Fatalf("%d left queued, want 2", len(ch))
		}
	case <-time.After(waitLong):
		t.Fatal("a full batch waited for the window")
	}
}

// The window ends a batch that did not fill.
func TestWindowEnds(t *testing.T) {
	s, tm := windowShard(t, 64, 5*time.Millisecond)
	ch := make(chan protocol.Command, shardQueue)
	select {
	case got := <-fillAsync(s, ch, cmdN(0), tm):
		if len(got) != 1 {
			t.Fatalf("took %d", len(got))
		}
	case <-time.After(waitLong):
		t.Fatal("the window never ended")
	}
	// The timer is reused by the next batch.
	ch <- cmdN(2)
	select {
	case got := <-fillAsync(s, ch, cmdN(1), tm):
		if len(got) != 2 || got[1].Seq != 3 {
			t.Fatalf("second batch %+v", got)
		}
	case <-time.After(waitLong):
		t.Fatal("the second window never ended")
	}
}

// Shutdown ends the window at once: the pending batch is applied with
// what it holds.
func TestWindowEndsAtShutdown(t *testing.T) {
	s, tm := windowShard(t, 64, 10*time.Minute)
	ch := make(chan protocol.Command, shardQueue)
	ch <- cmdN(1)
	done := fillAsync(s, ch, cmdN(0), tm)
	close(s.quit)
	select {
	case got := <-done:
		if len(got) != 2 {
			t.Fatalf("took %d, want 2", len(got))
		}
	case <-time.After(waitLong):
		t.Fatal("the window held the shutdown")
	}
}

// A running shard with a window applies every command, in order, and its
// batches together hold them all.
func TestWindowShardAppliesInOrder(t *testing.T) {
	s, f := shardServer(t, 8)
	s.cfg.WorkerBatchWindow = time.Millisecond
	ch := make(chan protocol.Command, shardQueue)
	s.shardWG.Add(1)
	go s.runShard(ch)
	const n = 100
	for i := range n {
		ch <- cmdN(i)
	}
	applied := 0
	for applied < n {
		select {
		case k := <-f.applied:
			if k > 8 {
				t.Fatalf("a batch of %d commands, over the cap 8", k)
			}
			applied += k
		case <-time.After(waitLong):
			t.Fatalf("%d of %d applied", applied, n)
		}
	}
	close(s.quit)
	s.shardWG.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	i := 0
	for _, b := range f.batches {
		for _, c := range b {
			if c.Seq != uint64(i+1) {
				t.Fatalf("command %d applied with seq %d", i, c.Seq)
			}
			i++
		}
	}
}
