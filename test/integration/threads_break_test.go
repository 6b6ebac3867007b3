package integration

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Hostile clients and services on the thread and activity paths, through
// the real gateways and worker (docs/protocol.md, "Threads and
// activities").

func (c *client) startIn(room, thread string) {
	c.send(map[string]any{"type": "typing_start", "room": room, "thread": thread})
}

// The per-user thread limit holds across devices (the worker drops the
// start over it, silently; the device's next refresh after another
// device freed a thread shows), and frees every thread at a disconnect
// and at expiry: a reconnecting client, and one whose threads expired,
// types in as many new threads as before.
func TestThreadLimitAcrossDevicesReconnectsAndExpiry(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2, 1, func(c *config.Config) { c.MaxThreadsPerUser = 2 })
	const room = "limits"
	phone := dial(t, s.wsURL(0, "alice", ""), "phone")
	laptop := dial(t, s.wsURL(1, "alice", ""), "laptop")
	bob := dial(t, s.wsURL(0, "bob", ""), "bob")
	for _, c := range []*client{phone, laptop, bob} {
		c.join(room)
	}
	phone.startIn(room, "t1")
	bob.next(isScopeStart(room, "t1", "alice"), 5*time.Second, "t1 from the phone")
	laptop.startIn(room, "t2")
	bob.next(isScopeStart(room, "t2", "alice"), 5*time.Second, "t2 from the laptop")
	// The laptop types in one thread, its gateway lets t3 through; the
	// user already types in two: the worker drops it.
	laptop.startIn(room, "t3")
	bob.quiet(isScopeStart(room, "t3", "alice"), 500*time.Millisecond, "t3 over the user's limit")
	laptop.quiet(func(f frame) bool { return f.Type == "error" }, 100*time.Millisecond, "an error for a start the worker drops")
	if th := threadsOf(bob.syncFrame(room).Threads); th != "t1:alice/;t2:alice/" {
		t.Fatalf("threads %q, want t1 and t2", th)
	}
	// The phone goes: t1 ends, and the laptop's refresh of t3 now shows.
	phone.close()
	bob.next(isScopeStop(room, "t1", "alice", "disconnected"), 5*time.Second, "t1 ended by the phone's disconnect")
	laptop.startIn(room, "t3")
	bob.next(isScopeStart(room, "t3", "alice"), 5*time.Second, "t3 once t1 was freed")

	// A reconnect: the disconnect frees both threads at the worker.
	laptop.close()
	bob.next(isScopeStop(room, "t2", "alice", "disconnected"), 5*time.Second, "t2 ended by the laptop's disconnect")
	bob.next(isScopeStop(room, "t3", "alice", "disconnected"), 5*time.Second, "t3 ended by the laptop's disconnect")
	again := dial(t, s.wsURL(1, "alice", ""), "laptop again")
	again.join(room)
	again.startIn(room, "t4")
	again.startIn(room, "t5")
	bob.next(isScopeStart(room, "t4", "alice"), 5*time.Second, "t4 after the reconnect")
	bob.next(isScopeStart(room, "t5", "alice"), 5*time.Second, "t5 after the reconnect")
	again.startIn(room, "t6")
	again.next(func(f frame) bool { return f.Type == "error" && f.Code == protocol.CodeTooManyThreads }, 5*time.Second, "too_many_threads at the gateway")

	// No refresh: both expire, and two new threads are taken.
	bob.next(isScopeStop(room, "t4", "alice", "expired"), expiryBound+2*time.Second, "t4 expired")
	bob.next(isScopeStop(room, "t5", "alice", "expired"), expiryBound+2*time.Second, "t5 expired")
	again.startIn(room, "t6")
	again.startIn(room, "t7")
	bob.next(isScopeStart(room, "t6", "alice"), 5*time.Second, "t6 after the expiry")
	bob.next(isScopeStart(room, "t7", "alice"), 5*time.Second, "t7 after the expiry")
	again.quiet(func(f frame) bool { return f.Type == "error" }, 100*time.Millisecond, "an error after the expiry")
}

