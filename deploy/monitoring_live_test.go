package deploy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// The Redis and NATS the services run against: ELLIPSIS_TEST_REDIS_URL and
// ELLIPSIS_TEST_NATS_URL (`make test` starts private ones,
// scripts/testenv.sh), else the machine's on 6379 and 4222. The processes
// get their own key and subject prefixes, so they share them with any
// other test.
func testBackends() (redisURL, natsURL string) {
	redisURL, natsURL = os.Getenv("ELLIPSIS_TEST_REDIS_URL"), os.Getenv("ELLIPSIS_TEST_NATS_URL")
	if redisURL == "" {
		redisURL = "redis://127.0.0.1:6379"
	}
	if natsURL == "" {
		natsURL = "nats://127.0.0.1:4222"
	}
	return redisURL, natsURL
}

// Every metric the dashboard and the alerting rules query is exported by
// the running binaries: the gateway and the presence worker are built and
// started as separate processes, a little traffic goes through a real
// WebSocket (join, typing_start, typing_stop, leave, and a handshake
// refused at the connection limit) so that labelled series exist, and both
// /metrics are scraped. A histogram counts as
// exported through its _bucket, _sum and _count series, which is how
// queries name them.
func TestMonitoringQueriesOnlyExportedMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs both services against Redis and NATS; make test runs it (no -short)")
	}
	queried := queriedMetrics(t)
	gw, wk := startServices(t)
	driveTraffic(t, gw.httpAddr)
	refuseAtLimit(t, gw.httpAddr)

	// Series appear as the traffic is handled: poll until every queried
	// name is there, or the deadline passes and the missing ones are named.
	var missing []string
	var exported map[string]bool
	deadline := time.Now().Add(30 * time.Second)
	for {
		exported = map[string]bool{}
		for _, p := range []*svcProc{gw, wk} {
			for name := range scrape(t, p) {
				exported[name] = true
			}
		}
		missing = missing[:0]
		for name := range queried {
			if !exported[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("%s is queried but neither binary exports it; queried by:\n    %s", name, strings.Join(queried[name], "\n    "))
	}
	if len(missing) > 0 {
		t.Logf("gateway output:\n%s\nworker output:\n%s", gw.out.String(), wk.out.String())
		return
	}
	t.Logf("%d metric names queried, all among the %d series names the binaries export", len(queried), len(exported))
}

// A name that no binary exports must be reported: the scrape parser and
// the comparison above would otherwise pass anything.
func TestExpositionNames(t *testing.T) {
	text := "# HELP a_seconds x\n# TYPE a_seconds histogram\na_seconds_bucket{le=\"1\"} 0\na_seconds_sum 0\na_seconds_count 0\n" +
		"# HELP b_total x\n# TYPE b_total counter\nb_total{kind=\"x\"} 1\nc 2 1700000000000\n"
	got := expositionNames(t, strings.NewReader(text))
	var names []string
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[a_seconds_bucket a_seconds_count a_seconds_sum b_total c]" {
		t.Fatalf("names %v", names)
	}
}

// svcProc is one running service binary.
type svcProc struct {
	name      string
	httpAddr  string // the gateway's public listener; "" for the worker
	adminAddr string
	cmd       *exec.Cmd
	out       *testkit.SyncBuffer
}

// startServices builds both binaries into a temporary directory and runs
// them on spare loopback ports, with unique prefixes and ELLIPSIS_AUTH=none
// (the gateway with ELLIPSIS_MAX_CONNS=liveMaxConns); it returns once both
// answer /readyz 200.
func startServices(t *testing.T) (gateway, worker *svcProc) {
	t.Helper()
	bin := t.TempDir()
	root := repoRoot(t)
	for _, svc := range services {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, svc.name), "./cmd/"+svc.name)
		cmd.Dir = filepath.Join(root, svc.dir)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", svc.name, err, out)
		}
	}
	redisURL, natsURL := testBackends()
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	prefix := "mon" + hex.EncodeToString(id)
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"ELLIPSIS_REDIS_URL=" + redisURL,
		"ELLIPSIS_NATS_URL=" + natsURL,
		"ELLIPSIS_KEY_PREFIX=" + prefix + ":",
		"ELLIPSIS_SUBJECT_PREFIX=" + prefix,
		"ELLIPSIS_AUTH=none",
		"ELLIPSIS_LAME_DUCK=0s",
		"ELLIPSIS_SHUTDOWN_DRAIN=200ms",
		"ELLIPSIS_LOG_LEVEL=warn",
	}
	worker = startService(t, filepath.Join(bin, "presence-worker"), "presence-worker", env, "")
	gateway = startService(t, filepath.Join(bin, "gateway"), "gateway",
		append(env, "ELLIPSIS_MAX_CONNS="+strconv.Itoa(liveMaxConns)), spareAddr(t))
	return gateway, worker
}

