package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// countMetrics is a BatchMetrics for tests.
type countMetrics struct {
	sent, failed, failedCmds, refused atomic.Int64
}

func (m *countMetrics) BatchSent(int)     { m.sent.Add(1) }
func (m *countMetrics) BatchFailed(n int) { m.failed.Add(1); m.failedCmds.Add(int64(n)) }
func (m *countMetrics) CommandRefused()   { m.refused.Add(1) }
func (m *countMetrics) String() string {
	return fmt.Sprintf("sent %d, failed %d (%d commands), refused %d", m.sent.Load(), m.failed.Load(), m.failedCmds.Load(), m.refused.Load())
}

// sink records the payloads a batcher sends, decoded.
type sink struct {
	mu      sync.Mutex
	batches [][]protocol.Command
	fail    func(i int) error // the i-th send's error (nil: none)
	gate    chan struct{}     // when set, each send waits for a value
}

func (s *sink) send(data []byte) error {
	if s.gate != nil {
		<-s.gate
	}
	cmds, errs, err := protocol.DecodeCommands(data)
	if err != nil {
		panic(fmt.Sprintf("undecodable payload %q: %v", data, err))
	}
	for _, e := range errs {
		if e != nil {
			panic(e)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.batches)
	s.batches = append(s.batches, cmds)
	if s.fail != nil {
		return s.fail(i)
	}
	return nil
}

func (s *sink) got() [][]protocol.Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]protocol.Command(nil), s.batches...)
}

func cmdOf(conn string, seq uint64, name string) []byte {
	c := protocol.Command{V: 1, Op: protocol.OpStart, Room: "r", User: "u", Name: name, Conn: conn, Seq: seq}
	b, err := protocol.AppendCommand(nil, &c)
	if err != nil {
		panic(err)
	}
	return b
}

// waitFor polls cond until it holds or 10 s passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// addSeq offers n commands of conn to b, numbering those taken 1, 2, …
// (a refused one is offered again under the next), and returns how many
// were taken.
func addSeq(b *batcher, conn string, n uint64) (taken uint64) {
	for range n {
		if added, _ := b.add(cmdOf(conn, taken+1, "")); added {
			taken++
		}
	}
	return taken
}

func stopBatcher(t *testing.T, b *batcher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.stop(ctx.Done())
}

// checkOrder fails unless the batches hold seq 1..n of each connection in
// order, every command once.
func checkOrder(t *testing.T, batches [][]protocol.Command, conns []string, n uint64) {
	t.Helper()
	next := map[string]uint64{}
	total := 0
	for _, bt := range batches {
		for _, c := range bt {
			next[c.Conn]++
			if c.Seq != next[c.Conn] {
				t.Fatalf("conn %s: seq %d after %d", c.Conn, c.Seq, next[c.Conn]-1)
			}
			total++
		}
	}
	for _, c := range conns {
		if next[c] != n {
			t.Fatalf("conn %s: %d commands delivered, want %d", c, next[c], n)
		}
	}
	if total != len(conns)*int(n) {
		t.Fatalf("%d commands delivered, want %d", total, len(conns)*int(n))
	}
}

// A window that fills by count sends the full batch at once, without
// waiting for the window (10 min here), and the rest at stop.
func TestBatchFillsByCount(t *testing.T) {
	t.Parallel()
	var s sink
	m := &countMetrics{}
	b := newBatcher(10*time.Minute, func() int { return 1 << 20 }, s.send, m)
	for i := range 2*MaxBatchCommands + 1 {
		if added, _ := b.add(cmdOf("c", uint64(i+1), "")); !added {
			t.Fatalf("command %d refused", i)
		}
	}
	waitFor(t, "two full batches", func() bool { return len(s.got()) == 2 })
	for i, bt := range s.got() {
		if len(bt) != MaxBatchCommands {
			t.Fatalf("batch %d holds %d commands, want %d", i, len(bt), MaxBatchCommands)
		}
	}
	stopBatcher(t, b) // the pending batch of one goes out
	got := s.got()
	if len(got) != 3 || len(got[2]) != 1 {
		t.Fatalf("after stop: %d batches", len(got))
	}
	checkOrder(t, got, []string{"c"}, 2*MaxBatchCommands+1)
	if m.sent.Load() != 3 || m.failed.Load() != 0 {
		t.Fatalf("metrics: %v", m)
	}
}

