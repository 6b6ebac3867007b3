package integration

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// checkOneExpiredStop checks that v got exactly one typing_stop for each
// user since position since, with reason expired, between ttl and ttl + 1 s
// after the user's last typing_start; it returns the latest delay.
//
// The lower bound is on the server's clock: the events' ts_ms are Redis
// TIME when the worker applied the start and when the sweeper found the
// entry expired (docs/protocol.md, "Timing"), so their difference is never
// below ttl. The times v read them at are not: on a loaded machine the
// start can reach v hundreds of ms after it was applied while the stop
// comes at once. The upper bound holds on both clocks: the sweep ran
// within ttl + 1 s of the start, and v read the stop within ttl + 1 s of
// reading the start.
func checkOneExpiredStop(t *testing.T, v *view, since int, room string, users []string) time.Duration {
	t.Helper()
	var worst time.Duration
	for _, u := range users {
		starts := v.frames(since, isStart(room, u))
		stops := v.frames(since, isStop(room, u, ""))
		if len(starts) == 0 {
			t.Fatalf("%s never saw %s start", v.c.name, u)
		}
		if len(stops) != 1 {
			t.Fatalf("%s saw %d typing_stop for %s, want exactly one: %v", v.c.name, len(stops), u, stops)
		}
		if stops[0].Reason != "expired" {
			t.Fatalf("%s: %s stopped with reason %q, want expired", v.c.name, u, stops[0].Reason)
		}
		start, stop := starts[len(starts)-1], stops[0]
		if start.TsMs == 0 || stop.TsMs == 0 {
			t.Fatalf("%s: %s's start or stop has no ts_ms: %v, %v", v.c.name, u, start, stop)
		}
		server := time.Duration(stop.TsMs-start.TsMs) * time.Millisecond
		read := stop.at.Sub(start.at)
		if server < testTTL || server > expiryBound {
			t.Fatalf("%s: %s's expired stop has ts_ms %v after its start's, want within [ttl, ttl+1s] = [%v, %v] (read %v apart)",
				v.c.name, u, server, testTTL, expiryBound, read)
		}
		if read > expiryBound {
			t.Fatalf("%s: %s's expired stop reached it %v after its start, more than ttl+1s = %v (ts_ms %v apart)",
				v.c.name, u, read, expiryBound, server)
		}
		if read < testTTL {
			t.Logf("%s: %s's start and expired stop read %v apart, ts_ms %v apart: the start took longer to reach it than the stop", v.c.name, u, read, server)
		}
		worst = max(worst, read)
	}
	return worst
}

// Every worker sweeps. Twelve typists go silent at
// staggered times while workers are stopped (SIGTERM), killed (SIGKILL) and
// started during the expiry window: each typist yields exactly one
// typing_stop(expired), within ttl + 1 s, on receivers of both gateways.
func TestExpiryExactlyOnceWhileWorkersChurn(t *testing.T) {
	t.Parallel()
	ps := newProcStack(t, nil)
	w0, w1, w2 := ps.startWorker(nil), ps.startWorker(nil), ps.startWorker(nil)
	g0, g1 := ps.startGateway(nil), ps.startGateway(nil)
	room := "expiry churn"
	bob := watch(dial(t, g1.wsURL("bob", ""), "bob"))
	carol := watch(dial(t, g0.wsURL("carol", ""), "carol"))
	bob.join(room)
	carol.join(room)
	var users []string
	var typists []*client
	for i := range 12 {
		u := fmt.Sprintf("t%02d", i)
		c := dial(t, ps.gateways[i%2].wsURL(u, ""), u)
		c.join(room)
		users = append(users, u)
		typists = append(typists, c)
	}
	since, sinceC := bob.mark(), carol.mark()
	first := time.Now()
	for _, c := range typists {
		c.start(room) // once: then silent, so each entry expires
		time.Sleep(80 * time.Millisecond)
	}
	// Churn while the entries expire (from first+ttl to about first+ttl+1s):
	// at every moment at least one worker runs, but never the same ones.
	at := func(d time.Duration) { time.Sleep(time.Until(first.Add(testTTL + d))) }
	at(-100 * time.Millisecond)
	w0.kill(syscall.SIGTERM)
	at(100 * time.Millisecond)
	w3 := ps.startWorker(nil)
	at(300 * time.Millisecond)
	w1.kill(syscall.SIGKILL)
	at(500 * time.Millisecond)
	ps.startWorker(nil)
	at(700 * time.Millisecond)
	w3.kill(syscall.SIGTERM)
	at(900 * time.Millisecond)
	w2.kill(syscall.SIGKILL)
	t.Logf("churn done %v after the first start", time.Since(first))

	for _, v := range []*view{bob, carol} {
		v.waitShown(room, "", testTTL+2*time.Second)
	}
	time.Sleep(500 * time.Millisecond) // any duplicate would arrive by now
	worst := checkOneExpiredStop(t, bob, since, room, users)
	worst = max(worst, checkOneExpiredStop(t, carol, sinceC, room, users))
	recordRecovery(t, "worker churn during sweep: expired stop after start (≤ ttl+1s)", worst)
	if code, _ := w0.waitExit(t, 10*time.Second); code != 0 {
		t.Fatalf("worker0 exited with %d after SIGTERM", code)
	}
}

// The only worker dies while two users type; their entries
// expire while no worker runs (no stop can be pushed). A worker started
// later sweeps them at once: each yields exactly one typing_stop(expired).
func TestRestartedWorkerClearsExpiredEntries(t *testing.T) {
	t.Parallel()
	ps := newProcStack(t, nil)
	w0 := ps.startWorker(nil)
	g := ps.startGateway(nil)
	room := "expired meanwhile"
	bob := watch(dial(t, g.wsURL("bob", ""), "bob"))
	bob.join(room)
	alice := dial(t, g.wsURL("alice", "Alice"), "alice")
	carol := dial(t, g.wsURL("carol", "Carol"), "carol")
	alice.join(room)
	carol.join(room)
	since := bob.mark()
	alice.start(room)
	carol.start(room)
	bob.waitShown(room, "alice,carol", 2*time.Second)
	w0.kill(syscall.SIGKILL)
	w0.waitExit(t, 5*time.Second)
	time.Sleep(expiryBound) // both entries expired; nobody sweeps
	if fs := bob.frames(since, func(f frame) bool { return f.Type == "typing_stop" }); len(fs) > 0 {
		t.Fatalf("a stop was pushed with no worker running: %v", fs)
	}
	restarted := time.Now()
	ps.startWorker(nil)
	at := bob.waitShown(room, "", 3*time.Second)
	recordRecovery(t, "no worker while entries expired: stops after worker restart", at.Sub(restarted))
	time.Sleep(400 * time.Millisecond)
	for _, u := range []string{"alice", "carol"} {
		stops := bob.frames(since, isStop(room, u, ""))
		if len(stops) != 1 || stops[0].Reason != "expired" {
			t.Fatalf("%s: stops %v, want exactly one expired", u, stops)
		}
	}
	if st, us, _ := httpTyping(t, g.httpAddr, room, "bob"); st != 200 || us != "" {
		t.Fatalf("snapshot after the restart: %d %q, want nobody", st, us)
	}
}