// spareAddr returns a loopback address no one listened on a moment ago.
func spareAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startService(t *testing.T, bin, name string, env []string, httpAddr string) *svcProc {
	t.Helper()
	p := &svcProc{name: name, httpAddr: httpAddr, adminAddr: spareAddr(t), out: &testkit.SyncBuffer{}}
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(append([]string{}, env...), "ELLIPSIS_ADMIN_ADDR="+p.adminAddr)
	if httpAddr != "" {
		p.cmd.Env = append(p.cmd.Env, "ELLIPSIS_HTTP_ADDR="+httpAddr)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-exited
		}
	})
	client := http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s exited before it was ready: %v\n%s", name, err, p.out.String())
		default:
		}
		resp, err := client.Get("http://" + p.adminAddr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 30 s (is Redis at ELLIPSIS_TEST_REDIS_URL and NATS at ELLIPSIS_TEST_NATS_URL running? `make test` starts them)\n%s", name, p.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// driveTraffic has alice and bob join a room; alice starts and stops
// typing (bob receives both events: delivery delay observed), then both
// leave. Every frame is awaited, with generous deadlines.
func driveTraffic(t *testing.T, httpAddr string) {
	t.Helper()
	dial := func(user string) *websocket.Conn {
		d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
		c, resp, err := d.Dial("ws://"+httpAddr+"/v1/ws?user="+user+"&name="+user, nil)
		if err != nil {
			t.Fatalf("dial %s: %v", user, err)
		}
		resp.Body.Close()
		t.Cleanup(func() { c.Close() })
		return c
	}
	send := func(c *websocket.Conn, frame string) {
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := c.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
			t.Fatalf("send %s: %v", frame, err)
		}
	}
	// await reads frames until one of type typ arrives.
	await := func(c *websocket.Conn, who, typ string) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			_ = c.SetReadDeadline(deadline)
			_, msg, err := c.ReadMessage()
			if err != nil {
				t.Fatalf("%s waiting for %s: %v", who, typ, err)
			}
			var f struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(msg, &f) == nil && f.Type == typ {
				return
			}
		}
	}
	alice, bob := dial("alice"), dial("bob")
	for _, c := range []*websocket.Conn{alice, bob} {
		send(c, `{"type":"join","room":"monitoring","id":"j"}`)
	}
	await(alice, "alice", "joined")
	await(bob, "bob", "joined")
	send(alice, `{"type":"typing_start","room":"monitoring"}`)
	await(bob, "bob", "typing_start")
	send(alice, `{"type":"typing_stop","room":"monitoring"}`)
	await(bob, "bob", "typing_stop")
	for _, c := range []*websocket.Conn{alice, bob} {
		send(c, `{"type":"leave","room":"monitoring","id":"l"}`)
	}
	await(alice, "alice", "left")
	await(bob, "bob", "left")
}

// liveMaxConns is the gateway's connection limit in these tests: the two
// clients of driveTraffic fill it.
const liveMaxConns = 2

// refuseAtLimit opens one connection more than the gateway takes while
// driveTraffic's two are open: the handshake must be refused with 503
// (ellipsis_gateway_handshakes_rejected_total{reason="max_conns"}, which the
// capacity alert reads).
func refuseAtLimit(t *testing.T, httpAddr string) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	c, resp, err := d.Dial("ws://"+httpAddr+"/v1/ws?user=carol&name=carol", nil)
	if err == nil {
		c.Close()
		t.Fatalf("a third connection was accepted at ELLIPSIS_MAX_CONNS=%d", liveMaxConns)
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a third connection at ELLIPSIS_MAX_CONNS=%d: %v (response %v), want HTTP 503", liveMaxConns, err, resp)
	}
	resp.Body.Close()
}

// scrape reads the service's GET /metrics.
func scrape(t *testing.T, p *svcProc) map[string]bool {
	t.Helper()
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + p.adminAddr + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", p.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /metrics: HTTP %d", p.name, resp.StatusCode)
	}
	return expositionNames(t, resp.Body)
}

// expositionNames returns the names of the samples of a Prometheus text
// exposition: a name counts only with a sample (HELP and TYPE alone do
// not make a series a query can see).
func expositionNames(t *testing.T, r io.Reader) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end <= 0 {
			t.Fatalf("exposition line %q: no metric name", line)
		}
		names[line[:end]] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}
