package worker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The soak's invariants (soak_test.go), each with the promise it checks.

// fail stops the soak with what it takes to replay it.
func (r *soakRun) fail(k roomUser, format string, args ...any) {
	r.t.Helper()
	var log string
	if ty := r.m.typists[k]; ty != nil {
		log = "\n  " + strings.Join(ty.log, "\n  ")
	}
	r.t.Fatalf("soak store %s seed %d step %d typist %s: %s\nreplay: go test -race -run 'TestSoak/%s$' -soak.seed=%d .\nlast actions and events of the typist:%s",
		r.kind, r.seed, r.step, k, fmt.Sprintf(format, args...), r.kind, r.seed, log)
}

// pump takes the events that arrived, checks each, and then checks that
// nobody is shown as a ghost.
func (r *soakRun) pump() {
	r.t.Helper()
	select {
	case err := <-r.pubErr:
		r.t.Fatalf("soak store %s seed %d step %d: publish: %v", r.kind, r.seed, r.step, err)
	default:
	}
	for {
		select {
		case rcv, ok := <-r.s.C():
			if !ok {
				r.t.Fatalf("soak store %s: Pub/Sub subscription closed", r.kind)
			}
			if rcv.Err != nil {
				r.t.Fatalf("soak store %s: bad room event %q: %v", r.kind, rcv.Raw, rcv.Err)
			}
			r.onEvent(rcv.Ev)
		default:
			r.checkGhosts(time.Now().UnixMilli())
			return
		}
	}
}

// onEvent checks one event of the stream (Redis order, per room).
func (r *soakRun) onEvent(ev protocol.RoomEvent) {
	r.t.Helper()
	k := roomUser{scopeKey(ev.Room, ev.Thread), ev.User}
	ty := r.m.typist(k.room, ev.User)
	ty.note("step %d event %s %s ts=%d", r.step, ev.Type, ev.Reason, ev.TsMs)
	// docs/protocol.md, "Throttle": every event "takes a token of a
	// bucket of 2 per throttle with a burst of 4, so receivers get at
	// most 4 + 2⌈T/throttle⌉ events about a user over any span T". The
	// bucket itself allows 4 + ⌊T/(throttle/2)⌋ over a span T (its ts_ms,
	// Redis TIME), which is the tighter of the two.
	ty.events = append(ty.events, ev.TsMs)
	if len(ty.events) > 64 {
		ty.events = ty.events[1:]
	}
	last := ty.events[len(ty.events)-1]
	for i, ts := range ty.events {
		span := max(last-ts, 0)
		n := int64(len(ty.events) - i)
		if bound := 4 + 2*((span+r.thr-1)/r.thr); n > bound {
			r.fail(k, "event rate: %d events within %d ms, bound 4 + 2⌈T/throttle⌉ = %d", n, span, bound)
		}
		if bucket := 4 + span/max(1, r.thr/2); n > bucket {
			r.fail(k, "event rate: %d events within %d ms, the bucket (2 per throttle, burst 4) allows %d", n, span, bucket)
		}
	}
	switch ev.Type {
	case protocol.TypeTypingStart:
		// A typing_start of a shown user is a refresh, which "fans out
		// only when the user's refresh window has ended" ("Throttle"):
		// two starts with no stop between are a throttle apart, the
		// sweeper's trailing-edge start included.
		if ty.shown && ev.TsMs-ty.shownTs < r.thr {
			r.fail(k, "duplicate typing_start: %d ms after the previous one, no typing_stop between (refresh window %d ms)", ev.TsMs-ty.shownTs, r.thr)
		}
		if ev.Name != "N"+ev.User || (ev.TTLMs != r.ttlMin && ev.TTLMs != r.ttlMax) {
			r.fail(k, "typing_start name %q ttl_ms %d, want name %q and one of the workers' ttls", ev.Name, ev.TTLMs, "N"+ev.User)
		}
		ty.shown, ty.shownTs = true, ev.TsMs
	case protocol.TypeTypingStop:
		// "One stop per episode" ("Gateway → client"): each visible
		// episode ends with exactly one typing_stop.
		if !ty.shown {
			r.fail(k, "duplicate typing_stop (%s): the user was not shown", ev.Reason)
		}
		ty.shown = false
	default:
		r.fail(k, "unknown event type %q", ev.Type)
	}
}

