package gateway_test

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Issue 24, the gateway side of threads and activities (docs/protocol.md,
// "Threads and activities").

// setFullSnapshot makes the emulated worker answer room's snapshot with s
// (its threads and activities too).
func (e *env) setFullSnapshot(room string, s protocol.Snapshot) {
	e.mu.Lock()
	if e.full == nil {
		e.full = map[string]protocol.Snapshot{}
	}
	e.full[room] = s
	e.mu.Unlock()
}

// readServerFrame reads the next frame as a client's ServerFrame, with
// its bytes.
func (c *client) readServerFrame() (protocol.ServerFrame, []byte) {
	c.t.Helper()
	b := c.readRaw()
	var f protocol.ServerFrame
	if err := json.Unmarshal(b, &f); err != nil {
		c.t.Fatalf("frame %s: %v", b, err)
	}
	return f, b
}

// A typing_start and typing_stop with thread and activity reach the
// workers' command with them, never with a ttl_ms; "typing" is the
// default and sent as no activity; a frame without them is today's
// command.
func TestTypingFramesForwardThreadAndActivity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.Activities = []string{"drawing"} })
	e.startWorker("")
	c := e.dial("alice", "Alice")
	c.join("r")

	c.send(`{"type":"typing_start","room":"r"}`)
	if cmd := e.nextCommand(); cmd.Op != protocol.OpStart || cmd.Thread != "" || cmd.Activity != "" || cmd.TTLMs != 0 || cmd.Room != "r" || cmd.Name != "Alice" {
		t.Fatalf("plain start: command %+v", cmd)
	}
	c.send(`{"type":"typing_start","room":"r","thread":"t-9","activity":"thinking","ttl_ms":60000}`)
	if cmd := e.nextCommand(); cmd.Op != protocol.OpStart || cmd.Thread != "t-9" || cmd.Activity != protocol.ActivityThinking || cmd.TTLMs != 0 {
		t.Fatalf("thread start: command %+v (a client never sets ttl_ms)", cmd)
	}
	c.send(`{"type":"typing_start","room":"r","thread":"t-9","activity":"typing"}`)
	if cmd := e.nextCommand(); cmd.Thread != "t-9" || cmd.Activity != "" {
		t.Fatalf("start with activity typing: command %+v, want no activity", cmd)
	}
	c.send(`{"type":"typing_start","room":"r","activity":"drawing"}`)
	if cmd := e.nextCommand(); cmd.Thread != "" || cmd.Activity != "drawing" {
		t.Fatalf("start with an ELLIPSIS_ACTIVITIES activity: command %+v", cmd)
	}
	c.send(`{"type":"typing_stop","room":"r","thread":"t-9","activity":"thinking"}`)
	if cmd := e.nextCommand(); cmd.Op != protocol.OpStop || cmd.Thread != "t-9" || cmd.Activity != "" {
		t.Fatalf("thread stop: command %+v", cmd)
	}
	c.send(`{"type":"typing_stop","room":"r"}`)
	if cmd := e.nextCommand(); cmd.Op != protocol.OpStop || cmd.Thread != "" {
		t.Fatalf("room stop: command %+v", cmd)
	}
	e.noCommand(100 * time.Millisecond)
}

