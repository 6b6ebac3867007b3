package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/testkit"
	"github.com/ellipsis-chat/ellipsis/tools/embedded"
)

// TestMain runs the command itself when re-executed by a test
// (ELLIPSIS_DEV_TEST_MAIN=1).
func TestMain(m *testing.M) { testkit.MainOrCommand(m, "ELLIPSIS_DEV_TEST_MAIN", run) }

func command(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "ELLIPSIS_DEV_TEST_MAIN=1", "ELLIPSIS_LOG_LEVEL=warn")
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestBusyPortExitsNonZero(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out, err := command(t, nil, "-http-addr", ln.Addr().String(), "-admin-addr", "127.0.0.1:0").CombinedOutput()
	if code := exitCode(err); code != 1 {
		t.Fatalf("exit code %d, want 1\n%s", code, out)
	}
	if !strings.Contains(string(out), "ellipsis-dev: cannot start: public listener ELLIPSIS_HTTP_ADDR") ||
		!strings.Contains(string(out), "address already in use") {
		t.Fatalf("unclear message:\n%s", out)
	}
}

func TestBadConfigExits2(t *testing.T) {
	out, err := command(t, []string{"ELLIPSIS_TYPING_REFRESH=9s"}).CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "ELLIPSIS_TYPING_REFRESH") {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
}

// TestServesUntilSignal starts the command with an explicit Redis (an
// embedded one from this test) and an embedded NATS, checks it serves, and
// stops it with SIGINT.
func TestServesUntilSignal(t *testing.T) {
	r, err := embedded.StartRedis(embedded.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := command(t, []string{"ELLIPSIS_REDIS_URL=" + r.URL(), "ELLIPSIS_KEY_PREFIX=test-dev-" + testkit.RandHex(6) + ":"},
		"-http-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-shutdown-drain", "100ms")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	// Read the banner up to the demo page URL.
	lines := make(chan string, 64) // the banner is ~15 lines; the rest is drained below
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var page, redisLine string
	deadline := time.After(20 * time.Second)
	for page == "" || redisLine == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("command ended early; stderr:\n%s", stderr.String())
			}
			if v, found := strings.CutPrefix(strings.TrimSpace(l), "Demo page:"); found {
				page = strings.TrimSpace(v)
			}
			if strings.Contains(l, "Redis:") {
				redisLine = l
			}
		case <-deadline:
			t.Fatalf("no banner; stderr:\n%s", stderr.String())
		}
	}
	go func() { // keep the pipe drained
		for range lines {
		}
	}()
	if !strings.HasPrefix(page, "http://127.0.0.1:") || !strings.Contains(redisLine, r.URL()+" (configured)") {
		t.Fatalf("banner: page %q, redis %q", page, redisLine)
	}
	resp, err := http.Get(page + "v1/config")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"auth":"none"`) {
		t.Fatalf("GET /v1/config = %d %s", resp.StatusCode, body)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(err); code != 0 {
			t.Fatalf("exit code %d after SIGINT; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30 s after SIGINT")
	}
}

// The banner of auth none points at the demo page's thread pane and its
// assistant (the chat service, which runs with auth none only); jwt's
// names no assistant.
func TestOpenHint(t *testing.T) {
	none := openHint(config.AuthNone, "http://localhost:8080")
	for _, want := range []string{"http://localhost:8080", "thread pane", "@assistant"} {
		if !strings.Contains(none, want) {
			t.Errorf("auth none banner lacks %q:\n%s", want, none)
		}
	}
	if jwt := openHint(config.AuthJWT, "http://localhost:8080"); strings.Contains(jwt, "@assistant") {
		t.Errorf("auth jwt banner names the assistant, which runs with auth none only:\n%s", jwt)
	}
}
