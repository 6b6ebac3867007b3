package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/testkit"
	"github.com/ellipsis-chat/ellipsis/testkit/ports"
)

// binaries builds cmd/gateway and cmd/presence-worker once per test run,
// with -trimpath as the Dockerfiles build them (which also lets the old
// build of the version-skew test share the compiled dependencies).
var binaries = struct {
	once sync.Once
	dir  string
	err  error
}{}

func buildBinaries(t *testing.T) (gatewayBin, workerBin string) {
	t.Helper()
	binaries.once.Do(func() {
		dir, err := os.MkdirTemp("", "ellipsis-bin-")
		if err != nil {
			binaries.err = err
			return
		}
		binaries.dir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", dir+string(os.PathSeparator),
			"github.com/ellipsis-chat/ellipsis/services/gateway/cmd/gateway",
			"github.com/ellipsis-chat/ellipsis/services/presence-worker/cmd/presence-worker")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			binaries.err = fmt.Errorf("go build: %v\n%s", err, out.String())
		}
	})
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	return filepath.Join(binaries.dir, "gateway"), filepath.Join(binaries.dir, "presence-worker")
}

func TestMain(m *testing.M) {
	code := m.Run()
	writeRecoveries()
	for _, dir := range []string{binaries.dir, oldBinaries.dir} {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// freePort returns a loopback address for a server this test starts, on a
// port outside the kernel's ephemeral range (see package ports).
func freePort(t *testing.T) string {
	t.Helper()
	return ports.Spare(t)
}

// proc is one service process with its own environment.
type proc struct {
	name      string
	cmd       *exec.Cmd
	httpAddr  string
	adminAddr string
	out       *testkit.SyncBuffer
	exited    chan error // the Wait result, put back by whoever reads it

	mu       sync.Mutex
	exitedAt time.Time
}

// envFor turns a test config into the ELLIPSIS_* environment of a process.
func envFor(s *stack, extra map[string]string) []string {
	env := []string{
		"ELLIPSIS_NATS_URL=" + s.cfg.NATSURL,
		"ELLIPSIS_REDIS_URL=" + s.cfg.RedisURL,
		"ELLIPSIS_KEY_PREFIX=" + s.cfg.KeyPrefix,
		"ELLIPSIS_SUBJECT_PREFIX=" + s.cfg.SubjectPrefix,
		"ELLIPSIS_AUTH=none",
		"ELLIPSIS_TYPING_TTL=" + s.cfg.TypingTTL.String(),
		"ELLIPSIS_TYPING_THROTTLE=" + s.cfg.TypingThrottle.String(),
		"ELLIPSIS_TYPING_REFRESH=" + s.cfg.TypingRefresh.String(),
		"ELLIPSIS_TYPING_IDLE_STOP=" + s.cfg.TypingIdleStop.String(),
		"ELLIPSIS_SHUTDOWN_DRAIN=200ms",
		"ELLIPSIS_LAME_DUCK=0s",
		"ELLIPSIS_BATCH_WINDOW=" + s.cfg.BatchWindow.String(),
		"ELLIPSIS_WORKER_SHARDS=" + fmt.Sprint(s.cfg.WorkerShards),
		"ELLIPSIS_LOG_LEVEL=info",
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

func startProc(t *testing.T, name, bin string, env []string, httpAddr, adminAddr string) *proc {
	t.Helper()
	p := &proc{name: name, httpAddr: httpAddr, adminAddr: adminAddr, out: &testkit.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(env, "ELLIPSIS_ADMIN_ADDR="+adminAddr)
	if httpAddr != "" {
		p.cmd.Env = append(p.cmd.Env, "ELLIPSIS_HTTP_ADDR="+httpAddr)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: start: %v", name, err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
		}
		if t.Failed() {
			t.Logf("--- %s output ---\n%s", name, p.out.String())
		}
	})
	p.waitReady(t, 15*time.Second)
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *proc) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	client := http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("%s exited before ready: %v\n%s", p.name, err, p.out.String())
		default:
		}
		resp, err := client.Get("http://" + p.adminAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not ready within %v\n%s", p.name, within, p.out.String())
}

func (p *proc) wsURL(user, name string) string {
	q := url.Values{"user": {user}}
	if name != "" {
		q.Set("name", name)
	}
	return "ws://" + p.httpAddr + "/v1/ws?" + q.Encode()
}

// Two gateway processes and two worker processes against the real Redis and
// NATS: over three rounds, every receiver sees every other user's start and
// stop exactly once (the queue group delivers each command to one worker;
// each gateway fans out only to its own connections).
func TestProcessesTwoGatewaysTwoWorkers(t *testing.T) {
	t.Parallel()
	gwBin, wkBin := buildBinaries(t)
	s := newStack(t, 0, 0) // prefixes and cleanup only
	env := envFor(s, nil)
	var gws []*proc
	for i := 0; i < 2; i++ {
		startProc(t, fmt.Sprintf("worker%d", i), wkBin, env, "", freePort(t))
	}
	for i := 0; i < 2; i++ {
		gwEnv := append(append([]string{}, env...), fmt.Sprintf("ELLIPSIS_GATEWAY_ID=pgw%d", i))
		gws = append(gws, startProc(t, fmt.Sprintf("gateway%d", i), gwBin, gwEnv, freePort(t), freePort(t)))
	}
	room := "a*b?c[d]"
	var cs []*client
	for i := 0; i < 6; i++ {
		u := fmt.Sprintf("u%d", i)
		c := dial(t, gws[i%2].wsURL(u, strings.ToUpper(u)), u)
		c.join(room)
		cs = append(cs, c)
	}
	for round := 0; round < 3; round++ {
		for _, c := range cs {
			c.start(room)
		}
		time.Sleep(200 * time.Millisecond)
		for _, c := range cs {
			c.stop(room)
		}
		for i, c := range cs {
			got := map[string]int{}
			for _, f := range c.drain(700 * time.Millisecond) {
				if f.Type == "typing_start" || f.Type == "typing_stop" {
					got[f.Type+" "+f.User]++
				}
			}
			for j := range cs {
				u := fmt.Sprintf("u%d", j)
				want := 1
				if j == i {
					want = 0
				}
				if got["typing_start "+u] != want || got["typing_stop "+u] != want {
					t.Fatalf("round %d: %s saw %v for %s, want %d start and %d stop", round, c.name, got, u, want, want)
				}
			}
		}
	}
}