// Bad thread and activity values are bad_request naming the field and the
// rule, with the frame's room and id, and publish nothing; the connection
// stays.
func TestTypingFrameValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("")
	c := e.dial("alice", "")
	c.join("r")
	for frame, want := range map[string]string{
		`{"type":"typing_start","room":"r","thread":"","id":"a"}`:                                 "thread: must be 1..256 bytes, got 0",
		`{"type":"typing_start","room":"r","thread":"` + strings.Repeat("t", 257) + `","id":"a"}`: "thread: must be 1..256 bytes, got 257",
		`{"type":"typing_stop","room":"r","thread":"a\u0007","id":"a"}`:                           "thread: control character",
		`{"type":"typing_start","room":"r","thread":["t"],"id":"a"}`:                              "thread: must be a string",
		`{"type":"typing_start","room":"r","activity":"Thinking","id":"a"}`:                       "activity: must be 1..32 bytes of a-z and _",
		`{"type":"typing_start","room":"r","activity":"dancing","id":"a"}`:                        "activity: must be one of typing, thinking, recording_audio, recording_video, uploading",
	} {
		c.send(frame)
		f := c.expectError(protocol.CodeBadRequest)
		if !strings.Contains(f.str("message"), want) || f.str("id") != "a" {
			t.Errorf("%s: error %v, want a message with %q and id a", frame, f, want)
		}
		if !strings.Contains(frame, `["t"]`) && f.str("room") != "r" {
			t.Errorf("%s: error %v without the room", frame, f)
		}
	}
	e.noCommand(100 * time.Millisecond)
	c.send(`{"type":"typing_start","room":"r","thread":"ok"}`)
	if cmd := e.nextCommand(); cmd.Thread != "ok" {
		t.Fatalf("after the errors: %+v", cmd)
	}
}

// A connection types in at most ELLIPSIS_MAX_THREADS_PER_USER threads of a
// room at once: one more is too_many_threads (room and id) and publishes
// nothing; a refresh of a counted thread, the room itself and another
// room are never refused; a stop, a leave or the ttl without a refresh
// frees a thread.
//
// The limit's checks run under a ttl of an hour, so no slow step lets a
// counted thread expire in between; the ttl's own check runs in a second
// gateway with a short one (TestTooManyThreadsFreedByTTL).
func TestTooManyThreads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.MaxThreadsPerUser = 2
		c.TypingTTL = time.Hour
	})
	e.startWorker("")
	c := e.dial("alice", "")
	c.join("r")
	c.join("q")
	start := func(room, thread string) {
		c.send(map[string]string{"type": "typing_start", "room": room, "thread": thread, "id": "s-" + thread})
	}
	wantCmd := func(room, thread string) {
		t.Helper()
		if cmd := e.nextCommand(); cmd.Op != protocol.OpStart || cmd.Room != room || cmd.Thread != thread {
			t.Fatalf("command %+v, want a start in %s/%s", cmd, room, thread)
		}
	}
	wantRefused := func(thread string) {
		t.Helper()
		f := c.expectError(protocol.CodeTooManyThreads)
		if f.str("room") != "r" || f.str("id") != "s-"+thread || !containsAll(f.str("message"), "at most 2 threads", "ELLIPSIS_MAX_THREADS_PER_USER") {
			t.Fatalf("too_many_threads frame %v", f)
		}
		e.noCommand(50 * time.Millisecond)
	}
	start("r", "t1")
	wantCmd("r", "t1")
	start("r", "t2")
	wantCmd("r", "t2")
	start("r", "t3")
	wantRefused("t3")
	start("r", "t1") // a refresh
	wantCmd("r", "t1")
	c.send(`{"type":"typing_start","room":"r"}`)
	wantCmd("r", "")
	start("q", "t3") // another room counts on its own
	wantCmd("q", "t3")

	c.send(`{"type":"typing_stop","room":"r","thread":"t2"}`)
	if cmd := e.nextCommand(); cmd.Op != protocol.OpStop || cmd.Thread != "t2" {
		t.Fatalf("stop: %+v", cmd)
	}
	start("r", "t3")
	wantCmd("r", "t3")
	start("r", "t4")
	wantRefused("t4")

	c.send(`{"type":"leave","room":"r","id":"l"}`)
	if cmd := e.nextCommand(); cmd.Op != protocol.OpLeave || cmd.Thread != "" {
		t.Fatalf("leave: %+v", cmd)
	}
	c.expect(protocol.TypeLeft)
	c.join("r")
	start("r", "t5")
	wantCmd("r", "t5")
	start("r", "t6")
	wantCmd("r", "t6")
	start("r", "t7")
	wantRefused("t7")
}

