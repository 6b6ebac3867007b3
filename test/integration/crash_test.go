package integration

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/nats-io/nats.go"
)

// A gateway is SIGKILLed while two of its users type:
// it sends no disconnect, so their entries expire; receivers on the other
// gateway see both stop within ttl + 1 s. The dead gateway's clients
// reconnect to the other gateway and get a fresh snapshot on join.
func TestGatewayCrash(t *testing.T) {
	t.Parallel()
	ps := newProcStack(t, nil)
	ps.startWorker(nil)
	ps.startWorker(nil)
	g0, g1 := ps.startGateway(nil), ps.startGateway(nil)
	room := "crash:gw"
	alice := dial(t, g0.wsURL("alice", "Alice"), "alice")
	carol := dial(t, g0.wsURL("carol", "Carol"), "carol")
	dave := dial(t, g1.wsURL("dave", "Dave"), "dave")
	bob := watch(dial(t, g1.wsURL("bob", "Bob"), "bob"))
	for _, c := range []*client{alice, carol, dave} {
		c.join(room)
	}
	bob.join(room)
	stopA := keepTyping(alice, room, testRefresh)
	stopC := keepTyping(carol, room, testRefresh)
	stopD := keepTyping(dave, room, testRefresh)
	defer stopD()
	bob.waitShown(room, "alice,carol,dave", 2*time.Second)
	time.Sleep(300 * time.Millisecond)

	g0.kill(syscall.SIGKILL)
	killed := time.Now()
	stopA()
	stopC()

	// The dead gateway's clients notice at once and reconnect to the other
	// one; joining gives them a fresh snapshot (dave, who types there; the
	// dead gateway's entries until they expire; never themselves).
	var again []*view
	var worst time.Duration
	for _, c := range []*client{alice, carol} {
		code, endedAt := c.closeCode(2 * time.Second)
		if code != 1006 {
			t.Fatalf("%s: close code %d after a gateway crash, want 1006 (no close frame)", c.name, code)
		}
		v := watch(dial(t, g1.wsURL(c.name, ""), c.name+"-again"))
		j := v.join(room)
		got := users(j.Typing)
		if !strings.Contains(got, "dave") || strings.Contains(got, c.name) {
			t.Fatalf("%s: snapshot on rejoin %q, want dave and never itself", c.name, got)
		}
		d := j.at.Sub(killed)
		t.Logf("%s: connection ended %v after the kill, rejoined elsewhere with snapshot %q %v after it", c.name, endedAt.Sub(killed), got, d)
		worst = max(worst, d)
		again = append(again, v)
	}
	recordRecovery(t, "gateway SIGKILL: clients rejoined elsewhere with a snapshot", worst)

	at := bob.waitShown(room, "dave", expiryBound+500*time.Millisecond)
	if d := at.Sub(killed); d > expiryBound {
		t.Fatalf("receivers on the other gateway showed the dead gateway's typists %v after the kill, want ≤ ttl+1s = %v", d, expiryBound)
	}
	recordRecovery(t, "gateway SIGKILL: its typists stop on other gateways", at.Sub(killed))
	for _, u := range []string{"alice", "carol"} {
		stops := bob.frames(0, isStop(room, u, ""))
		if len(stops) != 1 || stops[0].Reason != "expired" {
			t.Fatalf("%s: stops %v, want exactly one expired", u, stops)
		}
	}
	// The reconnected clients converge too: only dave is typing.
	for _, v := range again {
		if d := v.waitShown(room, "dave", time.Second).Sub(killed); d > expiryBound {
			t.Fatalf("%s showed a dead gateway's typist %v after the kill", v.c.name, d)
		}
	}
}

// Three workers under load (typists on two gateways plus a
// flood of commands from a platform service); one worker is SIGKILLed. The
// others keep serving through the queue group (a new typist is shown at
// once), and no typist outlives ttl + 1 s after its last command, even if
// its stop died with the worker.
func TestWorkerCrashUnderLoad(t *testing.T) {
	t.Parallel()
	ps := newProcStack(t, nil)
	w0, w1, w2 := ps.startWorker(nil), ps.startWorker(nil), ps.startWorker(nil)
	g0, g1 := ps.startGateway(nil), ps.startGateway(nil)
	nc := connectNATS(t, ps.s.cfg.NATSURL)
	room := "crash:worker"
	bob := watch(dial(t, g1.wsURL("bob", ""), "bob"))
	carol := watch(dial(t, g0.wsURL("carol", ""), "carol"))
	bob.join(room)
	carol.join(room)

	stopBots := startBotLoad(nc, ps.s.cfg.SubjectPrefix)
	defer stopBots()
	stopTypists := startTypists(t, ps, room)
	time.Sleep(time.Second)
	before := metric(t, w1.adminAddr, "ellipsis_worker_commands_total") + metric(t, w2.adminAddr, "ellipsis_worker_commands_total")
	if metric(t, w0.adminAddr, "ellipsis_worker_commands_total") == 0 {
		t.Fatal("worker0 got no commands before it was killed")
	}
	var joiners []*view
	for i := range 6 {
		joiners = append(joiners, watch(dial(t, ps.gateways[i%2].wsURL(fmt.Sprintf("joiner%d", i), ""), fmt.Sprintf("joiner%d", i))))
	}
	late := dial(t, g0.wsURL("late", ""), "late")
	late.join(room)
	w0.kill(syscall.SIGKILL)
	killed := time.Now()

	joinRightAfterCrash(t, joiners, room, killed)
	showLateTypistAfterCrash(t, bob, late, room, killed)

	time.Sleep(1500 * time.Millisecond)
	stopTypists()
	ended := time.Now()
	var worst time.Duration
	for _, v := range []*view{bob, carol} {
		at := v.waitShown(room, "", expiryBound+time.Second)
		if d := at.Sub(ended); d > expiryBound {
			t.Fatalf("%s still showed typists %v after their last command, want ≤ ttl+1s", v.c.name, d)
		}
		worst = max(worst, at.Sub(ended))
	}
	after := metric(t, w1.adminAddr, "ellipsis_worker_commands_total") + metric(t, w2.adminAddr, "ellipsis_worker_commands_total")
	t.Logf("surviving workers applied %.0f commands after the crash", after-before)
	if after-before < 500 {
		t.Fatalf("the surviving workers applied only %.0f commands after the crash", after-before)
	}
	recordRecovery(t, "worker SIGKILL under load: receivers empty after last command", worst)
}

