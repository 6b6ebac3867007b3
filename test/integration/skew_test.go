package integration

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// The version-skew rule of docs/upgrading.md ("Version skew"), run: a
// worker of the old version (skewCommit, built from the git history) and
// one of this checkout share the queue group, so every command and
// snapshot request goes to either of them and one (room, user)'s commands
// are applied by both in turn; a gateway of each version serves one room.
// Receivers on both gateways see every typist of both gateways start,
// stay shown while refreshing, stop, expire and disconnect exactly once;
// joins and HTTP snapshots answered by either worker list exactly who
// types; neither gateway shows a client its own typing.
func TestVersionSkew(t *testing.T) {
	t.Parallel()
	startOldBuild()
	ps := newProcStack(t, nil) // this checkout's binaries, prefixes, cleanup
	oldGWBin, oldWKBin, rev := buildOldBinaries(t)
	t.Logf("old version: %s; new: this checkout", rev)
	t0 := time.Now()
	phase := func(name string) { t.Logf("%v: %s", time.Since(t0).Round(time.Millisecond), name) }

	workers := map[string]*proc{
		"old": launchProc(t, "worker-old", oldWKBin, ps.s, map[string]string{}, "", freePort(t)),
		"new": ps.startWorker(nil),
	}
	gOld := launchProc(t, "gateway-old", oldGWBin, ps.s,
		map[string]string{"ELLIPSIS_GATEWAY_ID": "pold-" + testkit.RandHex(2)}, freePort(t), freePort(t))
	gNew := ps.startGateway(nil)
	gateways := []*proc{gOld, gNew}

	room := "skew room"
	sk := &skewRoom{t: t, room: room, gateways: gateways}
	rOld := sk.view(gOld, "reader-old")
	rNew := sk.view(gNew, "reader-new")
	alice := sk.view(gOld, "alice") // typists are views too: the self filter
	bob := sk.view(gNew, "bob")
	sk.receivers = []*view{rOld, rNew}

	phase("start")
	// Start: a typist on each gateway, seen by every receiver and by the
	// other typist, exactly once.
	marks := sk.marks()
	alice.c.start(room)
	bob.c.start(room)
	sk.waitAllShown("alice,bob", 3*time.Second)
	alice.waitShown(room, "bob", 3*time.Second)
	bob.waitShown(room, "alice", 3*time.Second)
	time.Sleep(testThrottle) // a duplicate would be here by now
	for i, r := range sk.receivers {
		for _, u := range []string{"alice", "bob"} {
			if n := len(r.frames(marks[i], isStart(room, u))); n != 1 {
				t.Fatalf("%s saw %d typing_start for %s after one start, want 1", r.c.name, n, u)
			}
		}
	}

	phase("refresh")
	// Refresh for 2 × ttl: alice as the JS client does (every refresh,
	// each fanned out), bob faster than the throttle (most refreshes
	// throttled: they extend the entry and fan out nothing). Commands of
	// one connection land on both workers in turn; nobody may stop being
	// shown, and the events about each stay within the throttle's bound.
	marks = sk.marks()
	began := time.Now()
	stopAlice := keepTyping(alice.c, room, testRefresh)
	stopBob := keepTyping(bob.c, room, testThrottle/3)
	defer stopAlice()
	defer stopBob()
	// Snapshots while both type: joins on each gateway, and HTTP reads on
	// each until both workers answered some.
	for _, g := range gateways {
		v := sk.view(g, "joiner-"+g.name)
		if got := users(v.join(room).Typing); got != "alice,bob" {
			t.Fatalf("%s joined while alice and bob type: typing %q, want alice,bob", v.c.name, got)
		}
	}
	sk.snapshotsFromBothWorkers(workers, "alice,bob")
	time.Sleep(time.Until(began.Add(2 * testTTL)))
	for i, r := range sk.receivers {
		if stops := r.frames(marks[i], func(f frame) bool { return f.Type == "typing_stop" }); len(stops) > 0 {
			t.Fatalf("%s: a stop while alice and bob refresh: %v", r.c.name, stops)
		}
		if got := r.shown(room); got != "alice,bob" {
			t.Fatalf("%s shows %q while alice and bob refresh", r.c.name, got)
		}
		span := time.Since(began)
		bound := 4 + 2*int(math.Ceil(float64(span)/float64(testThrottle)))
		for _, u := range []string{"alice", "bob"} {
			if n := len(r.frames(marks[i], isAbout(u))); n > bound {
				t.Fatalf("%s got %d events about %s in %v, more than 4 + 2⌈T/throttle⌉ = %d", r.c.name, n, u, span, bound)
			}
		}
	}

	phase("stop")
	// Stop: alice's stop (a later seq than her refreshes, whichever worker
	// applies which) ends her once, and nothing shows her again after it
	// (a refresh fanned out before it may still arrive before it). Bob goes
	// silent: his entry, renewed by both workers, expires once.
	marks = sk.marks()
	stopAlice()
	stopBob()
	alice.c.stop(room)
	sk.waitAllShown("", testTTL+testThrottle+2*time.Second)
	time.Sleep(testThrottle)
	for i, r := range sk.receivers {
		sk.exactlyOneStop(r, marks[i], "alice", "stopped")
		sk.exactlyOneStop(r, marks[i], "bob", "expired")
		stopped := false
		for _, f := range r.frames(marks[i], nil) {
			stopped = stopped || isStop(room, "alice", "")(f)
			if stopped && isStart(room, "alice")(f) {
				t.Fatalf("%s: alice shown again after her stop: %v", r.c.name, f)
			}
		}
	}

	phase("expiry")
	// Expiry: six typists, three on each gateway, start once and go
	// silent; both workers sweep; each yields exactly one expired stop
	// within ttl + 1 s.
	marks = sk.marks()
	var silent []string
	for i := range 6 {
		u := fmt.Sprintf("quiet%d", i)
		v := sk.view(gateways[i%2], u)
		v.c.start(room)
		silent = append(silent, u)
		time.Sleep(30 * time.Millisecond)
	}
	for _, r := range sk.receivers {
		r.waitUntil("showing the quiet typists", 3*time.Second, func() bool {
			return len(r.typing[room]) == len(silent)
		})
	}
	sk.waitAllShown("", testTTL+3*time.Second)
	time.Sleep(testThrottle)
	for i, r := range sk.receivers {
		checkOneExpiredStop(t, r, marks[i], room, silent)
	}

	phase("disconnect")
	// Disconnect: a typist on each gateway closes its connection while
	// typing; its gateway's disconnect ends it once.
	marks = sk.marks()
	var gone []*view
	var goneNames []string
	for _, g := range gateways {
		v := sk.view(g, "leaver-"+g.name)
		v.c.start(room)
		gone = append(gone, v)
		goneNames = append(goneNames, v.c.name)
	}
	sk.waitAllShown(sortedCSV(goneNames...), 3*time.Second)
	for _, v := range gone {
		v.c.close()
	}
	sk.waitAllShown("", 3*time.Second)
	time.Sleep(testThrottle)
	for i, r := range sk.receivers {
		for _, v := range gone {
			sk.exactlyOneStop(r, marks[i], v.c.name, "disconnected")
		}
	}

	phase("quiet")
	// Quiet again: every snapshot is empty, and each worker applied
	// commands and answered snapshots (the two versions really took turns).
	sk.snapshotsFromBothWorkers(workers, "")
	phase("snapshots read")
	for kind, w := range workers {
		if n := metric(t, w.adminAddr, "ellipsis_worker_commands_total", `op="start"`); n == 0 {
			t.Fatalf("the %s worker applied no start: the queue group never gave it one", kind)
		}
	}
	for _, v := range []*view{alice, bob} {
		if fs := v.frames(0, isAbout(v.c.name)); len(fs) > 0 {
			t.Fatalf("%s was shown its own typing: %v", v.c.name, fs)
		}
	}
}