// Without a refresh, a thread stops counting TypingTTL after its last
// start (the worker's entry is gone then): a start refused for the limit
// is accepted once the ttl passed, and never before it. A slow machine
// may see the first try after the ttl already; the test then checks only
// that the acceptance came no earlier than the ttl allows.
func TestTooManyThreadsFreedByTTL(t *testing.T) {
	t.Parallel()
	const ttl = 1500 * time.Millisecond
	e := newEnv(t, func(c *config.Config) {
		c.MaxThreadsPerUser = 2
		c.TypingTTL, c.TypingThrottle, c.TypingRefresh, c.TypingIdleStop = ttl, 300*time.Millisecond, time.Second, 800*time.Millisecond
	})
	e.startWorker("")
	c := e.dial("alice", "")
	c.join("r")
	// t1's start is counted from no earlier than sent: t3 may be accepted
	// only once sent+ttl has passed.
	sent := time.Now()
	for _, th := range []string{"t1", "t2"} {
		c.send(map[string]string{"type": "typing_start", "room": "r", "thread": th})
		if cmd := e.nextCommand(); cmd.Op != protocol.OpStart || cmd.Thread != th {
			t.Fatalf("command %+v, want a start in r/%s", cmd, th)
		}
	}
	refused, acceptedAfter := 0, time.Duration(0)
	testkit.WaitFor(t, 10*time.Second+ttl, "a thread start accepted once the ttl passed without a refresh", func() bool {
		c.send(`{"type":"typing_start","room":"r","thread":"t3"}`)
		c.send(`{"type":"ping","id":"p"}`)
		f, _ := c.readServerFrame()
		acceptedAfter = time.Since(sent) // at or after the gateway's answer
		if f.Type == protocol.TypeError && f.Code == protocol.CodeTooManyThreads {
			refused++
			c.expect(protocol.TypePong)
			time.Sleep(100 * time.Millisecond)
			return false
		}
		if f.Type != protocol.TypePong {
			t.Fatalf("unexpected frame %+v", f)
		}
		return true
	})
	if acceptedAfter < ttl {
		t.Fatalf("a third thread accepted %s after the first two's starts, before their ttl of %s (%d refusals before)", acceptedAfter, ttl, refused)
	}
	if cmd := e.nextCommand(); cmd.Op != protocol.OpStart || cmd.Thread != "t3" {
		t.Fatalf("command %+v, want the start in r/t3", cmd)
	}
}

// joined, typing (sync) and the HTTP snapshot carry the worker's threads
// and activities, self filtered; a room without threads or activities
// gets exactly today's frames; /v1/config serves the activities and the
// thread limit.
func TestSnapshotsCarryThreads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.Activities = []string{"drawing"}; c.MaxThreadsPerUser = 7 })
	e.startWorker("")
	e.setSnapshot("plain", protocol.Typist{User: "bob", Name: "Bob"})
	e.setFullSnapshot("r", protocol.Snapshot{
		Users: []protocol.Typist{{User: "alice"}, {User: "bot", Name: "Assistant"}}, Total: 2,
		Activities: map[string]string{"bot": protocol.ActivityThinking},
		Threads: []protocol.ThreadSnapshot{
			{Thread: "t-1", Users: []protocol.Typist{{User: "alice"}, {User: "bob"}}, Total: 2, Activities: map[string]string{"bob": "drawing"}},
			{Thread: "t-2", Users: []protocol.Typist{{User: "alice"}}, Total: 1},
		},
	})
	c := e.dial("alice", "")
	c.send(`{"type":"join","room":"plain","id":"p"}`)
	if b := c.readRaw(); string(b) != `{"type":"joined","room":"plain","typing":[{"user":"bob","name":"Bob"}],"total":1,"id":"p"}` {
		t.Fatalf("joined of a room without threads: %s", b)
	}
	c.send(`{"type":"join","room":"r","id":"j"}`)
	want := `{"type":"joined","room":"r","typing":[{"user":"bot","name":"Assistant","activity":"thinking"}],"total":1,` +
		`"threads":[{"thread":"t-1","users":[{"user":"bob","activity":"drawing"}],"total":1}],"id":"j"}`
	if b := c.readRaw(); string(b) != want {
		t.Fatalf("joined = %s\nwant     %s", b, want)
	}
	c.send(`{"type":"sync","room":"r","id":"s"}`)
	want = `{"type":"typing","room":"r","users":[{"user":"bot","name":"Assistant","activity":"thinking"}],"total":1,` +
		`"threads":[{"thread":"t-1","users":[{"user":"bob","activity":"drawing"}],"total":1}],"id":"s"}`
	if b := c.readRaw(); string(b) != want {
		t.Fatalf("typing = %s\nwant     %s", b, want)
	}

	status, body := httpGet(t, e.httpURL("/v1/rooms/r/typing?user=bob"), nil)
	b, _ := json.Marshal(body)
	if wantHTTP := `{"room":"r","threads":[{"thread":"t-1","total":1,"users":[{"user":"alice"}]},{"thread":"t-2","total":1,"users":[{"user":"alice"}]}],"total":2,"users":[{"user":"alice"},{"activity":"thinking","name":"Assistant","user":"bot"}]}`; status != 200 || string(b) != wantHTTP {
		t.Fatalf("GET typing as bob = %d %s\nwant %s", status, b, wantHTTP)
	}
	status, body = httpGet(t, e.httpURL("/v1/rooms/plain/typing?user="+url.QueryEscape("alice")), nil)
	if _, has := body["threads"]; status != 200 || has {
		t.Fatalf("GET typing of a room without threads = %d %v", status, body)
	}

	status, body = httpGet(t, e.httpURL("/v1/config"), nil)
	acts, _ := json.Marshal(body["activities"])
	if status != 200 || string(acts) != `["typing","thinking","recording_audio","recording_video","uploading","drawing"]` || body["max_threads_per_user"] != float64(7) {
		t.Fatalf("GET /v1/config = %d %v", status, body)
	}
}