// A window that fills by bytes closes a batch before a command would take
// it past the bound; no batch exceeds it.
func TestBatchFillsByBytes(t *testing.T) {
	t.Parallel()
	var s sink
	var sizes []int
	var mu sync.Mutex
	limit := 1000
	send := func(data []byte) error {
		mu.Lock()
		sizes = append(sizes, len(data))
		mu.Unlock()
		return s.send(data)
	}
	b := newBatcher(10*time.Minute, func() int { return limit }, send, &countMetrics{})
	name := strings.Repeat("n", 200) // a command of about 270 bytes: 3 per batch
	for i := range 10 {
		if added, _ := b.add(cmdOf("c", uint64(i+1), name)); !added {
			t.Fatalf("command %d refused", i)
		}
	}
	waitFor(t, "three full batches", func() bool { return len(s.got()) == 3 })
	stopBatcher(t, b)
	got := s.got()
	checkOrder(t, got, []string{"c"}, 10)
	mu.Lock()
	defer mu.Unlock()
	for i, n := range sizes {
		if n > limit {
			t.Fatalf("batch %d is %d bytes, over the bound %d", i, n, limit)
		}
	}
	if len(got[0]) != 3 {
		t.Fatalf("first batch holds %d commands, want 3", len(got[0]))
	}
	// A command too big for any batch goes alone, in its place.
	var s2 sink
	b2 := newBatcher(10*time.Minute, func() int { return limit }, s2.send, &countMetrics{})
	b2.add(cmdOf("c", 1, ""))
	rooms := make([]string, 8)
	for i := range rooms {
		rooms[i] = fmt.Sprintf("%0150d", i)
	}
	big, err := protocol.AppendCommand(nil, &protocol.Command{V: 1, Op: protocol.OpDisconnect, Rooms: rooms, User: "u", Conn: "c", Seq: 2})
	if err != nil || len(big) <= limit {
		t.Fatalf("big command: %d bytes, %v", len(big), err)
	}
	b2.add(big)
	b2.add(cmdOf("c", 3, ""))
	stopBatcher(t, b2)
	got = s2.got()
	if len(got) != 3 || len(got[1]) != 1 || got[1][0].Seq != 2 {
		t.Fatalf("big command: batches %v", got)
	}
	checkOrder(t, got, []string{"c"}, 3)
}

// The window closes a batch that did not fill.
func TestBatchWindowEnds(t *testing.T) {
	t.Parallel()
	var s sink
	b := newBatcher(5*time.Millisecond, func() int { return 1 << 20 }, s.send, &countMetrics{})
	defer stopBatcher(t, b)
	b.add(cmdOf("c", 1, ""))
	b.add(cmdOf("c", 2, ""))
	waitFor(t, "the window's batch", func() bool { return len(s.got()) == 1 })
	b.add(cmdOf("c", 3, ""))
	waitFor(t, "the next window's batch", func() bool { return len(s.got()) == 2 })
	checkOrder(t, s.got(), []string{"c"}, 3)
}

// A send that fails mid-run costs that batch only: it is counted, the
// batches before and after it are sent, in order.
func TestBatchSendFailsMidRun(t *testing.T) {
	t.Parallel()
	s := sink{fail: func(i int) error {
		if i == 1 {
			return errors.New("nats: connection closed")
		}
		return nil
	}}
	m := &countMetrics{}
	b := newBatcher(10*time.Minute, func() int { return 1 << 20 }, s.send, m)
	for i := range 3 * MaxBatchCommands {
		b.add(cmdOf("c", uint64(i+1), ""))
	}
	stopBatcher(t, b)
	if len(s.got()) != 3 || m.sent.Load() != 2 || m.failed.Load() != 1 || m.failedCmds.Load() != MaxBatchCommands {
		t.Fatalf("%d batches, metrics %v", len(s.got()), m)
	}
}

// With the sender blocked, at most batchQueue full batches wait; a command
// that needs one more is refused (and counted) at once, never queued, and
// the commands taken are all sent, in order, once the sender is free.
func TestBatchQueueBound(t *testing.T) {
	t.Parallel()
	s := sink{gate: make(chan struct{})}
	m := &countMetrics{}
	b := newBatcher(10*time.Minute, func() int { return 1 << 20 }, s.send, m)
	// At most one batch in the (blocked) send, batchQueue waiting and one
	// filling: the command after those is refused.
	capacity := uint64((batchQueue + 2) * MaxBatchCommands)
	taken := addSeq(b, "c", capacity+1)
	if m.refused.Load() == 0 || taken > capacity || taken < capacity-MaxBatchCommands {
		t.Fatalf("%d commands taken with the sender blocked (capacity %d), %v", taken, capacity, m)
	}
	close(s.gate)
	stopBatcher(t, b)
	checkOrder(t, s.got(), []string{"c"}, taken)
}

// Many connections publishing at once: each one's commands arrive in seq
// order, within and across batches, and exactly the commands taken (a
// command refused because the sender fell behind is answered unavailable
// and never sent, so its connection's later commands have a gap).
func TestBatchPerConnectionOrder(t *testing.T) {
	t.Parallel()
	var s sink
	b := newBatcher(time.Millisecond, func() int { return 8 << 10 }, s.send, &countMetrics{})
	conns := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	const n = 500
	taken := make([][]uint64, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			for seq := range uint64(n) {
				if added, _ := b.add(cmdOf(c, seq+1, "")); added {
					taken[i] = append(taken[i], seq+1)
				}
			}
		})
	}
	wg.Wait()
	stopBatcher(t, b)
	got := map[string][]uint64{}
	for _, bt := range s.got() {
		for _, c := range bt {
			got[c.Conn] = append(got[c.Conn], c.Seq)
		}
	}
	total := 0
	for i, c := range conns {
		if !slices.Equal(got[c], taken[i]) {
			t.Fatalf("conn %s: delivered %v, taken %v", c, got[c], taken[i])
		}
		total += len(taken[i])
	}
	if total < MaxBatchCommands {
		t.Fatalf("%d commands taken in all, want at least a batch's", total)
	}
}

