package clusterenv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster timing and sizing.
const (
	redisBusOffset      = 10000            // cluster bus port = client port + 10000
	redisReadyTimeout   = 10 * time.Second // one redis-server answering PING
	redisFormTimeout    = 20 * time.Second // all nodes agreeing on a full slot map
	redisMoveTimeout    = 30 * time.Second // one MoveSlot, key migration included
	redisStartAttempts  = 5                // per node, on port collisions
	redisMigrateBatch   = 100              // keys per CLUSTER GETKEYSINSLOT / MIGRATE
	redisMigrateTimeout = 5000             // MIGRATE timeout argument, milliseconds
	redisCommandTimeout = 5 * time.Second  // one inspection command (INFO, CLUSTER INFO)
	redisReplicaTimeout = 30 * time.Second // one AddReplica: start, meet, replicate, sync, gossip
	pollInterval        = 20 * time.Millisecond
)

// RedisCluster is a running Redis Cluster, one redis-server process per
// node on 127.0.0.1. It starts with n masters and no replicas: node i
// (0 <= i < n) owns the slot range [i*16384/n, (i+1)*16384/n) until slots
// are moved with MoveSlot. AddReplica adds replica nodes, indexed n, n+1,
// ... in the order they are added; a failover (Kill of a master, see
// WaitMaster) changes roles but never indexes. Create it with
// StartRedisCluster; everything is torn down by the test's cleanup.
type RedisCluster struct {
	tb      testing.TB
	bin     string // redis-server path
	dir     string // --dir and nodes-<port>.conf, logs
	masters int    // nodes started as masters by StartRedisCluster: nodes[:masters]
	nodes   []*redisNode
	client  *redis.ClusterClient

	mu sync.Mutex // guards redisNode.killed and appends to nodes
}

// redisNode is one node (a master or, from AddReplica, a replica). Everything
// but killed is set at start and never changes.
type redisNode struct {
	port   int
	id     string // CLUSTER MYID, 40 hex characters
	proc   *process
	client *redis.Client
	killed bool // guarded by RedisCluster.mu
}

// StartRedisCluster starts masters redis-server processes (masters >= 1) on
// spare loopback ports, each in its own process group with cluster mode on,
// no persistence and a node timeout of 2000 ms, then forms a cluster with
// the 16384 slots split evenly in contiguous ranges (node 0 gets the lowest)
// and waits, up to 20 s, until every node reports cluster_state:ok, knows all
// masters and sees all 16384 slots covered.
//
// The processes are SIGKILLed and the clients closed in tb's cleanup.
// Failures are fatal: redis-server missing (the message names
// `apt-get install redis-server`), a node that does not start (its log tail
// is in the message) or a cluster that does not form (every node's CLUSTER
// INFO and CLUSTER NODES are in the message).
func StartRedisCluster(tb testing.TB, masters int) *RedisCluster {
	tb.Helper()
	if masters < 1 {
		tb.Fatalf("StartRedisCluster: masters = %d, want >= 1", masters)
	}
	bin, err := findBinary("redis-server", "redis-server", "/usr/bin/redis-server")
	if err != nil {
		tb.Fatalf("StartRedisCluster: %v", err)
	}
	c := &RedisCluster{tb: tb, bin: bin, dir: tb.TempDir(), masters: masters, nodes: make([]*redisNode, masters)}
	// Registered after TempDir, so it runs before the directory is removed.
	tb.Cleanup(c.cleanup)

	ports, err := reservePorts(masters, redisBusOffset)
	if err != nil {
		tb.Fatalf("StartRedisCluster: %v", err)
	}
	procs := make([]*process, masters)
	for i, port := range ports {
		if procs[i], err = c.startProcess(i, port); err != nil {
			tb.Fatalf("StartRedisCluster: %v", err)
		}
	}
	for i := range procs {
		if c.nodes[i], err = c.awaitNode(i, ports[i], procs[i]); err != nil {
			tb.Fatalf("StartRedisCluster: %v", err)
		}
	}
	if err := c.form(); err != nil {
		tb.Fatalf("StartRedisCluster: %v", err)
	}
	c.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { c.client.Close() })
	return c
}

