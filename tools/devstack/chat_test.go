package devstack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/testkit"
	"github.com/ellipsis-chat/ellipsis/tools/backends"
	"github.com/ellipsis-chat/ellipsis/tools/devstack"
)

// TestDemoChat: the dev stack serves the demo page's chat service. Alice
// types and never stops on her own; her message posted to the chat service
// reaches the room's stream (every tab) and ends her indicator for Bob
// through the platform path (a stop without conn on NATS): typing_stop
// "stopped".
func TestDemoChat(t *testing.T) {
	cfg, _ := testConfig(t, nil)
	st := start(t, devstack.Options{Config: cfg, Backends: backends.Options{DefaultRedisURL: "redis://" + testkit.ClosedAddr(t)}})
	room := "chat " + testkit.RandHex(6) + " ☕"
	chatURL := st.URL() + "demo/chat/rooms/" + url.PathEscape(room) + "/messages"

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, chatURL, nil)
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("chat stream: %d", stream.StatusCode)
	}

	alice, bob := dialChat(t, st.WebSocketURL(), "alice", room), dialChat(t, st.WebSocketURL(), "bob", room)
	untilChatFrame(t, alice, "joined", "")
	untilChatFrame(t, bob, "joined", "")
	if err := alice.WriteJSON(map[string]string{"type": "typing_start", "room": room}); err != nil {
		t.Fatal(err)
	}
	untilChatFrame(t, bob, "typing_start", "alice")

	resp, err := http.Post(chatURL, "application/json", strings.NewReader(`{"user":"alice","name":"Alice","text":"hello from the chat"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("post: %d", resp.StatusCode)
	}
	if f := untilChatFrame(t, bob, "typing_stop", "alice"); f["reason"] != "stopped" {
		t.Fatalf("typing_stop %v, want reason stopped", f)
	}
	untilStreamed(t, stream.Body, room)
	// Shutdown must not wait for the open stream.
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	begin := time.Now()
	if err := st.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown with an open chat stream: %v (after %s)", err, time.Since(begin))
	}
}

// TestDemoChatAssistant: the dev stack's chat has the assistant: a
// message mentioning @assistant in a thread makes it think there (shown to
// the room's members with activity thinking and the thread), then its
// reply is streamed in the thread and its indicator stops there.
func TestDemoChatAssistant(t *testing.T) {
	cfg, _ := testConfig(t, nil)
	st := start(t, devstack.Options{Config: cfg, Backends: backends.Options{DefaultRedisURL: "redis://" + testkit.ClosedAddr(t)}, AssistantThink: 300 * time.Millisecond})
	room := "chat " + testkit.RandHex(6)
	chatURL := st.URL() + "demo/chat/rooms/" + url.PathEscape(room) + "/messages"
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, chatURL, nil)
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	bob := dialChat(t, st.WebSocketURL(), "bob", room)
	untilChatFrame(t, bob, "joined", "")

	resp, err := http.Post(chatURL, "application/json", strings.NewReader(`{"user":"alice","name":"Alice","text":"@assistant, thoughts?","thread":"t-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("post: %d", resp.StatusCode)
	}
	if f := untilChatFrame(t, bob, "typing_start", "assistant"); f["thread"] != "t-1" || f["activity"] != "thinking" || f["name"] != "Assistant" {
		t.Fatalf("typing_start %v, want the assistant thinking in t-1", f)
	}
	sc := bufio.NewScanner(stream.Body)
	var got []string
	for len(got) < 2 && sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m struct{ User, Name, Thread string }
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Fatal(err)
			}
			got = append(got, m.User+" "+m.Name+" "+m.Thread)
		}
	}
	if want := []string{"alice Alice t-1", "assistant Assistant t-1"}; !slices.Equal(got, want) {
		t.Fatalf("streamed %q, want %q (%v)", got, want, sc.Err())
	}
	if f := untilChatFrame(t, bob, "typing_stop", "assistant"); f["thread"] != "t-1" || f["reason"] != "stopped" {
		t.Fatalf("typing_stop %v", f)
	}
}

// dialChat connects user (as their name too) to the gateway at wsURL and
// joins room; the connection closes at the test's end.
func dialChat(t *testing.T, wsURL, user, room string) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial(wsURL+"?user="+user+"&name="+user, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.WriteJSON(map[string]string{"type": "join", "room": room}); err != nil {
		t.Fatal(err)
	}
	return c
}

// untilChatFrame reads frames from c for up to 10 s until one of type typ
// (and of user, unless user is "") and returns it.
func untilChatFrame(t *testing.T, c *websocket.Conn, typ, user string) map[string]any {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		var f map[string]any
		if err := c.ReadJSON(&f); err != nil {
			t.Fatalf("waiting for %s of %s: %v", typ, user, err)
		}
		if f["type"] == typ && (user == "" || f["user"] == user) {
			return f
		}
	}
}

// untilStreamed reads the chat's event stream until its first message,
// which must be Alice's "hello from the chat" in room.
func untilStreamed(t *testing.T, body io.Reader, room string) {
	t.Helper()
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m struct{ Room, User, Name, Text string }
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Fatal(err)
			}
			if m.Room != room || m.User != "alice" || m.Name != "Alice" || m.Text != "hello from the chat" {
				t.Fatalf("streamed %+v", m)
			}
			return
		}
	}
	t.Fatalf("chat stream ended without the message: %v", sc.Err())
}

// TestDemoChatOnlyWithAuthNone: the chat service trusts the page's user, so
// with auth=jwt it is not served (the page keeps messages in the tab).
func TestDemoChatOnlyWithAuthNone(t *testing.T) {
	cfg, _ := testConfig(t, map[string]string{"ELLIPSIS_AUTH": "jwt", "ELLIPSIS_JWT_SECRET": "dev-secret-" + testkit.RandHex(6)})
	st := start(t, devstack.Options{Config: cfg, Backends: backends.Options{DefaultRedisURL: "redis://" + testkit.ClosedAddr(t)}})
	if code, body := testkit.HTTPGet(t, st.URL()+"demo/chat/rooms/r/messages"); code != http.StatusNotFound {
		t.Fatalf("chat with auth jwt: %d %s, want 404", code, body)
	}
}
