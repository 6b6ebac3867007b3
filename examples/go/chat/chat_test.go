package chat_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ellipsis-chat/ellipsis/examples/go/chat"
	"github.com/ellipsis-chat/ellipsis/examples/go/internal/stacktest"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// typing makes alice type in room, and returns bob once he has seen it.
func typing(t *testing.T, st *stacktest.Stack, room string) (alice, bob *stacktest.User) {
	t.Helper()
	alice, bob = st.Dial(t, "alice"), st.Dial(t, "bob")
	for _, u := range []*stacktest.User{alice, bob} {
		if f := u.Join(room); f["type"] != "joined" {
			t.Fatalf("%s: join: %v", u.Name, f)
		}
	}
	alice.Send(map[string]any{"type": "typing_start", "room": room})
	bob.Until(map[string]any{"type": "typing_start", "user": "alice", "room": room})
	return alice, bob
}

// TestStopTyping: alice types (and never stops on her own); the chat
// service's stop ends her indicator for bob with reason "stopped".
func TestStopTyping(t *testing.T) {
	st := stacktest.Start(t, nil)
	room := "room:42 ☕"
	_, bob := typing(t, st, room)
	ctx, cancel := context.WithTimeout(context.Background(), stacktest.Wait)
	defer cancel()
	if err := chat.StopTyping(ctx, st.NC, st.Prefix, room, "alice"); err != nil {
		t.Fatal(err)
	}
	f := bob.Until(map[string]any{"type": "typing_stop", "user": "alice", "room": room})
	if f["reason"] != "stopped" {
		t.Fatalf("typing_stop reason %v, want stopped: %v", f["reason"], f)
	}
}

func TestStopTypingInvalid(t *testing.T) {
	st := stacktest.Start(t, nil)
	err := chat.StopTyping(context.Background(), st.NC, st.Prefix, "", "alice")
	var fe *protocol.FieldError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "room") {
		t.Fatalf("err = %v, want a FieldError naming room", err)
	}
}

// TestServicePost: a message posted to the chat service reaches the room's
// stream, and its author's indicator ends for bob.
func TestServicePost(t *testing.T) {
	st := stacktest.Start(t, nil)
	svc := chat.NewService(st.NC, st.Prefix)
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	defer svc.Close()
	room := "lobby/1"
	_, bob := typing(t, st, room)

	streamURL := srv.URL + "/rooms/" + strings.ReplaceAll(room, "/", "%2F") + "/messages"
	ctx, cancel := context.WithTimeout(context.Background(), stacktest.Wait)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, streamURL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	post, err := http.Post(streamURL, "application/json", strings.NewReader(`{"user":"alice","name":"Alice","text":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	if post.StatusCode != http.StatusCreated {
		t.Fatalf("post: %d", post.StatusCode)
	}
	f := bob.Until(map[string]any{"type": "typing_stop", "user": "alice", "room": room})
	if f["reason"] != "stopped" {
		t.Fatalf("typing_stop reason %v, want stopped", f["reason"])
	}

	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m chat.Message
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatal(err)
		}
		if m.Room != room || m.User != "alice" || m.Text != "hello" || m.ID != 1 {
			t.Fatalf("streamed %+v", m)
		}
		return
	}
	t.Fatalf("stream ended without the message: %v", sc.Err())
}

func TestServiceRefusesBadPosts(t *testing.T) {
	st := stacktest.Start(t, nil)
	svc := chat.NewService(st.NC, st.Prefix)
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	for body, field := range map[string]string{
		`{"user":"","text":"x"}`: "user",
		`{"user":"a","text":""}`: "text",
		`{"user":"a","text":"` + strings.Repeat("x", chat.MaxTextBytes+1) + `"}`: "text",
		`nope`: "body",
		`{"user":"a","text":"x","thread":"a\u0000b"}`:                         "thread: control character",
		`{"user":"a","text":"x","thread":"` + strings.Repeat("t", 257) + `"}`: "thread: must be 1..256 bytes",
	} {
		resp, err := http.Post(srv.URL+"/rooms/r/messages", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), field) {
			t.Errorf("post %.40s: %d %s, want 400 naming %q", body, resp.StatusCode, msg, field)
		}
	}
	svc.Close()
	c := http.Client{Timeout: stacktest.Wait}
	resp, err := c.Get(srv.URL + "/rooms/r/messages")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("stream after Close: %d, want 503", resp.StatusCode)
	}
}
