package chat_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/examples/go/agent"
	"github.com/ellipsis-chat/ellipsis/examples/go/chat"
	"github.com/ellipsis-chat/ellipsis/examples/go/internal/stacktest"
	"github.com/ellipsis-chat/ellipsis/examples/go/whoistyping"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// chatServer serves svc; it is closed (svc first) when the test ends.
func chatServer(t *testing.T, svc *chat.Service) string {
	t.Helper()
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(svc.Close)
	return srv.URL
}

// stream is a room's message stream.
type stream struct {
	t  *testing.T
	sc *bufio.Scanner
}

func openStream(t *testing.T, base, room string) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*stacktest.Wait)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/rooms/"+url.PathEscape(room)+"/messages", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	return &stream{t: t, sc: bufio.NewScanner(resp.Body)}
}

// next returns the stream's next message (the stream's context bounds
// the wait).
func (s *stream) next() chat.Message {
	s.t.Helper()
	for s.sc.Scan() {
		if data, ok := strings.CutPrefix(s.sc.Text(), "data: "); ok {
			var m chat.Message
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				s.t.Fatal(err)
			}
			return m
		}
	}
	s.t.Fatalf("stream ended: %v", s.sc.Err())
	return chat.Message{}
}

func post(t *testing.T, base, room string, p chat.Post) {
	t.Helper()
	body, _ := json.Marshal(p)
	c := http.Client{Timeout: stacktest.Wait}
	resp, err := c.Post(base+"/rooms/"+url.PathEscape(room)+"/messages", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("post %+v: %d", p, resp.StatusCode)
	}
}

// startIn publishes a start of user in thread of room on NATS, as a
// client of the threads-aware gateway would make its gateway send.
func startIn(t *testing.T, st *stacktest.Stack, room, thread, user string) {
	t.Helper()
	cmd, _ := json.Marshal(protocol.Command{V: protocol.Version, Op: protocol.OpStart, Room: room, Thread: thread, User: user, Conn: "test-" + user + ":1", Seq: 1, TsMs: time.Now().UnixMilli()})
	if err := st.NC.Publish(st.Prefix+".typing.v1.cmd", cmd); err != nil {
		t.Fatal(err)
	}
	if err := st.NC.Flush(); err != nil {
		t.Fatal(err)
	}
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

// TestPostInThread: alice types in the room and in a thread; her message
// posted in the thread is streamed with its thread and ends her typing in
// that thread only.
func TestPostInThread(t *testing.T) {
	st := stacktest.Start(t, nil)
	base := chatServer(t, chat.NewService(st.NC, st.Prefix))
	room, thread := "lobby ☕", "t-9"
	_, bob := typing(t, st, room)
	startIn(t, st, room, thread, "alice")
	bob.Until(map[string]any{"type": "typing_start", "user": "alice", "thread": thread})
	s := openStream(t, base, room)

	post(t, base, room, chat.Post{User: "alice", Name: "Alice", Text: "in the thread", Thread: thread})
	if m := s.next(); m.Thread != thread || m.Room != room || m.Text != "in the thread" {
		t.Fatalf("streamed %+v, want thread %q", m, thread)
	}
	f := bob.Until(map[string]any{"type": "typing_stop", "user": "alice"})
	if f["thread"] != thread || f["reason"] != "stopped" {
		t.Fatalf("typing_stop %v, want in thread %q, reason stopped", f, thread)
	}
	snap := snapshot(t, st, room)
	if len(snap.Users) != 1 || snap.Users[0].User != "alice" || len(snap.Threads) != 0 {
		t.Fatalf("snapshot %+v, want alice still typing in the room itself, no thread", snap)
	}
	// The room's stream gives a message of the room itself no thread.
	post(t, base, room, chat.Post{User: "alice", Text: "in the room"})
	if m := s.next(); m.Thread != "" {
		t.Fatalf("streamed %+v, want no thread", m)
	}
}

// TestAssistant: a message mentioning @assistant in a thread makes the
// assistant think there (activity thinking, shown to the room's members),
// then reply there as user assistant, name Assistant, and stop.
func TestAssistant(t *testing.T) {
	st := stacktest.Start(t, nil)
	svc := chat.NewService(st.NC, st.Prefix)
	if err := svc.EnableAssistant(chat.AssistantOptions{Think: 300 * time.Millisecond, OnError: func(s agent.Scope, err error) { t.Errorf("assistant in %s: %v", s, err) }}); err != nil {
		t.Fatal(err)
	}
	base := chatServer(t, svc)
	room, thread := "room:7", "t-1"
	bob := st.Dial(t, "bob")
	bob.Join(room)
	s := openStream(t, base, room)

	post(t, base, room, chat.Post{User: "alice", Name: "Alice", Text: "@Assistant what is 6×7?", Thread: thread})
	f := bob.Until(map[string]any{"type": "typing_start", "user": "assistant"})
	if f["thread"] != thread || f["activity"] != "thinking" || f["name"] != "Assistant" {
		t.Fatalf("typing_start %v, want the assistant thinking in %q", f, thread)
	}
	if m := s.next(); m.User != "alice" {
		t.Fatalf("streamed %+v, want alice's question", m)
	}
	m := s.next()
	if m.User != "assistant" || m.Name != "Assistant" || m.Thread != thread || !strings.HasPrefix(m.Text, "Alice, I thought about it") {
		t.Fatalf("streamed %+v, want the assistant's reply in %q", m, thread)
	}
	f = bob.Until(map[string]any{"type": "typing_stop", "user": "assistant"})
	if f["thread"] != thread || f["reason"] != "stopped" {
		t.Fatalf("typing_stop %v", f)
	}
}

// TestAssistantBounds: one think per scope (a second mention there gets
// no second reply), at most MaxThinks at once (a mention beyond them is
// answered at once that the assistant is busy), and Close ends the
// thinks with their stops.
func TestAssistantBounds(t *testing.T) {
	st := stacktest.Start(t, nil)
	svc := chat.NewService(st.NC, st.Prefix)
	if err := svc.EnableAssistant(chat.AssistantOptions{Think: time.Hour, MaxThinks: 1}); err != nil {
		t.Fatal(err)
	}
	base := chatServer(t, svc)
	room := "bounds"
	bob := st.Dial(t, "bob")
	bob.Join(room)
	s := openStream(t, base, room)

	post(t, base, room, chat.Post{User: "alice", Text: "@assistant one"})
	bob.Until(map[string]any{"type": "typing_start", "user": "assistant"})
	post(t, base, room, chat.Post{User: "alice", Text: "@assistant two", Thread: "t"})
	post(t, base, room, chat.Post{User: "alice", Text: "@assistant again"})
	post(t, base, room, chat.Post{User: "alice", Text: "marker"})
	var got []string
	for range 5 {
		m := s.next()
		got = append(got, m.User+"/"+m.Thread+": "+m.Text)
	}
	want := []string{
		"alice/: @assistant one",
		"alice/t: @assistant two",
		"assistant/t: alice, I am busy with other questions; ask me again in a moment.",
		"alice/: @assistant again",
		"alice/: marker",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("streamed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	svc.Close()
	if f := bob.Until(map[string]any{"type": "typing_stop", "user": "assistant"}); f["reason"] != "stopped" {
		t.Fatalf("typing_stop %v after Close", f)
	}
}