// skewRoom is the one room of TestVersionSkew and its clients.
type skewRoom struct {
	t         *testing.T
	room      string
	gateways  []*proc
	receivers []*view
	reads     int
}

// view dials gateway g as user name (also the display name), joins the
// room and follows the connection.
func (sk *skewRoom) view(g *proc, name string) *view {
	sk.t.Helper()
	v := watch(dial(sk.t, g.wsURL(name, name), name))
	v.join(sk.room)
	return v
}

func (sk *skewRoom) marks() []int {
	var m []int
	for _, r := range sk.receivers {
		m = append(m, r.mark())
	}
	return m
}

func (sk *skewRoom) waitAllShown(users string, within time.Duration) {
	sk.t.Helper()
	for _, r := range sk.receivers {
		r.waitShown(sk.room, users, within)
	}
}

// exactlyOneStop checks that r got one typing_stop for user since mark,
// with reason.
func (sk *skewRoom) exactlyOneStop(r *view, mark int, user, reason string) {
	sk.t.Helper()
	stops := r.frames(mark, isStop(sk.room, user, ""))
	if len(stops) != 1 || stops[0].Reason != reason {
		sk.t.Fatalf("%s: typing_stop for %s: %v, want exactly one with reason %s", r.c.name, user, stops, reason)
	}
}

// snapshotsFromBothWorkers reads the room with GET /v1/rooms/{room}/typing
// on each gateway in turn, each read as another user (the HTTP snapshot
// budget is per user), until each worker has answered at least two more
// snapshots; every answer must list exactly want.
func (sk *skewRoom) snapshotsFromBothWorkers(workers map[string]*proc, want string) {
	sk.t.Helper()
	answered := func() map[string]float64 {
		m := map[string]float64{}
		for kind, w := range workers {
			m[kind] = metric(sk.t, w.adminAddr, "ellipsis_worker_snapshots_total", `outcome="ok"`)
		}
		return m
	}
	before := answered()
	for i := 0; ; i++ {
		g := sk.gateways[i%len(sk.gateways)]
		sk.reads++
		st, got, msg := httpTyping(sk.t, g.httpAddr, sk.room, fmt.Sprintf("snap%d", sk.reads))
		if st != 200 || got != want {
			sk.t.Fatalf("GET typing on %s: %d %q (%s), want 200 %q", g.name, st, got, msg, want)
		}
		now, both := answered(), true
		for kind := range workers {
			both = both && now[kind]-before[kind] >= 2
		}
		if both {
			sk.t.Logf("%d snapshot reads", i+1)
			return
		}
		if i >= 60 {
			sk.t.Fatalf("after %d snapshot reads, not both workers answered two: %v then %v", i+1, before, now)
		}
	}
}
