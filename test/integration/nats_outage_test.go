package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// A NATS outage, as separate processes on a private NATS. While NATS is
// down: /readyz says so on both services, the gateway answers typing, sync
// and join frames with error unavailable at once (no blocking, no silent
// drop) and never publishes those commands later. Once NATS is back both
// services reconnect by themselves, the gateway pushes typing snapshots and
// the keystroke path works again. Snapshot requests nobody answers time out
// with an error that says so.
func TestNATSOutageAndRestart(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t, "")
	ps := newProcStack(t, map[string]string{"ELLIPSIS_NATS_URL": n.URL(), "ELLIPSIS_SNAPSHOT_TIMEOUT": "700ms"})
	w := ps.startWorker(nil)
	g := ps.startGateway(nil)
	room := "nats:outage"
	alice := watch(dial(t, g.wsURL("alice", "Alice"), "alice"))
	bob := watch(dial(t, g.wsURL("bob", "Bob"), "bob"))
	alice.join(room)
	bob.join(room)
	alice.c.start(room)
	bob.waitShown(room, "alice", 2*time.Second)
	alice.c.stop(room)
	bob.waitShown(room, "", 2*time.Second)
	startsBefore := metric(t, w.adminAddr, "ellipsis_worker_commands_total", `op="start"`)

	n.Kill()
	down := time.Now()
	for _, p := range []*proc{g, w} {
		at := waitReadyz(t, p.adminAddr, 503, 3*time.Second, "nats")
		t.Logf("%s /readyz 503 (nats) %v after the kill", p.name, at.Sub(down))
	}
	checkRefusedDuringNATSOutage(t, g, w, alice, room)

	since := bob.mark()
	back := time.Now()
	n.Restart()
	for _, p := range []*proc{g, w} {
		at := waitReadyz(t, p.adminAddr, 200, 10*time.Second)
		t.Logf("%s reconnected (/readyz 200) %v after NATS was back", p.name, at.Sub(back))
	}
	f := bob.waitFrame(since, isPushedSnapshot(room), 5*time.Second, "typing snapshot after the NATS reconnect")
	recordRecovery(t, "NATS restart: gateway resync snapshot pushed", f.at.Sub(back))
	ok := waitKeystrokePathBack(t, alice, bob, room)
	recordRecovery(t, "NATS restart: keystroke path works again", ok.Sub(back))
	if metric(t, g.adminAddr, "ellipsis_gateway_nats_connected") != 1 ||
		metric(t, w.adminAddr, "ellipsis_worker_nats_connected") != 1 {
		t.Fatal("nats_connected is not 1 on both services once NATS is back")
	}
	if metric(t, g.adminAddr, "ellipsis_gateway_nats_errors_total", `kind="disconnect"`) != 1 ||
		metric(t, w.adminAddr, "ellipsis_worker_nats_errors_total", `kind="disconnect"`) != 1 {
		t.Fatal("the NATS disconnect was not counted once by each service (nats_errors_total{kind=\"disconnect\"})")
	}
	// None of the refused commands was published later: the workers saw one
	// more start (the accepted one), and receivers no start before it.
	time.Sleep(300 * time.Millisecond)
	if got := metric(t, w.adminAddr, "ellipsis_worker_commands_total", `op="start"`) - startsBefore; got != 1 {
		t.Fatalf("the worker applied %v starts since the outage began, want 1: a refused command was sent later", got)
	}
	if starts := bob.frames(since, isStart(room, "alice")); len(starts) != 1 {
		t.Fatalf("bob saw %d typing_start after the outage, want 1: %v", len(starts), starts)
	}
	alice.c.stop(room)
	bob.waitShown(room, "", 2*time.Second)

	checkSnapshotsWithoutWorker(t, g, w, bob, room)
}