// Room events of a thread reach members as published, with their thread
// and activity; the self filter covers them; and a member gets a room
// event and a thread event of one user each as its own.
func TestThreadEventsFanOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("")
	alice := e.dial("alice", "")
	alice.join("r")
	bob := e.dial("bob", "")
	bob.join("r")
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "alice", Thread: "t", TTLMs: 5000})
	room := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "bob", TTLMs: 5000})
	thread := e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "bob", Thread: "t", Activity: "thinking", TTLMs: 30000})
	if b := alice.readRaw(); string(b) != room {
		t.Fatalf("alice got %s, want %s (her own thread event is filtered)", b, room)
	}
	if b := alice.readRaw(); string(b) != thread {
		t.Fatalf("alice got %s, want %s", b, thread)
	}
	f, _ := bob.readServerFrame() // alice's thread start
	if f.User != "alice" || f.Thread != "t" {
		t.Fatalf("bob got %+v", f)
	}
	bob.send(`{"type":"ping","id":"p"}`)
	bob.expect(protocol.TypePong) // nothing of his own came
}

// A frozen reader conflating its room's events keeps the latest event per
// (room, thread, user): a user's room event and thread event both survive
// (neither replaces the other), and once it reads again it shows the user
// in the room and in the thread, each with its own latest state.
func TestFrozenReaderKeepsRoomAndThreadEventsOfOneUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.WriteStall = 2 * time.Minute })
	e.startWorker("")
	px := newFreezeProxy(t, e.srv.HTTPAddr())
	slow := e.dialURL("ws://"+px.addr()+"/v1/ws?user=alice", nil)
	slow.join("r")
	px.freeze()
	i := 0
	e.flood(t, "the frozen reader to conflate", func() (string, string, bool) {
		i++
		return "r", "u" + strconv.Itoa(i%30), i%2 == 0
	}, func() bool { return e.blocked("alice") })
	// Carol, as kept by a conflating writer: a room start, then a thread
	// start (the later event of the same user), then her room stop and
	// start again, and the thread's activity change.
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "carol", TTLMs: 5000})
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "carol", Thread: "t", TTLMs: 5000})
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: "r", User: "carol", Reason: protocol.ReasonStopped})
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "carol", TTLMs: 5000})
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "carol", Thread: "t", Activity: "thinking", TTLMs: 5000})
	testkit.WaitFor(t, 10*time.Second, "carol's events conflated", func() bool {
		o, ok := e.outboundOf("alice")
		return ok && o.Conflating && o.Conflated >= 2
	})
	if !e.blocked("alice") {
		t.Fatal("the reader is not blocked any more: its events were not conflated")
	}
	px.thaw()
	// Apply what arrives per (thread, user), as a client does, until both
	// of carol's scopes show their final state (kept events are written
	// in any order). Were the two kept as one (room, user), only the
	// thread's last event would come, and the room would never show her.
	state := map[string]string{} // thread + "/" + user → "" (not shown) or the activity
	_ = slow.ws.SetReadDeadline(time.Now().Add(15 * time.Second))
	for state["/carol"] != "typing" || state["t/carol"] != "thinking" {
		_, b, err := slow.ws.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v; carol's scopes %q and %q", err, state["/carol"], state["t/carol"])
		}
		var f protocol.ServerFrame
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		k := f.Thread + "/" + f.User
		switch f.Type {
		case protocol.TypeTypingStart:
			state[k] = cmpOr(f.Activity, "typing")
		case protocol.TypeTypingStop:
			state[k] = ""
		case protocol.TypeTyping, protocol.TypeJoined:
			t.Fatalf("a snapshot %s replaced the conflated events (the room's cap was not passed)", b)
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// A room in summary mode gets typing frames with the threads, self
// filtered per member in every thread (a member typing only in a thread
// never sees itself); a thread's events make a summary due too. A watched
// room's summary is the room itself only.
func TestSummaryModeAndWatchWithThreads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.RoomSummaryMembers = 2
		c.RoomSummaryInterval = 100 * time.Millisecond
		c.WatchInterval = 100 * time.Millisecond
	})
	e.startWorker("")
	e.setSnapshot("big")
	ua, ub, uc := e.dial("ua", ""), e.dial("ub", ""), e.dial("uc", "")
	for _, c := range []*client{ua, ub, uc} {
		c.join("big")
	}
	w := e.dial("watcher", "")
	w.send(`{"type":"watch","rooms":["big"],"id":"w"}`)
	w.expect(protocol.TypeWatching)
	if f := w.expectSummary(); f["total"] != float64(0) {
		t.Fatalf("first summary %v", f)
	}
	// ua types in a thread only; the room itself has x.
	e.setFullSnapshot("big", protocol.Snapshot{
		Users: []protocol.Typist{{User: "x"}}, Total: 1,
		Threads: []protocol.ThreadSnapshot{{Thread: "t", Users: []protocol.Typist{{User: "ua"}}, Total: 1, Activities: map[string]string{"ua": "thinking"}}},
	})
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "big", User: "ua", Thread: "t", Activity: "thinking", TTLMs: 5000})
	want := map[*client]string{
		ua: `{"type":"typing","room":"big","users":[{"user":"x"}],"total":1}`,
		ub: `{"type":"typing","room":"big","users":[{"user":"x"}],"total":1,"threads":[{"thread":"t","users":[{"user":"ua","activity":"thinking"}],"total":1}]}`,
	}
	want[uc] = want[ub]
	for c, w := range want {
		// Summary frames until the one read after the change (the thread
		// event made the room due).
		for {
			b := c.readRaw()
			if string(b) == w {
				break
			}
			var f protocol.ServerFrame
			if err := json.Unmarshal(b, &f); err != nil || f.Type != protocol.TypeTyping || len(f.Users) != 0 {
				t.Fatalf("summary-mode frame %s, want %s", b, w)
			}
		}
	}
	// The watcher's summary: the room's x (the thread's event alone did
	// not make it due; x was there before it as far as the summary goes).
	e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "big", User: "x", TTLMs: 5000})
	f := w.expectSummary()
	if b, _ := json.Marshal(f); f["total"] != float64(1) || !strings.Contains(string(b), `"typing":[{"user":"x"}]`) || strings.Contains(string(b), "ua") {
		t.Fatalf("watch summary %s, want the room's x only", b)
	}
}
