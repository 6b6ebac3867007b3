package clusterenv

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// NATS cluster timing.
const (
	natsClusterName   = "ellipsis-test"
	natsReadyTimeout  = 10 * time.Second // one nats-server serving /healthz
	natsRoutesTimeout = 20 * time.Second // all live nodes fully routed
	natsStartAttempts = 3                // whole cluster, on port collisions
	natsHTTPTimeout   = time.Second      // one monitoring request
)

// NATSCluster is a running NATS cluster (cluster name "ellipsis-test", no
// JetStream) of nats-server processes on 127.0.0.1, each with an explicit
// route to every other node. Create it with StartNATSCluster; everything is
// torn down by the test's cleanup.
type NATSCluster struct {
	tb    testing.TB
	bin   string // nats-server path
	dir   string // logs
	http  *http.Client
	nodes []*natsNode

	mu sync.Mutex // guards natsNode.proc and natsNode.killed
}

// natsNode is one server. Ports and name are fixed for the cluster's life
// (Restart reuses them).
type natsNode struct {
	name                               string // server_name, unique per cluster
	clientPort, routePort, monitorPort int
	proc                               *process // guarded by NATSCluster.mu
	killed                             bool     // guarded by NATSCluster.mu
}

// StartNATSCluster starts n nats-server processes (n >= 1) on spare
// loopback ports, each in its own process group with a client port, a
// cluster (route) port routed to every other node and an HTTP monitoring
// port, and waits, up to 20 s, until every node's /routez reports
// num_routes == n-1.
//
// The processes are SIGKILLed in tb's cleanup. Failures are fatal:
// nats-server missing (the message names `apt-get install nats-server`), a
// node that does not start (its log tail is in the message) or routes that
// do not form (every node's route count is in the message).
func StartNATSCluster(tb testing.TB, n int) *NATSCluster {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("StartNATSCluster: n = %d, want >= 1", n)
	}
	bin, err := findBinary("nats-server", "nats-server",
		"/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server")
	if err != nil {
		tb.Fatalf("StartNATSCluster: %v", err)
	}
	c := &NATSCluster{
		tb:   tb,
		bin:  bin,
		dir:  tb.TempDir(),
		http: &http.Client{Timeout: natsHTTPTimeout},
	}
	// Registered after TempDir, so it runs before the directory is removed.
	tb.Cleanup(c.cleanup)

	suffix := randomHex(4)
	for attempt := 1; ; attempt++ {
		ports, err := reservePorts(3*n, 0)
		if err != nil {
			tb.Fatalf("StartNATSCluster: %v", err)
		}
		nodes := make([]*natsNode, n)
		for i := range nodes {
			nodes[i] = &natsNode{
				name:        fmt.Sprintf("%s-%s-%d", natsClusterName, suffix, i),
				clientPort:  ports[3*i],
				routePort:   ports[3*i+1],
				monitorPort: ports[3*i+2],
			}
		}
		c.mu.Lock()
		c.nodes = nodes
		c.mu.Unlock()
		err = c.startAll()
		if err == nil {
			break
		}
		diedEarly := c.anyExited() // e.g. a port was taken before it was bound
		c.cleanup()
		if !diedEarly || attempt >= natsStartAttempts {
			tb.Fatalf("StartNATSCluster: start attempt %d of %d: %v", attempt, natsStartAttempts, err)
		}
	}
	if err := c.awaitRoutes(); err != nil {
		tb.Fatalf("StartNATSCluster: %v", err)
	}
	return c
}

// startAll starts every node and waits until each is ready.
func (c *NATSCluster) startAll() error {
	for i := range c.nodes {
		if err := c.startNode(i); err != nil {
			return err
		}
	}
	for i := range c.nodes {
		if err := c.awaitNode(i); err != nil {
			return err
		}
	}
	return nil
}

// startNode starts node i's process (not waiting for readiness).
func (c *NATSCluster) startNode(i int) error {
	node := c.nodes[i]
	var routes []string
	for j, other := range c.nodes {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", other.routePort))
		}
	}
	args := []string{
		"-a", "127.0.0.1",
		"-p", strconv.Itoa(node.clientPort),
		"-n", node.name,
		"-cluster", fmt.Sprintf("nats://127.0.0.1:%d", node.routePort),
		"-cluster_name", natsClusterName,
		"-m", strconv.Itoa(node.monitorPort),
	}
	if len(routes) > 0 {
		args = append(args, "-routes", strings.Join(routes, ","))
	}
	name := fmt.Sprintf("nats node %d (%s)", i, addr(node.clientPort))
	logPath := filepath.Join(c.dir, fmt.Sprintf("nats-%d.log", node.clientPort))
	proc, err := startProcess(name, c.bin, args, logPath)
	if err != nil {
		return err
	}
	c.mu.Lock()
	node.proc = proc
	node.killed = false
	c.mu.Unlock()
	return nil
}

