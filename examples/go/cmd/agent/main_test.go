package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/ellipsis-chat/ellipsis/examples/go/chat"
	"github.com/ellipsis-chat/ellipsis/examples/go/internal/stacktest"
)

// TestMain runs the command itself when the tests start this test binary
// as it (runMain), so that its signal handling is tested as a process.
func TestMain(m *testing.M) {
	if os.Getenv("EXAMPLE_AGENT_RUN_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runMain starts the command with args against st; wait for it with
// cmd.Wait.
func runMain(t *testing.T, st *stacktest.Stack, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-nats", stacktest.NATSURL(), "-prefix", st.Prefix}, args...)...)
	cmd.Env = append(os.Environ(), "EXAMPLE_AGENT_RUN_MAIN=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, &out
}

// TestCommandAnswers: the command thinks in the thread, then replies and
// stops there, and exits 0.
func TestCommandAnswers(t *testing.T) {
	st := stacktest.Start(t, nil)
	room := "cmd room"
	alice := st.Dial(t, "alice")
	alice.Join(room)
	cmd, out := runMain(t, st, "-room", room, "-thread", "t-1", "-think", "300ms")
	f := alice.Until(map[string]any{"type": "typing_start", "user": "assistant"})
	if f["thread"] != "t-1" || f["activity"] != "thinking" {
		t.Fatalf("typing_start %v", f)
	}
	f = alice.Until(map[string]any{"type": "typing_stop", "user": "assistant"})
	if f["thread"] != "t-1" || f["reason"] != "stopped" {
		t.Fatalf("typing_stop %v", f)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), `reply in thread "t-1" of room "cmd room": `) || !strings.Contains(out.String(), "stop sent") {
		t.Fatalf("output:\n%s", out)
	}
}

// TestCommandSIGTERM: SIGTERM during the think ends the indicator at once
// (a stop of the agent's conn, reason stopped) with no reply; exit 130.
func TestCommandSIGTERM(t *testing.T) {
	st := stacktest.Start(t, nil)
	room := "cmd-term"
	alice := st.Dial(t, "alice")
	alice.Join(room)
	cmd, out := runMain(t, st, "-room", room, "-think", "1h")
	alice.Until(map[string]any{"type": "typing_start", "user": "assistant"})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	f := alice.Until(map[string]any{"type": "typing_stop", "user": "assistant"})
	if f["reason"] != "stopped" {
		t.Fatalf("typing_stop %v, want reason stopped", f)
	}
	err := cmd.Wait()
	if cmd.ProcessState.ExitCode() != 130 || strings.Contains(out.String(), "reply in") || !strings.Contains(out.String(), "interrupted: stop of its conn sent") {
		t.Fatalf("agent: %v, exit %d\n%s", err, cmd.ProcessState.ExitCode(), out)
	}
}

// TestCommandPostsToChat: with -chat the reply is posted to the chat
// service, in the thread, as the agent's user and name.
func TestCommandPostsToChat(t *testing.T) {
	st := stacktest.Start(t, nil)
	svc := chat.NewService(st.NC, st.Prefix)
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	defer svc.Close()
	room := "cmd/chat"
	ctx, cancel := context.WithTimeout(context.Background(), 2*stacktest.Wait)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/rooms/"+url.PathEscape(room)+"/messages", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	cmd, out := runMain(t, st, "-room", room, "-thread", "t", "-think", "10ms", "-chat", srv.URL+"/", "-reply", "forty-two")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m chat.Message
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Fatal(err)
			}
			if m.User != "assistant" || m.Name != "Assistant" || m.Thread != "t" || m.Text != "forty-two" {
				t.Fatalf("streamed %+v", m)
			}
			return
		}
	}
	t.Fatalf("stream ended without the reply: %v", sc.Err())
}