// startProcess starts redis-server for node i on port (bus on port+10000).
// Replication is diskless without the default 5 s wait for more replicas,
// so AddReplica's initial sync takes milliseconds.
func (c *RedisCluster) startProcess(i, port int) (*process, error) {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(c.dir, fmt.Sprintf("nodes-%d.conf", port)),
		"--cluster-node-timeout", "2000",
		"--save", "",
		"--appendonly", "no",
		"--repl-diskless-sync-delay", "0",
		"--dir", c.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	}
	name := fmt.Sprintf("redis node %d (%s)", i, addr(port))
	return startProcess(name, c.bin, args, filepath.Join(c.dir, fmt.Sprintf("redis-%d.log", port)))
}

// awaitNode waits until proc (node i, on port) answers, restarting it on
// fresh ports when it exits early (a port taken between probe and bind), up
// to redisStartAttempts starts in all. It returns the ready node with its
// client and cluster node id.
func (c *RedisCluster) awaitNode(i, port int, proc *process) (*redisNode, error) {
	for attempt := 1; ; attempt++ {
		client, err := awaitRedis(proc, port)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), redisCommandTimeout)
			defer cancel()
			id, err := client.Do(ctx, "CLUSTER", "MYID").Text()
			if err != nil {
				client.Close()
				proc.kill()
				return nil, fmt.Errorf("CLUSTER MYID on %s: %w", proc.name, err)
			}
			return &redisNode{port: port, id: id, proc: proc, client: client}, nil
		}
		diedEarly := proc.exited() // e.g. its port was taken before it bound it
		proc.kill()
		if !diedEarly || attempt >= redisStartAttempts {
			return nil, fmt.Errorf("start attempt %d of %d: %w", attempt, redisStartAttempts, err)
		}
		ports, perr := reservePorts(1, redisBusOffset)
		if perr != nil {
			return nil, fmt.Errorf("%w; then: %v", err, perr)
		}
		port = ports[0]
		if proc, err = c.startProcess(i, port); err != nil {
			return nil, err
		}
	}
}

// awaitRedis waits up to redisReadyTimeout until the redis-server of proc
// answers on port: INFO server must report proc's pid, so another server
// that took the port is never mistaken for ours. It returns a client to it.
func awaitRedis(proc *process, port int) (*redis.Client, error) {
	client := redis.NewClient(&redis.Options{
		Addr:        addr(port),
		DialTimeout: time.Second,
	})
	want := strconv.Itoa(proc.pid())
	deadline := time.Now().Add(redisReadyTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if proc.exited() {
			client.Close()
			return nil, errors.New(proc.exitReport())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := client.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			if got := parseInfo(info)["process_id"]; got == want {
				return client, nil
			} else {
				err = fmt.Errorf("%s is answered by process %s, not ours (%s)", addr(port), got, want)
			}
		}
		lastErr = err
		time.Sleep(pollInterval)
	}
	client.Close()
	return nil, fmt.Errorf("%s not ready after %s (last error: %v); log tail:\n%s",
		proc.name, redisReadyTimeout, lastErr, proc.logTail(4096))
}

// form assigns distinct config epochs and even slot ranges, makes node 0
// meet every other node, and waits until the cluster is consistent.
func (c *RedisCluster) form() error {
	ctx, cancel := context.WithTimeout(context.Background(), redisFormTimeout)
	defer cancel()
	n := len(c.nodes)
	for i, node := range c.nodes {
		// Distinct epochs up front, as redis-cli --cluster create does, so no
		// epoch-collision round is needed.
		if err := node.client.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH %d on %s: %w", i+1, node.proc.name, err)
		}
		lo, hi := i*NumSlots/n, (i+1)*NumSlots/n-1
		if err := node.client.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, node.proc.name, err)
		}
	}
	for _, node := range c.nodes[1:] {
		if err := c.nodes[0].client.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(node.port)).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET 127.0.0.1 %d from %s: %w", node.port, c.nodes[0].proc.name, err)
		}
	}
	for {
		problem := c.formProblem(ctx)
		if problem == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster of %d masters not formed within %s: %s\n%s",
				n, redisFormTimeout, problem, c.dump())
		case <-time.After(pollInterval):
		}
	}
}