// awaitNode waits up to natsReadyTimeout until node i's own process serves
// its monitoring port (/varz server_name is the node's name, so another
// server on that port is never mistaken for ours) and /healthz reports
// "ok", which nats-server does once its client and route listeners are up.
func (c *NATSCluster) awaitNode(i int) error {
	node := c.nodes[i]
	proc := c.proc(i)
	deadline := time.Now().Add(natsReadyTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if proc.exited() {
			return errors.New(proc.exitReport())
		}
		var varz struct {
			ServerName string `json:"server_name"`
		}
		var health struct {
			Status string `json:"status"`
		}
		err := c.getJSON(node.monitorPort, "/varz", &varz)
		if err == nil && varz.ServerName != node.name {
			err = fmt.Errorf("monitoring port %d is served by %q, not %q", node.monitorPort, varz.ServerName, node.name)
		}
		if err == nil {
			err = c.getJSON(node.monitorPort, "/healthz", &health)
		}
		if err == nil && health.Status != "ok" {
			err = fmt.Errorf("/healthz status %q", health.Status)
		}
		if err == nil {
			return nil
		}
		lastErr = err
		time.Sleep(pollInterval)
	}
	return fmt.Errorf("%s not ready after %s (last error: %v); log tail:\n%s",
		proc.name, natsReadyTimeout, lastErr, proc.logTail(4096))
}

// awaitRoutes waits up to natsRoutesTimeout until every live node's /routez
// reports num_routes == (live nodes - 1).
func (c *NATSCluster) awaitRoutes() error {
	deadline := time.Now().Add(natsRoutesTimeout)
	for {
		live := c.live()
		counts := make([]string, 0, len(live))
		done := true
		for _, i := range live {
			var routez struct {
				NumRoutes int `json:"num_routes"`
			}
			if err := c.getJSON(c.nodes[i].monitorPort, "/routez", &routez); err != nil {
				counts = append(counts, fmt.Sprintf("node %d: %v", i, err))
				done = false
				continue
			}
			counts = append(counts, fmt.Sprintf("node %d: %d", i, routez.NumRoutes))
			if routez.NumRoutes != len(live)-1 {
				done = false
			}
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("routes not formed within %s: want num_routes %d on each of the %d live nodes, got %s",
				natsRoutesTimeout, len(live)-1, len(live), strings.Join(counts, ", "))
		}
		time.Sleep(pollInterval)
	}
}

// getJSON GETs http://127.0.0.1:<port><path> and decodes the JSON body
// into v.
func (c *NATSCluster) getJSON(port int, path string, v any) error {
	url := fmt.Sprintf("http://%s%s", addr(port), path)
	resp, err := c.http.Get(url)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s (HTTP %d): decode JSON: %w", url, resp.StatusCode, err)
	}
	return nil
}

// proc returns node i's current process.
func (c *NATSCluster) proc(i int) *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].proc
}

// live returns the indexes of the nodes not killed.
func (c *NATSCluster) live() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var live []int
	for i, node := range c.nodes {
		if !node.killed {
			live = append(live, i)
		}
	}
	return live
}

// anyExited reports whether a started process has exited on its own.
func (c *NATSCluster) anyExited() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, node := range c.nodes {
		if node.proc != nil && !node.killed && node.proc.exited() {
			return true
		}
	}
	return false
}

// cleanup kills every process.
func (c *NATSCluster) cleanup() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, node := range c.nodes {
		if node.proc == nil {
			continue
		}
		if err := node.proc.kill(); err != nil {
			c.tb.Errorf("NATSCluster cleanup: %v", err)
		}
		node.killed = true
	}
	c.http.CloseIdleConnections()
}

// URLs returns every node's client URL, "nats://127.0.0.1:port"; index i is
// node i. The slice is a fresh copy.
func (c *NATSCluster) URLs() []string {
	urls := make([]string, len(c.nodes))
	for i, node := range c.nodes {
		urls[i] = "nats://" + addr(node.clientPort)
	}
	return urls
}

// URL returns all client URLs comma-joined, the form ELLIPSIS_NATS_URL and
// nats.Connect take.
func (c *NATSCluster) URL() string { return strings.Join(c.URLs(), ",") }

// MonitorURL returns node i's HTTP monitoring base URL,
// "http://127.0.0.1:port" (endpoints /varz, /routez, /connz, ...). An index
// out of range is fatal.
func (c *NATSCluster) MonitorURL(i int) string {
	c.tb.Helper()
	return "http://" + addr(c.node(i).monitorPort)
}

func (c *NATSCluster) node(i int) *natsNode {
	c.tb.Helper()
	if i < 0 || i >= len(c.nodes) {
		c.tb.Fatalf("nats node index %d out of range [0, %d)", i, len(c.nodes))
	}
	return c.nodes[i]
}

// Kill sends SIGKILL to node i's process group and waits (up to 10 s) until
// the process has exited; its clients see the connection drop and the other
// nodes lose their route to it. Killing a killed node is a no-op; an index
// out of range or a process that does not die is fatal.
func (c *NATSCluster) Kill(i int) {
	c.tb.Helper()
	node := c.node(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := node.proc.kill(); err != nil {
		c.tb.Fatalf("NATSCluster.Kill(%d): %v", i, err)
	}
	node.killed = true
}

// Restart starts node i again on the same client, route and monitoring
// ports (killing it first if it is running), waits until it is ready and
// then until every live node's /routez reports num_routes == (live nodes -
// 1), up to 10 s + 20 s. Ports taken meanwhile by another process, a node
// that does not start or routes that do not come back are fatal.
func (c *NATSCluster) Restart(i int) {
	c.tb.Helper()
	c.Kill(i)
	if err := c.startNode(i); err != nil {
		c.tb.Fatalf("NATSCluster.Restart(%d): %v", i, err)
	}
	if err := c.awaitNode(i); err != nil {
		c.tb.Fatalf("NATSCluster.Restart(%d): %v", i, err)
	}
	if err := c.awaitRoutes(); err != nil {
		c.tb.Fatalf("NATSCluster.Restart(%d): %v", i, err)
	}
}

// randomHex returns 2*n random hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b)
}