// checkRefusedDuringNATSOutage checks that frames that need NATS (typing,
// sync, join, the HTTP snapshot) are refused at once, with the reason, and
// that both services report nats_connected 0.
func checkRefusedDuringNATSOutage(t *testing.T, g, w *proc, alice *view, room string) {
	t.Helper()
	refused := 0
	for _, msg := range []map[string]any{
		{"type": "typing_start", "room": room},
		{"type": "typing_start", "room": room},
		{"type": "typing_stop", "room": room},
		{"type": "sync", "room": room},
	} {
		f, took := alice.request(msg, 2*time.Second)
		if f.Type != "error" || f.Code != "unavailable" || !strings.Contains(f.Message, "NATS") {
			t.Fatalf("%v during the NATS outage: %v, want error unavailable naming NATS", msg["type"], f)
		}
		if took > 500*time.Millisecond {
			t.Fatalf("%v during the NATS outage answered after %v: it must not block", msg["type"], took)
		}
		refused++
	}
	carol := watch(dial(t, g.wsURL("carol", ""), "carol"))
	if f, _ := carol.request(map[string]any{"type": "join", "room": room}, 2*time.Second); f.Code != "unavailable" {
		t.Fatalf("join during the NATS outage: %v, want unavailable", f)
	}
	st, _, msg := httpTyping(t, g.httpAddr, room, "bob")
	if st != 503 || !strings.Contains(msg, "NATS") {
		t.Fatalf("GET typing during the NATS outage: %d %q, want 503 naming NATS", st, msg)
	}
	t.Logf("%d frames refused while NATS was down; HTTP snapshot: %s", refused, msg)
	if metric(t, g.adminAddr, "ellipsis_gateway_nats_connected") != 0 ||
		metric(t, w.adminAddr, "ellipsis_worker_nats_connected") != 0 {
		t.Fatal("nats_connected is not 0 on both services during the NATS outage")
	}
}

// waitKeystrokePathBack retries (10 s) until alice's start is accepted and
// reaches bob, and returns when bob got it.
func waitKeystrokePathBack(t *testing.T, alice, bob *view, room string) time.Time {
	t.Helper()
	var ok time.Time
	for deadline := time.Now().Add(10 * time.Second); ok.IsZero(); {
		if time.Now().After(deadline) {
			t.Fatal("typing never worked again after NATS came back")
		}
		m, ma := bob.mark(), alice.mark()
		id := "s-" + testkit.RandHex(5)
		alice.c.send(map[string]any{"type": "typing_start", "room": room, "id": id})
		// Either an error reply (still down) or the start reaches bob.
		alice.tryUntil(time.Second, func() bool { return len(alice.log) > ma && alice.log[len(alice.log)-1].ID == id })
		if errs := alice.frames(ma, func(f frame) bool { return f.ID == id }); len(errs) > 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ok = bob.waitFrame(m, isStart(room, "alice"), 2*time.Second, "typing_start after the NATS restart").at
	}
	return ok
}

// checkSnapshotsWithoutWorker freezes the worker w (SIGSTOP, until every
// thread is stopped): snapshot requests (HTTP and sync) time out (700 ms)
// with an error that says so, instead of hanging; then kills it: with no
// worker at all, the error says that.
func checkSnapshotsWithoutWorker(t *testing.T, g, w *proc, bob *view, room string) {
	t.Helper()
	w.freeze(t)
	began := time.Now()
	st, _, msg := httpTyping(t, g.httpAddr, room, "bob")
	took := time.Since(began)
	if st != 503 || !strings.Contains(msg, "timed out") || took > 2*time.Second {
		t.Fatalf("GET typing with a hung worker: %d %q after %v, want 503 'timed out' after ~700ms", st, msg, took)
	}
	t.Logf("snapshot with a hung worker: %d %q after %v", st, msg, took)
	r, took := bob.request(map[string]any{"type": "sync", "room": room}, 3*time.Second)
	if r.Code != "unavailable" || !strings.Contains(r.Message, "timed out") {
		t.Fatalf("sync with a hung worker: %v after %v, want unavailable 'timed out'", r, took)
	}
	w.kill(syscall.SIGCONT)
	// And with no worker at all, the error says that instead.
	w.kill(syscall.SIGKILL)
	w.waitExit(t, 5*time.Second)
	st, _, msg = httpTyping(t, g.httpAddr, room, "bob")
	if st != 503 || !strings.Contains(msg, "no presence worker") {
		t.Fatalf("GET typing with no worker: %d %q, want 503 naming the missing worker", st, msg)
	}
	t.Logf("snapshot with no worker: %d %q", st, msg)
}
