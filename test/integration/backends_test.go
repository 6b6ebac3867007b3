package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// ---------------------------------------------------------------------------
// Service processes: several gateways and workers, each its own process with
// its own environment, so they can be killed, stopped and restarted.

// procStack runs gateway and worker processes that share one key prefix and
// subject prefix (from a stack, which also cleans the keys up).
type procStack struct {
	t            *testing.T
	s            *stack
	gwBin, wkBin string
	env          map[string]string // overrides of envFor for every process
	gateways     []*proc
	workers      []*proc
	nGW, nWK     int
}

func newProcStack(t *testing.T, env map[string]string) *procStack {
	t.Helper()
	gw, wk := buildBinaries(t)
	return &procStack{t: t, s: newStack(t, 0, 0), gwBin: gw, wkBin: wk, env: env}
}

func mergeEnv(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// startGateway starts one more gateway process and waits until it is ready
// (unless extra sets "wait"="no").
func (ps *procStack) startGateway(extra map[string]string) *proc {
	ps.t.Helper()
	name := fmt.Sprintf("gateway%d", ps.nGW)
	ps.nGW++
	env := mergeEnv(map[string]string{"ELLIPSIS_GATEWAY_ID": fmt.Sprintf("p%s-%s", name, testkit.RandHex(5)[:4])}, ps.env, extra)
	p := launchProc(ps.t, name, ps.gwBin, ps.s, env, freePort(ps.t), freePort(ps.t))
	ps.gateways = append(ps.gateways, p)
	return p
}

// startWorker starts one more worker process.
func (ps *procStack) startWorker(extra map[string]string) *proc {
	ps.t.Helper()
	name := fmt.Sprintf("worker%d", ps.nWK)
	ps.nWK++
	p := launchProc(ps.t, name, ps.wkBin, ps.s, mergeEnv(ps.env, extra), "", freePort(ps.t))
	ps.workers = append(ps.workers, p)
	return p
}

// launchProc starts a service process in its own process group; "wait"="no"
// in env skips the readiness wait.
func launchProc(t *testing.T, name, bin string, s *stack, env map[string]string, httpAddr, adminAddr string) *proc {
	t.Helper()
	wait := env["wait"] != "no"
	delete(env, "wait")
	p := &proc{name: name, httpAddr: httpAddr, adminAddr: adminAddr, out: &testkit.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin)
	base := envFor(s, nil)
	kv := map[string]string{}
	for _, e := range base {
		k, v, _ := strings.Cut(e, "=")
		kv[k] = v
	}
	for k, v := range env {
		kv[k] = v
	}
	kv["ELLIPSIS_ADMIN_ADDR"] = adminAddr
	if httpAddr != "" {
		kv["ELLIPSIS_HTTP_ADDR"] = httpAddr
	}
	for k, v := range kv {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: start: %v", name, err)
	}
	go func() {
		err := p.cmd.Wait()
		p.mu.Lock()
		p.exitedAt = time.Now()
		p.mu.Unlock()
		p.exited <- err
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case err := <-p.exited:
			p.exited <- err
		case <-time.After(5 * time.Second):
		}
		if t.Failed() {
			t.Logf("--- %s output ---\n%s", name, tail(p.out.String(), 60))
		}
	})
	if wait {
		p.waitReady(t, 15*time.Second)
	}
	return p
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// kill sends sig to the process group.
func (p *proc) kill(sig syscall.Signal) { _ = syscall.Kill(-p.cmd.Process.Pid, sig) }

// freeze sends SIGSTOP to the process group and waits until the process is
// hung: kill only queues the signal, and until the kernel has stopped
// every thread (on a loaded machine, milliseconds later) the process
// still answers requests and applies commands.
func (p *proc) freeze(t *testing.T) {
	t.Helper()
	p.kill(syscall.SIGSTOP)
	waitStopped(t, p.cmd.Process.Pid)
}

// waitStopped waits (5 s at most) until the kernel reports every thread of
// process pid stopped: state T (or t, traced) in /proc/<pid>/task/*/stat.
// The leader's state alone is not enough: it stops first, and the other
// threads stop once they next run.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		running, err := runningThreads(dir)
		if err != nil {
			t.Fatalf("reading %s: %v", dir, err)
		}
		if running == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped 5 s after SIGSTOP: threads %s", pid, running)
		}
	}
}

