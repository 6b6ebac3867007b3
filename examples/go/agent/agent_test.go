package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/examples/go/agent"
	"github.com/ellipsis-chat/ellipsis/examples/go/internal/stacktest"
	"github.com/ellipsis-chat/ellipsis/examples/go/whoistyping"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// watcher joins alice to room and returns her.
func watcher(t *testing.T, st *stacktest.Stack, room string) *stacktest.User {
	t.Helper()
	alice := st.Dial(t, "alice")
	if f := alice.Join(room); f["type"] != "joined" {
		t.Fatalf("join: %v", f)
	}
	return alice
}

func newAgent(t *testing.T, st *stacktest.Stack, opts agent.Options) *agent.Agent {
	t.Helper()
	opts.Prefix = st.Prefix
	opts.OnRefreshError = func(s agent.Scope, err error) { t.Errorf("refresh in %s: %v", s, err) }
	a, err := agent.New(st.NC, opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func snapshot(t *testing.T, st *stacktest.Stack, room string) protocol.SnapshotReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stacktest.Wait)
	defer cancel()
	r, err := whoistyping.Ask(ctx, st.NC, st.Prefix, room)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func users(ts []protocol.Typist) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.User)
	}
	return out
}

// TestAnswerInThread: asked to answer in a thread, the agent is shown to
// a member of the room as thinking in that thread (with its own ttl_ms),
// a snapshot while it works lists it under threads only, and its
// message-posted stop after the reply ends it there, reason "stopped".
func TestAnswerInThread(t *testing.T) {
	st := stacktest.Start(t, nil)
	room, thread := "room:42 ☕", "t-9"
	alice := watcher(t, st, room)
	a := newAgent(t, st, agent.Options{})

	replying, release := make(chan agent.Scope, 1), make(chan struct{})
	answered := make(chan error, 1)
	go func() {
		answered <- a.Answer(context.Background(), agent.Scope{Room: room, Thread: thread}, 50*time.Millisecond, func(_ context.Context, s agent.Scope) error {
			replying <- s
			<-release
			return nil
		})
	}()

	f := alice.Until(map[string]any{"type": "typing_start", "user": "assistant"})
	if f["room"] != room || f["thread"] != thread || f["activity"] != "thinking" || f["name"] != "Assistant" || f["ttl_ms"] != float64(30000) {
		t.Fatalf("typing_start %v, want room %q thread %q activity thinking name Assistant ttl_ms 30000", f, room, thread)
	}
	select {
	case s := <-replying:
		if s != (agent.Scope{Room: room, Thread: thread}) {
			t.Fatalf("reply in %s", s)
		}
	case <-time.After(stacktest.Wait):
		t.Fatal("reply never called")
	}
	// Still shown while the reply is being posted.
	snap := snapshot(t, st, room)
	if len(snap.Users) != 0 || len(snap.Threads) != 1 {
		t.Fatalf("snapshot %+v, want the room itself empty and one thread", snap)
	}
	th := snap.Threads[0]
	if th.Thread != thread || !slices.Equal(users(th.Users), []string{"assistant"}) || th.Activities["assistant"] != "thinking" || th.Total != 1 {
		t.Fatalf("thread snapshot %+v, want assistant thinking in %q", th, thread)
	}

	close(release)
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	f = alice.Until(map[string]any{"type": "typing_stop", "user": "assistant"})
	if f["thread"] != thread || f["reason"] != "stopped" {
		t.Fatalf("typing_stop %v, want thread %q reason stopped", f, thread)
	}
	if snap := snapshot(t, st, room); len(snap.Users)+len(snap.Threads) != 0 {
		t.Fatalf("snapshot after the reply %+v, want nobody", snap)
	}
}