// formProblem returns "" when every node reports cluster_state:ok, knows
// all nodes and sees every slot served, else the first problem found.
func (c *RedisCluster) formProblem(ctx context.Context) string {
	for _, node := range c.nodes {
		infoText, err := node.client.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Sprintf("CLUSTER INFO on %s: %v", node.proc.name, err)
		}
		info := parseInfo(infoText)
		if info["cluster_state"] != "ok" {
			return fmt.Sprintf("%s: cluster_state:%s", node.proc.name, info["cluster_state"])
		}
		if want := strconv.Itoa(len(c.nodes)); info["cluster_known_nodes"] != want {
			return fmt.Sprintf("%s: cluster_known_nodes:%s, want %s", node.proc.name, info["cluster_known_nodes"], want)
		}
		slots, err := node.client.ClusterSlots(ctx).Result()
		if err != nil {
			return fmt.Sprintf("CLUSTER SLOTS on %s: %v", node.proc.name, err)
		}
		var covered [NumSlots]bool
		count := 0
		for _, r := range slots {
			if len(r.Nodes) == 0 {
				continue
			}
			for s := r.Start; s <= r.End && s < NumSlots; s++ {
				if s >= 0 && !covered[s] {
					covered[s] = true
					count++
				}
			}
		}
		if count != NumSlots {
			return fmt.Sprintf("%s: CLUSTER SLOTS covers %d of %d slots", node.proc.name, count, NumSlots)
		}
	}
	return ""
}

// dump returns every live node's CLUSTER INFO and CLUSTER NODES, for
// failure messages.
func (c *RedisCluster) dump() string {
	var b strings.Builder
	for i, node := range c.nodes {
		if node == nil || c.isKilled(i) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), redisCommandTimeout)
		info, ierr := node.client.ClusterInfo(ctx).Result()
		nodes, nerr := node.client.ClusterNodes(ctx).Result()
		cancel()
		fmt.Fprintf(&b, "--- %s (id %s)\nCLUSTER INFO (err %v):\n%s\nCLUSTER NODES (err %v):\n%s\n",
			node.proc.name, node.id, ierr, strings.TrimSpace(info), nerr, strings.TrimSpace(nodes))
	}
	return b.String()
}

// cleanup kills every process and closes the node clients.
func (c *RedisCluster) cleanup() {
	for _, node := range c.nodes {
		if node == nil {
			continue
		}
		node.client.Close()
		if err := node.proc.kill(); err != nil {
			c.tb.Errorf("RedisCluster cleanup: %v", err)
		}
	}
}

// Addrs returns the "127.0.0.1:port" client address of every node, killed
// ones and replicas from AddReplica included; index i is node i. The slice
// is a fresh copy.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, node := range c.nodes {
		addrs[i] = addr(node.port)
	}
	return addrs
}

// URL returns the cluster as a URL the services accept:
// "redis+cluster://127.0.0.1:p0?addr=127.0.0.1:p1&addr=127.0.0.1:p2", that
// is "redis+cluster://" followed by go-redis ParseClusterURL syntax (first
// node as host, the others as addr parameters). It lists the nodes started
// as masters by StartRedisCluster only, whatever their role or state now
// (replicas from AddReplica are not listed: a Cluster client learns them
// from the slot map), so it is the same before and after AddReplica.
func (c *RedisCluster) URL() string {
	addrs := c.Addrs()[:c.masters]
	u := "redis+cluster://" + addrs[0]
	for i, a := range addrs[1:] {
		if i == 0 {
			u += "?"
		} else {
			u += "&"
		}
		u += "addr=" + a
	}
	return u
}