// ghostDeadline is when a shown typist must be hidden at the latest:
//   - every entry ends ttl after its start (the longest ttl of the
//     workers), and "an entry whose client went silent is ended with
//     typing_stop expired within ttl + 1 s" ("Timing"), its event maybe
//     waiting for the rate limit's next token (throttle/2, here a whole
//     throttle);
//   - once every entry ended (stops, leaves, disconnects, the platform's
//     stop), the last stop's event goes out when it is applied, or, coalesced,
//     "within throttle + 1 s" of the last command ("Throttle").
//
// Both get soakSlack for the delays and queues in between.
func (r *soakRun) ghostDeadline(ty *soakTypist) int64 {
	slack := soakSlack.Milliseconds()
	deadline := ty.lastStart + r.ttlMax + soakExpiryPush.Milliseconds() + r.thr + slack
	if ty.allDead() {
		deadline = min(deadline, ty.lastCmd+soakSettle.Milliseconds()+slack)
	}
	return deadline
}

// checkGhosts: no typist is shown by the event stream past its deadline.
func (r *soakRun) checkGhosts(now int64) {
	r.t.Helper()
	for k, ty := range r.m.typists {
		if ty.shown && now > r.ghostDeadline(ty) {
			r.fail(k, "ghost: shown by the event stream %d ms past its deadline (last start t=%d, last command t=%d, every entry ended: %v)",
				now-r.ghostDeadline(ty), ty.lastStart, ty.lastCmd, ty.allDead())
		}
	}
}

// idle pumps events for d.
func (r *soakRun) idle(d time.Duration) {
	r.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		r.pump()
		time.Sleep(10 * time.Millisecond)
	}
	r.pump()
}

// barrier waits until every command generated is published and processed
// by a worker.
func (r *soakRun) barrier() {
	r.t.Helper()
	r.inflight.Wait()
	if err := r.e.nc.FlushTimeout(waitLong); err != nil {
		r.t.Fatalf("soak: flush: %v", err)
	}
	want := r.base + float64(r.sent)
	deadline := time.Now().Add(2 * waitLong)
	for r.e.processed() < want {
		if time.Now().After(deadline) {
			r.t.Fatalf("soak store %s seed %d step %d: %v of %d commands processed after %s", r.kind, r.seed, r.step, r.e.processed()-r.base, r.sent, 2*waitLong)
		}
		r.pump()
		time.Sleep(10 * time.Millisecond)
	}
}

// checkpoint is a quiescent point: no command is generated, every one is
// applied, and the coalesced transitions had their time to settle
// (soakSettle). Then the snapshots and the event stream must agree with
// each other and with the model.
func (r *soakRun) checkpoint() {
	r.t.Helper()
	r.barrier()
	r.idle(soakSettle)
	for attempt := 1; ; attempt++ {
		diff := r.compare()
		if diff == "" {
			return
		}
		// A typist may expire between the snapshot and its stop's event
		// (the sweep runs every interval); the next try sees both.
		if attempt == 20 {
			r.t.Fatalf("soak store %s seed %d step %d: snapshot != events after %d tries: %s", r.kind, r.seed, r.step, attempt, diff)
		}
	}
}