// TestAnswerOutlivesItsTTL: the refreshes keep the agent shown in the
// room itself for longer than two of its ttls; the end is the posted stop,
// not an expiry.
func TestAnswerOutlivesItsTTL(t *testing.T) {
	st := stacktest.Start(t, nil)
	room := "lobby"
	alice := watcher(t, st, room)
	ttl := 3 * time.Second
	a := newAgent(t, st, agent.Options{TTL: ttl, Activity: protocol.ActivityUploading, User: "bot-7", Name: "Bot"})

	replied := make(chan string, 1)
	answered := make(chan error, 1)
	go func() {
		answered <- a.Answer(context.Background(), agent.Scope{Room: room}, 2*ttl+500*time.Millisecond, func(ctx context.Context, _ agent.Scope) error {
			snap, err := whoistyping.Ask(ctx, st.NC, st.Prefix, room)
			if err != nil || !slices.Equal(users(snap.Users), []string{"bot-7"}) || snap.Activities["bot-7"] != "uploading" {
				replied <- fmt.Sprintf("snapshot %+v, %v", snap, err)
			}
			close(replied)
			return nil
		})
	}()
	f := alice.Until(map[string]any{"type": "typing_start", "user": "bot-7"})
	if _, ok := f["thread"]; ok || f["activity"] != "uploading" || f["ttl_ms"] != float64(ttl.Milliseconds()) {
		t.Fatalf("typing_start %v, want the room itself, activity uploading, ttl_ms %d", f, ttl.Milliseconds())
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	if bad, ok := <-replied; ok {
		t.Fatalf("when it replied, after two ttls, the agent was not shown uploading: %s", bad)
	}
	// The next frame about bot-7 is its stop, "stopped": it never expired.
	for {
		f := alice.Next()
		if f["user"] != "bot-7" {
			continue
		}
		if f["type"] == "typing_start" {
			continue // a refresh fanned out after its throttle window
		}
		if f["type"] != "typing_stop" || f["reason"] != "stopped" {
			t.Fatalf("frame %v, want typing_stop reason stopped", f)
		}
		break
	}
}

// TestAnswerCanceled: an answer given up (its context canceled, as on
// SIGTERM) posts no reply and stops its own conn only: another answer of
// the agent in the same scope stays shown until its own reply.
func TestAnswerCanceled(t *testing.T) {
	st := stacktest.Start(t, nil)
	room, thread := "r-cancel", "t"
	scope := agent.Scope{Room: room, Thread: thread}
	alice := watcher(t, st, room)
	a := newAgent(t, st, agent.Options{})

	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan error, 1)
	go func() {
		answered <- a.Answer(ctx, scope, time.Hour, func(context.Context, agent.Scope) error {
			t.Error("reply called after cancel")
			return nil
		})
	}()
	alice.Until(map[string]any{"type": "typing_start", "user": "assistant", "thread": thread})
	other, err := a.Show(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	// Both conns are the agent's: the snapshot lists it once.
	if snap := snapshot(t, st, room); len(snap.Threads) != 1 || snap.Threads[0].Total != 1 {
		t.Fatalf("snapshot %+v, want the agent once in the thread", snap)
	}
	cancel()
	if err := <-answered; !errors.Is(err, context.Canceled) {
		t.Fatalf("Answer = %v, want context.Canceled", err)
	}
	if snap := snapshot(t, st, room); len(snap.Threads) != 1 || !slices.Equal(users(snap.Threads[0].Users), []string{"assistant"}) {
		t.Fatalf("after the cancel of one answer: %+v, want the other still shown", snap)
	}
	if err := other.Posted(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := other.Posted(context.Background()); !errors.Is(err, agent.ErrEnded) {
		t.Fatalf("second Posted = %v, want ErrEnded", err)
	}
	f := alice.Until(map[string]any{"type": "typing_stop", "user": "assistant"})
	if f["thread"] != thread || f["reason"] != "stopped" {
		t.Fatalf("typing_stop %v", f)
	}
}

// TestAnswerRightAfterReply: an answer begun at once after the agent's
// reply in the same scope shows all the same: its first start falls in
// the workers' guard after the posted stop (dropped as superseded), and
// its first refresh, after 2×StopGuard, is outside it.
func TestAnswerRightAfterReply(t *testing.T) {
	st := stacktest.Start(t, nil)
	room := "r-again"
	alice := watcher(t, st, room)
	a := newAgent(t, st, agent.Options{})
	scope := agent.Scope{Room: room}
	if err := a.Answer(context.Background(), scope, 0, func(context.Context, agent.Scope) error { return nil }); err != nil {
		t.Fatal(err)
	}
	s, err := a.Show(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Cancel(context.Background())
	alice.Until(map[string]any{"type": "typing_stop", "user": "assistant"})
	alice.Until(map[string]any{"type": "typing_start", "user": "assistant"})
}

// TestRefusals: bad options and scopes are refused before anything is
// sent, naming the field and the limit.
func TestRefusals(t *testing.T) {
	for _, c := range []struct {
		opts  agent.Options
		field string
	}{
		{agent.Options{TTL: 61 * time.Second}, "ttl_ms: must be whole ms in 1..60000"},
		{agent.Options{TTL: 90 * time.Second, MaxTTL: 2 * time.Minute}, ""},
		{agent.Options{TTL: 1500 * time.Microsecond}, "ttl_ms"},
		{agent.Options{Activity: "Thinking"}, "activity"},
		{agent.Options{User: "a\nb"}, "user"},
		{agent.Options{ConnPrefix: "gw-1"}, "conn"},
		{agent.Options{ConnPrefix: strings.Repeat("x", 240)}, "conn: prefix must be at most 235 bytes"},
	} {
		_, err := agent.New(nil, c.opts)
		if c.field == "" {
			if err != nil {
				t.Errorf("New(%+v) = %v", c.opts, err)
			}
			continue
		}
		var fe *protocol.FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("New(%+v) = %v, want a FieldError with %q", c.opts, err, c.field)
		}
	}
	a, err := agent.New(nil, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for scope, field := range map[agent.Scope]string{{Room: ""}: "room", {Room: "r", Thread: strings.Repeat("t", 257)}: "thread: must be 1..256 bytes"} {
		if _, err := a.Show(context.Background(), scope); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Show(%s) = %v, want %q", scope, err, field)
		}
	}
}