// A platform service's start in a thread with its own ttl_ms and activity
// reaches WebSocket clients with them, outlives the standard ttl, and
// expires on its own ttl; bad values are dropped with the field counted
// and publish nothing; a room user's client that never sent thread gets
// the thread's events as published.
func TestServiceThreadTTLAndBadValues(t *testing.T) {
	t.Parallel()
	const serviceTTL = 4000
	s := newStack(t, 1, 1, func(c *config.Config) { c.ServiceMaxTTL = 10 * time.Second })
	const room = "svc"
	bob := dial(t, s.wsURL(0, "bob", ""), "bob")
	bob.join(room)
	nc := connectNATS(t, s.cfg.NATSURL)
	raw := func(payload string) {
		t.Helper()
		if err := nc.Publish(names.New("", s.cfg.SubjectPrefix).CommandSubject(), []byte(payload)); err != nil {
			t.Fatal(err)
		}
	}
	bad := map[string]string{
		`{"v":1,"op":"start","room":"svc","user":"bot","conn":"bot:1","thread":"t","ttl_ms":10001}`:                                      "ttl_ms",
		`{"v":1,"op":"start","room":"svc","user":"bot","conn":"bot:1","thread":"t","ttl_ms":-1}`:                                         "ttl_ms",
		`{"v":1,"op":"start","room":"svc","user":"bot","conn":"bot:1","thread":"t","ttl_ms":1.5}`:                                        "ttl_ms",
		`{"v":1,"op":"start","room":"svc","user":"bot","conn":"bot:1","thread":"t","ttl_ms":"4000"}`:                                     "ttl_ms",
		`{"v":1,"op":"start","room":"svc","user":"bot","conn":"bot:1","thread":"` + strings.Repeat("t", 257) + `"}`:                      "thread",
		`{"v":1,"op":"start","room":"svc","user":"bot","conn":"bot:1","thread":"a\u0007"}`:                                               "thread",
		`{"v":1,"op":"start","room":"svc","user":"bot","conn":"bot:1","thread":7}`:                                                       "thread",
		`{"v":1,"op":"leave","room":"svc","user":"bot","conn":"bot:1","thread":"t"}`:                                                     "thread",
		`{"v":1,"op":"start","room":"svc","user":"bot","conn":"bot:1","thread":"t","activity":"Thinking"}`:                               "activity",
		`{"v":1,"op":"start","room":"svc","user":"bot","conn":"bot:1","thread":"t","activity":"dancing"}`:                                "activity",
		`{"v":1,"op":"start","room":"svc","user":"bot","conn":"bot:1","thread":"t","activity":"` + strings.Repeat("a", 33) + `"}`:        "activity",
		`{"v":1,"op":"start","room":"svc","user":"bot","conn":"bot:1","activity":"thinking","ttl_ms":4000,"thread":"t","rooms":["svc"]}`: "rooms",
	}
	for p := range bad {
		raw(p)
	}
	admin := s.workers[0].AdminAddr()
	want := map[string]float64{}
	for _, f := range bad {
		want[f]++
	}
	deadline := time.Now().Add(10 * time.Second)
	for f, n := range want {
		for metric(t, admin, "ellipsis_worker_invalid_payloads_total", `field="`+f+`"`) < n {
			if time.Now().After(deadline) {
				t.Fatalf("invalid_payloads_total{field=%q} = %v, want %v", f, metric(t, admin, "ellipsis_worker_invalid_payloads_total", `field="`+f+`"`), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	publishCommand(t, nc, s.cfg.SubjectPrefix, protocol.Command{Op: protocol.OpStart, Room: room, Thread: "t", User: "bot", Name: "Assistant", Conn: "bot:1", Activity: protocol.ActivityThinking, TTLMs: serviceTTL})
	f := bob.next(func(f frame) bool { return f.Type == "typing_start" && f.User == "bot" }, 5*time.Second, "the service's start")
	if f.Thread != "t" || f.Activity != protocol.ActivityThinking || f.TTLMs != serviceTTL || f.Name != "Assistant" {
		t.Fatalf("service start %v (the first event about bot: none of the bad commands published)", f)
	}
	started := f.TsMs
	// Past the standard ttl (1.5 s) plus its expiry slack, still shown.
	bob.quiet(isAbout("bot"), expiryBound+500*time.Millisecond, "bot ended before its own ttl")
	if th := threadsOf(bob.syncFrame(room).Threads); th != "t:bot/thinking" {
		t.Fatalf("threads %q past the standard ttl", th)
	}
	stop := bob.next(isScopeStop(room, "t", "bot", "expired"), serviceTTL*time.Millisecond+2*time.Second, "the service's entry expired")
	if d := stop.TsMs - started; d < serviceTTL || d > serviceTTL+1000 {
		t.Fatalf("expired %d ms after its start, want within %d..%d", d, serviceTTL, serviceTTL+1000)
	}
}

// An activity change of a shown user is a state change: shown at once
// (not held by the refresh window), and a burst of changes faster than
// the event rate limit is coalesced to the true final activity; the final
// state is exact in the thread's snapshot too.
func TestActivityChangesCoalesceToFinalState(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1, func(c *config.Config) { c.TypingTTL = 10 * time.Second }) // outlives the burst's settling
	const room = "acts"
	alice := dial(t, s.wsURL(0, "alice", ""), "alice")
	bob := dial(t, s.wsURL(0, "bob", ""), "bob")
	alice.join(room)
	bob.join(room)
	act := func(a string) {
		alice.send(map[string]any{"type": "typing_start", "room": room, "thread": "t", "activity": a})
	}
	act("typing")
	first := bob.next(isScopeStart(room, "t", "alice"), 5*time.Second, "alice in the thread")
	act("thinking")
	f := bob.next(isScopeStart(room, "t", "alice"), 5*time.Second, "the change to thinking")
	if f.Activity != protocol.ActivityThinking || f.TsMs-first.TsMs >= testThrottle.Milliseconds() {
		t.Fatalf("change %v, %d ms after the start: want thinking inside the refresh window (%v)", f, f.TsMs-first.TsMs, testThrottle)
	}
	seq := []string{"uploading", "typing", "recording_audio", "thinking", "typing", "recording_video", "uploading", "typing", "thinking", "uploading"}
	began := time.Now()
	for _, a := range seq {
		act(a)
	}
	// Apply bob's events as a client does until the thread settles.
	state, events := "thinking", 0
	for end := time.Now().Add(testThrottle + 2*time.Second); time.Now().Before(end); {
		f, ok := bob.tryNext(isAbout("alice"), 100*time.Millisecond)
		if !ok {
			continue
		}
		if f.Thread != "t" {
			continue // the room scope's own events (its expiry: no refresh)
		}
		events++
		switch f.Type {
		case "typing_start":
			state = cmpOr(f.Activity, "typing")
		case "typing_stop":
			state = ""
		}
	}
	if state != "uploading" {
		t.Fatalf("bob shows %q after the burst, want the final uploading", state)
	}
	span := time.Since(began)
	if limit := 4 + 2*int(span/testThrottle+1); events > limit {
		t.Fatalf("%d events about alice's thread in %v, over 4 + 2⌈T/throttle⌉ = %d", events, span, limit)
	}
	if th := threadsOf(bob.syncFrame(room).Threads); th != "t:alice/uploading" {
		t.Fatalf("threads %q, want uploading", th)
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Thread ids at the limits of the id rules (256 bytes; characters JSON
// escapes; ':' and '%', which the keys' encoding escapes; multi-byte
// UTF-8 and U+2028) come back exactly, decoded, on every event a scope
// can end with (a stop, a leave's and a disconnect's stops built by the
// scripts, an expiry) and in snapshots.
func TestHostileThreadIDsRoundTrip(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1, func(c *config.Config) { c.MaxThreadsPerUser = 8 })
	const room = "ids"
	threads := []string{
		strings.Repeat("<", 256),
		strings.Repeat("é", 128),
		`a:b`, `%3A%`, `"\` + "\u2028" + `</script>`, "u:alice", ".", strings.Repeat(`\`, 255) + "x",
	}
	bob := dial(t, s.wsURL(0, "bob", ""), "bob")
	bob.join(room)
	sorted := append([]string(nil), threads...)
	slices.Sort(sorted)
	wantSnap := ""
	for i, th := range sorted {
		if i > 0 {
			wantSnap += ";"
		}
		wantSnap += th + ":alice/"
	}
	for _, end := range []string{"stopped", "left", "disconnected", "expired"} {
		alice := dial(t, s.wsURL(0, "alice", ""), "alice-"+end)
		alice.join(room)
		for _, th := range threads {
			alice.startIn(room, th)
			bob.next(isScopeStart(room, th, "alice"), 5*time.Second, "start in "+th[:1])
		}
		if got := threadsOf(bob.syncFrame(room).Threads); got != wantSnap {
			t.Fatalf("%s: snapshot threads\n%q\nwant\n%q", end, got, wantSnap)
		}
		switch end {
		case "stopped":
			for _, th := range threads {
				alice.send(map[string]any{"type": "typing_stop", "room": room, "thread": th})
			}
		case "left":
			alice.send(map[string]any{"type": "leave", "room": room})
		case "disconnected":
			alice.close()
		}
		within := 5 * time.Second
		if end == "expired" {
			within = expiryBound + 2*time.Second
		}
		left := map[string]bool{}
		for _, th := range threads {
			left[th] = true
		}
		for len(left) > 0 {
			f := bob.next(func(f frame) bool { return f.Type == "typing_stop" && f.User == "alice" }, within, end+" stops")
			if f.Reason != end || !left[f.Thread] {
				t.Fatalf("%s: stop %q reason %s; still expecting %d threads", end, f.Thread, f.Reason, len(left))
			}
			delete(left, f.Thread)
		}
		if snap := bob.syncFrame(room); snap.Threads != nil {
			t.Fatalf("%s: threads left %q", end, threadsOf(snap.Threads))
		}
		if end != "disconnected" {
			alice.close()
		}
	}
}
