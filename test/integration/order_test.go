package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// delayProxy sits between the gateways' subjects and the workers': it
// republishes every command after a random delay in [0, maxDelay), so
// commands of one connection reach the queue group out of order (and thus
// different workers, in any order). Snapshot requests are forwarded as
// requests at once.
type delayProxy struct {
	forwarded, reordered atomic.Int64
	wg                   sync.WaitGroup
}

func startDelayProxy(t *testing.T, nc *nats.Conn, from, to string, maxDelay time.Duration) *delayProxy {
	t.Helper()
	p := &delayProxy{}
	src, dst := names.New("", from), names.New("", to)
	var mu sync.Mutex
	lastSeq := map[string]uint64{} // conn -> highest seq republished
	ctx, cancel := context.WithCancel(context.Background())
	cmdSub, err := nc.Subscribe(src.CommandSubject(), func(m *nats.Msg) {
		data := m.Data
		d := time.Duration(rand.Int64N(int64(maxDelay)))
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			time.Sleep(d)
			if cmd, err := protocol.DecodeCommand(data); err == nil && cmd.Conn != "" {
				mu.Lock()
				if cmd.Seq < lastSeq[cmd.Conn] {
					p.reordered.Add(1)
				}
				lastSeq[cmd.Conn] = max(lastSeq[cmd.Conn], cmd.Seq)
				mu.Unlock()
			}
			_ = nc.Publish(dst.CommandSubject(), data)
			p.forwarded.Add(1)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	snapSub, err := nc.Subscribe(src.SnapshotSubject(), func(m *nats.Msg) {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			defer rcancel()
			if r, err := nc.RequestWithContext(rctx, dst.SnapshotSubject(), m.Data); err == nil {
				_ = m.Respond(r.Data)
			}
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmdSub.Unsubscribe()
		_ = snapSub.Unsubscribe()
		cancel()
		p.wg.Wait()
	})
	return p
}

// Three workers in the queue group, and a proxy that delays
// each command by a random 0–40 ms, so one connection's commands are applied
// by different workers out of order. Over many start → stop (20 ms apart)
// rounds a stale command never overrides a newer one: users whose last
// command was a stop end "not typing", those whose last was a start end
// typing, in the workers' state and on every receiver.
func TestOrderAcrossThreeWorkersWithDelays(t *testing.T) {
	t.Parallel()
	tok := testkit.RandHex(5)
	gwPrefix, wkPrefix := "ordgw"+tok, "ordwk"+tok
	ps := newProcStack(t, nil)
	nc := connectNATS(t, ps.s.cfg.NATSURL)
	proxy := startDelayProxy(t, nc, gwPrefix, wkPrefix, 40*time.Millisecond)
	var workers []*proc
	for range 3 {
		workers = append(workers, ps.startWorker(map[string]string{"ELLIPSIS_SUBJECT_PREFIX": wkPrefix}))
	}
	gw := ps.startGateway(map[string]string{"ELLIPSIS_SUBJECT_PREFIX": gwPrefix})
	room := "order"

	// Direct out-of-order delivery, no proxy: the stop (seq 2) is applied
	// before the start (seq 1) that was sent 20 ms earlier.
	bob := watch(dial(t, gw.wsURL("bob", "Bob"), "bob"))
	bob.join(room)
	checkDirectOutOfOrder(t, nc, wkPrefix, gw, bob, room)

	carol, want := typeRoundsThroughProxy(t, gw, room)
	sent := time.Now()
	wantCSV := sortedCSV(want...)
	for _, v := range []*view{bob, carol} {
		at := v.waitShown(room, wantCSV, time.Second)
		t.Logf("%s right %v after the last command", v.c.name, at.Sub(sent))
	}
	// Stay right: no late (stale) command may change it.
	time.Sleep(200 * time.Millisecond)
	for _, v := range []*view{bob, carol} {
		if got := v.shown(room); got != wantCSV {
			t.Fatalf("%s: after the last commands the room showed %q, then %q", v.c.name, wantCSV, got)
		}
	}
	if st, us, _ := httpTyping(t, gw.httpAddr, room, "bob"); st != 200 || us != wantCSV {
		t.Fatalf("snapshot %d %q, want %q", st, us, wantCSV)
	}
	checkStaleIgnored(t, proxy, workers)
}

// checkDirectOutOfOrder is direct out-of-order delivery, no proxy: the
// stop (seq 2) is applied before the start (seq 1) that was sent 20 ms
// earlier, so bob never sees zoe and the snapshot is empty.
func checkDirectOutOfOrder(t *testing.T, nc *nats.Conn, wkPrefix string, gw *proc, bob *view, room string) {
	t.Helper()
	since := bob.mark()
	publishCommand(t, nc, wkPrefix, protocol.Command{Op: protocol.OpStop, Room: room, User: "zoe", Conn: "ext:1", Seq: 2})
	time.Sleep(20 * time.Millisecond)
	publishCommand(t, nc, wkPrefix, protocol.Command{Op: protocol.OpStart, Room: room, User: "zoe", Name: "Zoe", Conn: "ext:1", Seq: 1})
	time.Sleep(300 * time.Millisecond)
	if fs := bob.frames(since, isAbout("zoe")); len(fs) > 0 {
		t.Fatalf("a start older than the stop was applied: %v", fs)
	}
	if st, us, _ := httpTyping(t, gw.httpAddr, room, "bob"); st != 200 || us != "" {
		t.Fatalf("after stop(seq 2), start(seq 1) the snapshot is %d %q, want nobody", st, us)
	}
}

// typeRoundsThroughProxy types through the gateway and the delaying proxy:
// 8 users, each on its own connection, 6 rounds of start, 20 ms, stop;
// then half of them start once more. It returns carol, a receiver joined
// before the rounds, and those last typists, whom receivers must end with.
func typeRoundsThroughProxy(t *testing.T, gw *proc, room string) (*view, []string) {
	t.Helper()
	const nUsers, rounds = 8, 6
	type typer struct {
		user string
		c    *client
	}
	var typers []typer
	for i := range nUsers {
		u := fmt.Sprintf("u%d", i)
		c := dial(t, gw.wsURL(u, ""), u)
		c.join(room)
		typers = append(typers, typer{u, c})
	}
	carol := watch(dial(t, gw.wsURL("carol", ""), "carol"))
	carol.join(room)
	var wg sync.WaitGroup
	var want []string
	for i, ty := range typers {
		last := i%2 == 0
		if last {
			want = append(want, ty.user)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 7 * time.Millisecond)
			for range rounds {
				_ = ty.c.trySend(map[string]any{"type": "typing_start", "room": room})
				time.Sleep(20 * time.Millisecond)
				_ = ty.c.trySend(map[string]any{"type": "typing_stop", "room": room})
				time.Sleep(time.Duration(10+rand.IntN(30)) * time.Millisecond)
			}
			if last {
				_ = ty.c.trySend(map[string]any{"type": "typing_start", "room": room})
			}
		}()
	}
	wg.Wait()
	return carol, want
}

// checkStaleIgnored checks that the proxy did reorder commands, that at
// least 2 of the workers got commands, and that they ignored some as stale.
func checkStaleIgnored(t *testing.T, proxy *delayProxy, workers []*proc) {
	t.Helper()
	if proxy.reordered.Load() == 0 {
		t.Fatalf("the proxy forwarded %d commands and none out of order: the test proved nothing", proxy.forwarded.Load())
	}
	busy, stale := 0, 0.0
	for _, w := range workers {
		if metric(t, w.adminAddr, "ellipsis_worker_commands_total") > 0 {
			busy++
		}
		stale += metric(t, w.adminAddr, "ellipsis_worker_commands_total", `outcome="stale"`)
	}
	t.Logf("%d commands forwarded, %d of them after a newer one of the same connection; %d workers applied commands, %v stale ignored",
		proxy.forwarded.Load(), proxy.reordered.Load(), busy, stale)
	if busy < 2 {
		t.Fatalf("only %d of 3 workers got commands", busy)
	}
	if stale == 0 {
		t.Fatalf("no command was ignored as stale although %d arrived out of order", proxy.reordered.Load())
	}
}