// runningThreads lists the threads under dir (/proc/<pid>/task) that are
// not stopped, as "tid:state" (empty: all stopped). A thread that ended
// meanwhile is skipped.
func runningThreads(dir string) (string, error) {
	tids, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var running []string
	for _, tid := range tids {
		b, err := os.ReadFile(filepath.Join(dir, tid.Name(), "stat"))
		if err != nil {
			continue
		}
		// The state follows the command name in parentheses: "tid (comm) T ...".
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || len(b) < i+3 {
			return "", fmt.Errorf("%s/stat: unexpected %q", tid.Name(), b)
		}
		if st := b[i+2]; st != 'T' && st != 't' {
			running = append(running, tid.Name()+":"+string(st))
		}
	}
	return strings.Join(running, " "), nil
}

// waitExit waits for the process to end and returns its exit code and when
// it ended.
func (p *proc) waitExit(t *testing.T, within time.Duration) (code int, at time.Time) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		p.mu.Lock()
		at = p.exitedAt
		p.mu.Unlock()
		if err == nil {
			return 0, at
		}
		if ee, ok := err.(*exec.ExitError); ok {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return -int(ws.Signal()), at
			}
			return ee.ExitCode(), at
		}
		return -1, at
	case <-time.After(within):
		t.Fatalf("%s did not exit within %v\n%s", p.name, within, tail(p.out.String(), 40))
		return 0, time.Time{}
	}
}

// countLines counts the output lines of p that contain every part.
func (p *proc) countLines(parts ...string) int {
	n := 0
	for _, l := range strings.Split(p.out.String(), "\n") {
		if containsAll(l, parts...) {
			n++
		}
	}
	return n
}

func containsAll(s string, parts ...string) bool {
	for _, x := range parts {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// Admin endpoints.

var adminClient = &http.Client{Timeout: 2 * time.Second}

// readyz returns the /readyz status code and body of an admin address; 0
// when it cannot be reached.
func readyz(addr string) (int, string) {
	resp, err := adminClient.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReadyz polls /readyz until it answers status (with body containing
// every part), and returns when it did.
func waitReadyz(t *testing.T, addr string, status int, within time.Duration, parts ...string) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	var lastCode int
	for {
		code, body := readyz(addr)
		if code == status && containsAll(body, parts...) {
			return time.Now()
		}
		last, lastCode = body, code
		if time.Now().After(deadline) {
			t.Fatalf("/readyz of %s: want %d with %v within %v; last %d %s", addr, status, parts, within, lastCode, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric sums the samples of a Prometheus metric on an admin address whose
// label set contains every given `k="v"` pair.
func metric(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	resp, err := adminClient.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return sumMetric(string(b), name, labels...)
}

func sumMetric(text, name string, labels ...string) float64 {
	sum := 0.0
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if !(strings.HasPrefix(l, name+" ") || strings.HasPrefix(l, name+"{")) {
			continue
		}
		if !containsAll(l, labels...) {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// ---------------------------------------------------------------------------
// Recovery times: every failure test reports how long receivers took to be
// right again. They are logged (go test -v shows them) and, when
// ELLIPSIS_RECOVERY_FILE is set, appended to that file as TSV.

var recoveries struct {
	sync.Mutex
	lines []string
}

func recordRecovery(t *testing.T, failure string, d time.Duration) {
	t.Helper()
	t.Logf("RECOVERY %-58s %8.0f ms", failure, float64(d.Microseconds())/1000)
	recoveries.Lock()
	recoveries.lines = append(recoveries.lines, fmt.Sprintf("%s\t%s\t%.1f", t.Name(), failure, float64(d.Microseconds())/1000))
	recoveries.Unlock()
}

func writeRecoveries() {
	path := os.Getenv("ELLIPSIS_RECOVERY_FILE")
	recoveries.Lock()
	defer recoveries.Unlock()
	if path == "" || len(recoveries.lines) == 0 {
		return
	}
	sort.Strings(recoveries.lines)
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "recovery file:", err)
		return
	}
	defer f.Close()
	for _, l := range recoveries.lines {
		fmt.Fprintln(f, l)
	}
}