// compare takes one snapshot per room and checks it (no hidden typist, no
// ghost), waits for the events published before it, checks the stream (no
// hidden typist), and returns how snapshots and events differ ("" when they
// list the same users).
func (r *soakRun) compare() string {
	r.t.Helper()
	at := time.Now().UnixMilli()
	snaps := map[string]map[string]bool{}
	var scopes []string
	for _, room := range r.m.rooms {
		for sc, listed := range r.snapshotRoom(room, at) {
			snaps[sc] = listed
		}
		for _, th := range soakThreads {
			scopes = append(scopes, scopeKey(room, th))
		}
	}
	r.idle(150 * time.Millisecond)
	// An entry live now has had no expired stop yet: its typist's last
	// event is the start.
	now := time.Now().UnixMilli()
	var diffs []string
	for _, room := range scopes {
		shown := map[string]bool{}
		for k, ty := range r.m.typists {
			if k.room != room {
				continue
			}
			if ty.shown && ty.allDead() {
				r.fail(k, "ghost at a quiescent point: every entry ended by an applied command, still shown %s after the last one applied", soakSettle)
			}
			if ty.shown {
				shown[k.user] = true
			} else if ty.liveUntil(r.ttlMin) > now+soakHiddenMargin.Milliseconds() {
				r.fail(k, "hidden typist: a live entry until at least t=%d, the last event about it was typing_stop (at t=%d; late starts: %v)", ty.liveUntil(r.ttlMin), now, r.e.metric("ellipsis_worker_commands_total", map[string]string{"outcome": "late"}))
			}
		}
		if !maps.Equal(shown, snaps[room]) && (len(shown) > 0 || len(snaps[room]) > 0) {
			diffs = append(diffs, fmt.Sprintf("scope %s: snapshot %v, events %v", room, slices.Sorted(maps.Keys(snaps[room])), slices.Sorted(maps.Keys(shown))))
		}
	}
	return strings.Join(diffs, "; ")
}

// snapshotRoom asks the workers for room's snapshot (at: when it was
// asked, unix ms), checks it and returns the users it lists per scope
// (scopeKey: the room itself and each thread it lists).
func (r *soakRun) snapshotRoom(room string, at int64) map[string]map[string]bool {
	r.t.Helper()
	rep := r.e.snapshot(room)
	if rep.Error != nil {
		r.t.Fatalf("soak store %s: snapshot of %s: %+v", r.kind, room, rep.Error)
	}
	out := map[string]map[string]bool{}
	r.checkScope(scopeKey(room, ""), rep.Users, rep.Total, at, out)
	for _, th := range rep.Threads {
		if !slices.Contains(soakThreads, th.Thread) || th.Thread == "" {
			r.t.Fatalf("soak store %s: snapshot of %s lists thread %q", r.kind, room, th.Thread)
		}
		r.checkScope(scopeKey(room, th.Thread), th.Users, th.Total, at, out)
	}
	// An entry live when the reply came was live when Redis ran the
	// snapshot: its typist is listed.
	done := time.Now().UnixMilli()
	for _, thr := range soakThreads {
		sc := scopeKey(room, thr)
		for k, ty := range r.m.typists {
			if k.room != sc || ty.liveUntil(r.ttlMin) <= done+soakHiddenMargin.Milliseconds() {
				continue
			}
			if !out[sc][k.user] {
				r.fail(k, "hidden typist: a live entry until at least t=%d, not in the snapshot answered at t=%d", ty.liveUntil(r.ttlMin), done)
			}
			r.required++
		}
	}
	return out
}

// checkScope checks the users and total a snapshot lists for scope sc
// and records them in out[sc].
func (r *soakRun) checkScope(sc string, users []protocol.Typist, total int, at int64, out map[string]map[string]bool) {
	r.t.Helper()
	listed := map[string]bool{}
	out[sc] = listed
	for _, u := range users {
		listed[u.User] = true
		k := roomUser{sc, u.User}
		ty := r.m.typist(sc, u.User)
		// A snapshot "lists a typist only once their typing_start was
		// published" and lists users with a live entry ("Snapshots: cap
		// and total"): never past the entry's end.
		// checkpoint calls this once every command is applied and the
		// coalesced transitions settled: a typist whose every entry ended
		// is not listed, whatever the clock.
		if at > ty.lastStart+r.ttlMax+soakSlack.Milliseconds() || ty.allDead() {
			r.fail(k, "ghost in the snapshot at t=%d (last start t=%d, last command t=%d, every entry ended: %v)", at, ty.lastStart, ty.lastCmd, ty.allDead())
		}
		if u.Name != "N"+u.User {
			r.fail(k, "snapshot name %q, want %q", u.Name, "N"+u.User)
		}
	}
	// Below the cap, total counts exactly the listed users.
	if total != len(users) {
		r.t.Fatalf("soak store %s seed %d step %d: snapshot of %s lists %d users, total %d", r.kind, r.seed, r.step, sc, len(users), total)
	}
}