// Client returns a cluster client seeded with the initial masters, for test
// use (shared: do not close it; it is closed in the test's cleanup). Like any
// go-redis Cluster client it reloads its slot map only on MOVED, ASK or
// READONLY replies, on ReloadState and every 60 s: after a failover, call
// Client().ReloadState (and wait for the reload) before relying on it.
func (c *RedisCluster) Client() *redis.ClusterClient { return c.client }

// Node returns a direct (non-cluster) client to node i (a master or a
// replica from AddReplica), shared and closed in the test's cleanup. An
// index out of range is fatal.
func (c *RedisCluster) Node(i int) *redis.Client {
	c.tb.Helper()
	return c.node(c.tb, i).client
}

// NodeID returns node i's 40-character cluster node id (CLUSTER MYID).
// An index out of range is fatal.
func (c *RedisCluster) NodeID(i int) string {
	c.tb.Helper()
	return c.node(c.tb, i).id
}

func (c *RedisCluster) node(tb testing.TB, i int) *redisNode {
	tb.Helper()
	c.mu.Lock()
	n := len(c.nodes)
	c.mu.Unlock()
	if i < 0 || i >= n {
		tb.Fatalf("redis node index %d out of range [0, %d)", i, n)
	}
	return c.nodes[i]
}

func (c *RedisCluster) isKilled(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].killed
}

// Kill sends SIGKILL to node i's process group and waits (up to 10 s) until
// the process has exited, so its ports no longer accept connections. The
// rest of the cluster notices after the node timeout (2000 ms). A killed
// master without a replica leaves its slots uncovered: the cluster goes to
// cluster_state:fail. A killed master with a replica (AddReplica) goes to
// cluster_state:fail too until the replica wins the election, about 1-2 s
// after the master is flagged FAIL, and takes over its slots (WaitMaster,
// WaitClusterOK); writes the replica had not received yet are lost. Killing
// a killed node is a no-op; an index out of range or a process that does
// not die is fatal.
func (c *RedisCluster) Kill(i int) {
	c.tb.Helper()
	node := c.node(c.tb, i)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := node.proc.kill(); err != nil {
		c.tb.Fatalf("RedisCluster.Kill(%d): %v", i, err)
	}
	node.killed = true
}

// Info returns node i's INFO <section> (e.g. "server", "cpu", "stats",
// "commandstats") as field -> value, e.g. Info(tb, 0, "cpu")["used_cpu_sys"]
// = "0.123456" (seconds, as Redis prints them). Section headers and blank
// lines are dropped. A failing INFO (e.g. node killed) is fatal.
func (c *RedisCluster) Info(tb testing.TB, i int, section string) map[string]string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), redisCommandTimeout)
	defer cancel()
	node := c.node(tb, i)
	text, err := node.client.Info(ctx, section).Result()
	if err != nil {
		tb.Fatalf("INFO %s on %s: %v", section, node.proc.name, err)
	}
	return parseInfo(text)
}

// ClusterInfo returns node i's CLUSTER INFO as field -> value, e.g.
// "cluster_state" -> "ok", and message counters since start such as
// "cluster_stats_messages_sent", "cluster_stats_messages_publish_sent" and
// "cluster_stats_messages_publishshard_sent" (counts of bus messages; a
// counter Redis has not used yet may be absent). A failing CLUSTER INFO is
// fatal.
func (c *RedisCluster) ClusterInfo(tb testing.TB, i int) map[string]string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), redisCommandTimeout)
	defer cancel()
	node := c.node(tb, i)
	text, err := node.client.ClusterInfo(ctx).Result()
	if err != nil {
		tb.Fatalf("CLUSTER INFO on %s: %v", node.proc.name, err)
	}
	return parseInfo(text)
}

// parseInfo parses INFO-style text ("field:value" lines, "# Section"
// headers, CRLF or LF line ends) into a map.
func parseInfo(text string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}