// startBotLoad is the background load: a platform service's starts in 50
// other rooms, ~1000 commands/s, published on nc until the returned stop
// is called (stop waits for the publisher to end).
func startBotLoad(nc *nats.Conn, subjectPrefix string) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		seq := uint64(0)
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			for range 10 { // ~1000 commands/s
				seq++
				b, _ := protocol.Encode(protocol.Command{V: 1, Op: protocol.OpStart, Room: fmt.Sprintf("load-%d", seq%50),
					User: fmt.Sprintf("bot%d", seq%200), Conn: "bots:1", Seq: seq, TsMs: time.Now().UnixMilli()})
				_ = nc.Publish(subjectPrefix+".typing.v1.cmd", b)
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}

// startTypists joins 10 typists to room, alternating over the two
// gateways; each refreshes every 80–120 ms and sometimes stops and starts.
// The returned stop ends them: the even ones send a typing_stop, the
// others go silent; stop returns once all have ended.
func startTypists(t *testing.T, ps *procStack, room string) (stop func()) {
	t.Helper()
	var typists []*client
	for i := range 10 {
		u := fmt.Sprintf("ty%d", i)
		c := dial(t, ps.gateways[i%2].wsURL(u, ""), u)
		c.join(room)
		typists = append(typists, c)
	}
	stopLoad := make(chan struct{})
	var lwg sync.WaitGroup
	for i, c := range typists {
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			for {
				select {
				case <-stopLoad:
					if i%2 == 0 {
						_ = c.trySend(map[string]any{"type": "typing_stop", "room": room}) // the others go silent
					}
					return
				case <-time.After(time.Duration(80+rand.IntN(40)) * time.Millisecond):
				}
				typ := "typing_start"
				if rand.IntN(5) == 0 {
					typ = "typing_stop"
				}
				_ = c.trySend(map[string]any{"type": typ, "room": room})
			}
		}()
	}
	return func() { close(stopLoad); lwg.Wait() }
}

// joinRightAfterCrash checks that clients joining right after the crash
// get their snapshot (joined within 3 s): a snapshot request the queue
// group still routed to the dead worker is retried.
func joinRightAfterCrash(t *testing.T, joiners []*view, room string, killed time.Time) {
	t.Helper()
	var jwg sync.WaitGroup
	replies := make([]frame, len(joiners))
	for i, v := range joiners {
		jwg.Add(1)
		go func() {
			defer jwg.Done()
			since := v.mark()
			_ = v.c.trySend(map[string]any{"type": "join", "room": room, "id": "jj"})
			v.tryUntil(3*time.Second, func() bool {
				for _, f := range v.log[since:] {
					if f.ID == "jj" {
						replies[i] = f
						return true
					}
				}
				return false
			})
		}()
	}
	jwg.Wait()
	var slowest time.Duration
	for i, f := range replies {
		if f.Type != "joined" {
			t.Fatalf("joiner%d right after the worker crash: %v, want joined", i, f)
		}
		slowest = max(slowest, f.at.Sub(killed))
	}
	t.Logf("%d clients joined right after the crash, the slowest %v after it", len(joiners), slowest)
	recordRecovery(t, "worker SIGKILL: joins sent at the crash answered (retry)", slowest)
}

// showLateTypistAfterCrash checks that the other workers continue: a new
// typist is shown to bob within 2 s. A start is one fire-and-forget
// command, and the queue group may still route it to the killed worker
// until nats-server has seen that connection close: there it is lost
// (commands are at most once, docs/protocol.md). A typing client repeats
// its start while the user types (the refresh), so the late typist sends
// one every 250 ms, as a fast refresh would, until bob shows it; the
// worker throttles the repeats. The late typist stops at the end.
func showLateTypistAfterCrash(t *testing.T, bob *view, late *client, room string, killed time.Time) {
	t.Helper()
	since := bob.mark()
	sent := time.Now()
	shown := func() bool { // bob.mu is held (tryUntil)
		for _, f := range bob.log[min(since, len(bob.log)):] {
			if isStart(room, "late")(f) {
				return true
			}
		}
		return false
	}
	sends := 0
	for ok := false; !ok; {
		if time.Since(sent) > 2*time.Second {
			t.Fatalf("bob: the late typist's start not shown within 2 s of its first send after the crash (%d sends)", sends)
		}
		late.start(room)
		sends++
		_, ok = bob.tryUntil(250*time.Millisecond, shown)
	}
	f := bob.frames(since, isStart(room, "late"))[0]
	t.Logf("new typist shown %v after its first start (%d sent), %v after the crash", f.at.Sub(sent), sends, f.at.Sub(killed))
	late.stop(room)
}