// finish stops the traffic and checks that everyone is hidden in time
// (the sweepers push every expired stop) and that every key of the test's
// prefix is gone once its last renewal's ttl + DefaultKeyGrace + throttle
// passed (docs/protocol.md, "Keys": the user hash "expires ttl + 10 s +
// throttle after its last renewal"). A sweep may renew a user hash whose
// users-zset score lagged, at the latest when the entry expires, so the
// bound counts the ttl twice; the coalesced settle adds throttle + 1 s.
func (r *soakRun) finish() {
	r.t.Helper()
	r.barrier()
	var lastStart, lastCmd int64
	for _, ty := range r.m.typists {
		lastStart, lastCmd = max(lastStart, ty.lastStart), max(lastCmd, ty.lastCmd)
	}
	hideBy := lastStart + r.ttlMax + soakExpiryPush.Milliseconds() + r.thr + soakSlack.Milliseconds()
	for r.anyShown() {
		if time.Now().UnixMilli() > hideBy+1000 {
			r.t.Fatalf("soak store %s seed %d: typists still shown at the end", r.kind, r.seed)
		}
		r.idle(50 * time.Millisecond)
	}
	at := time.Now().UnixMilli()
	for _, room := range r.m.rooms {
		for sc, got := range r.snapshotRoom(room, at) {
			if len(got) > 0 {
				r.t.Fatalf("soak store %s seed %d: scope %s: snapshot %v after every typist expired", r.kind, r.seed, sc, slices.Sorted(maps.Keys(got)))
			}
		}
	}
	keysBy := lastCmd + 2*r.ttlMax + store.DefaultKeyGrace.Milliseconds() + 2*r.thr + soakSettle.Milliseconds() + soakSlack.Milliseconds()
	for {
		keys := r.keys()
		if len(keys) == 0 {
			r.t.Logf("soak: store %s: every key gone %d ms after the last command", r.kind, time.Now().UnixMilli()-lastCmd)
			return
		}
		if time.Now().UnixMilli() > keysBy {
			r.t.Fatalf("soak store %s seed %d: keys left %d ms after the last command (bound %d ms): %s", r.kind, r.seed, time.Now().UnixMilli()-lastCmd, keysBy-lastCmd, strings.Join(keys, ", "))
		}
		r.idle(250 * time.Millisecond)
	}
}

func (r *soakRun) anyShown() bool {
	for _, ty := range r.m.typists {
		if ty.shown {
			return true
		}
	}
	return false
}

// keys lists the keys under the test's unique key prefix (SCAN), each with
// its PTTL, whatever the store names them.
func (r *soakRun) keys() []string {
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	var out []string
	iter := r.e.rdb.Scan(ctx, 0, r.e.cfg.KeyPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		out = append(out, fmt.Sprintf("%s (pttl %s)", k, r.e.rdb.PTTL(ctx, k).Val()))
	}
	if err := iter.Err(); err != nil {
		r.t.Fatalf("soak: scan: %v", err)
	}
	return out
}

// checkCoverage: the soak reached the paths it is for. Each outcome
// below comes from a race the generator makes often (reordered seqs,
// toggles past the rate limit, silent connections, starts right after the
// platform's stop); a soak that never met one tested less than it claims.
func (r *soakRun) checkCoverage() {
	r.t.Helper()
	var counts []string
	for _, o := range []string{"started", "refreshed", "throttled", "coalesced", "stopped", "noop", "stale", "superseded", "late"} {
		n := r.e.metric("ellipsis_worker_commands_total", map[string]string{"outcome": o})
		counts = append(counts, fmt.Sprintf("%s=%v", o, n))
		if n == 0 && o != "late" && o != "superseded" {
			r.t.Errorf("soak store %s seed %d: no command had outcome %s", r.kind, r.seed, o)
		}
	}
	expired := r.e.metric("ellipsis_worker_expired_stops_total", nil)
	if expired == 0 {
		r.t.Errorf("soak store %s seed %d: no expired stop was pushed", r.kind, r.seed)
	}
	if r.required == 0 {
		r.t.Errorf("soak store %s seed %d: no checkpoint had a typist that must be shown", r.kind, r.seed)
	}
	r.t.Logf("soak: store %s: outcomes %s, expired stops %v", r.kind, strings.Join(counts, " "), expired)
}