// Against NATS: a pending batch goes out within Close's drain, and a
// publish after Close is refused unavailable (the connection is closed).
func TestBatchSentAtClose(t *testing.T) {
	t.Parallel()
	c, nc, n := newNATS(t, time.Second)
	m := &countMetrics{}
	c.EnableBatching(10*time.Minute, m)
	var mu sync.Mutex
	var got []*nats.Msg
	sub, err := nc.Subscribe(n.CommandSubject(), func(msg *nats.Msg) {
		mu.Lock()
		got = append(got, msg)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := c.Publish(&protocol.Command{V: 1, Op: protocol.OpStart, Room: "r", User: "u", Conn: "g:1", Seq: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the batch", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 })
	mu.Lock()
	cmds, errs, err := protocol.DecodeCommands(got[0].Data)
	mu.Unlock()
	if err != nil || len(cmds) != 3 || errs[2] != nil || cmds[2].Seq != 3 || m.sent.Load() != 1 {
		t.Fatalf("batch at close: %v %v, metrics %v", cmds, err, m)
	}
	if err := c.Publish(&protocol.Command{V: 1, Op: protocol.OpStop, Room: "r", User: "u"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("publish after close: %v", err)
	}
}

func TestBatchTailBytes(t *testing.T) {
	if n := len(protocol.AppendBatchTail(nil)); n != tailBytes {
		t.Fatalf("tailBytes %d, the tail is %d bytes", tailBytes, n)
	}
}

// flush sends the batch being filled (its window is 10 min) after the
// batches before it, and waits for them; with the sender blocked it gives
// up at its deadline.
func TestBatchFlushSendsTheFillingBatch(t *testing.T) {
	t.Parallel()
	var s sink
	m := &countMetrics{}
	b := newBatcher(10*time.Minute, func() int { return 1 << 20 }, s.send, m)
	defer stopBatcher(t, b)
	for i := range MaxBatchCommands + 3 { // one full batch and one filling
		b.add(cmdOf("c", uint64(i+1), ""))
	}
	if !b.flush(time.Now().Add(10 * time.Second)) {
		t.Fatal("flush timed out with a free sender")
	}
	got := s.got()
	if len(got) != 2 || len(got[1]) != 3 {
		t.Fatalf("after flush: %d batches (want 2, the second of 3 commands)", len(got))
	}
	checkOrder(t, got, []string{"c"}, MaxBatchCommands+3)

	gated := sink{gate: make(chan struct{})}
	bg := newBatcher(10*time.Minute, func() int { return 1 << 20 }, gated.send, &countMetrics{})
	bg.add(cmdOf("d", 1, ""))
	began := time.Now()
	if bg.flush(began.Add(50 * time.Millisecond)) {
		t.Fatal("flush reported done with the sender blocked")
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("flush took %v past a 50 ms deadline", d)
	}
	close(gated.gate)
	stopBatcher(t, bg)
	checkOrder(t, gated.got(), []string{"d"}, 1)
}

// Shutdown with a batch pending and the sender stuck (a NATS write
// blocked): stop returns at its deadline, counts the batch it could not
// queue as failed, and an add meanwhile is never held by stop: it finds
// the batcher stopped at once (its caller publishes alone).
func TestBatchStopWithSenderStuck(t *testing.T) {
	t.Parallel()
	s := sink{gate: make(chan struct{})}
	m := &countMetrics{}
	b := newBatcher(10*time.Minute, func() int { return 1 << 20 }, s.send, m)
	taken := addSeq(b, "c", (batchQueue+2)*MaxBatchCommands) // one in send, batchQueue waiting, one filling
	b.mu.Lock()
	pending := b.cur.n
	b.mu.Unlock()
	if pending == 0 {
		t.Fatal("no batch filling with the sender stuck")
	}
	deadline := make(chan struct{})
	stopped := make(chan struct{})
	go func() { b.stop(deadline); close(stopped) }()
	waitFor(t, "stop to mark the batcher stopped", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.stopped
	})
	addDone := make(chan bool, 1)
	go func() { _, st := b.add(cmdOf("late", 1, "")); addDone <- st }()
	select {
	case st := <-addDone:
		if !st {
			t.Fatal("an add during stop was not told the batcher stopped")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an add was held by a stop waiting for the stuck sender")
	}
	select {
	case <-stopped:
		t.Fatal("stop returned before its deadline with the sender stuck")
	case <-time.After(20 * time.Millisecond):
	}
	close(deadline)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return at its deadline")
	}
	if m.failed.Load() != 1 || m.failedCmds.Load() != int64(pending) {
		t.Fatalf("the filling batch of %d not counted as failed: %v", pending, m)
	}
	close(s.gate) // let run finish what was queued
	<-b.done
	checkOrder(t, s.got(), []string{"c"}, taken-uint64(pending))
}
