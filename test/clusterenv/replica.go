package clusterenv

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// AddReplica starts one more redis-server (cluster mode, the masters' flags,
// on spare ports P and P+10000), introduces it to the cluster with CLUSTER
// MEET, makes it a replica of node master with CLUSTER REPLICATE, and waits,
// up to 30 s in all, until
//
//   - the replica reports role:slave with master_link_status:up and no sync
//     in progress, and the master's INFO replication lists it with
//     state=online (the initial sync is done);
//   - every live node's CLUSTER NODES shows it as a connected replica
//     ("slave", not "handshake", "fail" or "noaddr") of master, and reports
//     cluster_state:ok (so the masters will vote for it in a failover).
//
// It returns the new node's index, len(Addrs()) before the call: Node, NodeID,
// Kill, Info, ClusterInfo, Role and WaitMaster take it, Addrs lists it, URL
// does not (see URL). Owner never returns a replica (it claims no slots)
// until a failover promotes it.
//
// Failures are fatal: master out of range, killed or not a master (Redis
// cannot replicate a replica), a node that does not start, or a replica that
// does not sync or is not known by every node in time (every node's CLUSTER
// INFO and CLUSTER NODES are in the message). A started node is torn down by
// the test's cleanup even when AddReplica fails.
func (c *RedisCluster) AddReplica(tb testing.TB, master int) int {
	tb.Helper()
	m := c.node(tb, master)
	if c.isKilled(master) {
		tb.Fatalf("AddReplica: node %d is killed", master)
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisReplicaTimeout)
	defer cancel()
	if role, err := c.role(ctx, master); err != nil {
		tb.Fatalf("AddReplica: %v", err)
	} else if role != "master" {
		tb.Fatalf("AddReplica: node %d is a %s, not a master", master, role)
	}

	ports, err := reservePorts(1, redisBusOffset)
	if err != nil {
		tb.Fatalf("AddReplica: %v", err)
	}
	c.mu.Lock()
	i := len(c.nodes)
	c.mu.Unlock()
	proc, err := c.startProcess(i, ports[0])
	if err != nil {
		tb.Fatalf("AddReplica: %v", err)
	}
	node, err := c.awaitNode(i, ports[0], proc) // kills proc on failure
	if err != nil {
		tb.Fatalf("AddReplica: %v", err)
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, node) // from here on, cleanup kills it
	c.mu.Unlock()

	fail := func(format string, args ...any) {
		tb.Helper()
		tb.Fatalf("AddReplica of node %d (%s) to master %d (%s): %s\n%s",
			i, addr(node.port), master, addr(m.port), fmt.Sprintf(format, args...), c.dump())
	}
	if err := node.client.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(m.port)).Err(); err != nil {
		fail("CLUSTER MEET 127.0.0.1 %d: %v", m.port, err)
	}
	// CLUSTER REPLICATE answers "Unknown node" until the handshake with the
	// master is over.
	for {
		err := node.client.Do(ctx, "CLUSTER", "REPLICATE", m.id).Err()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			fail("CLUSTER REPLICATE %s not accepted within %s: %v", m.id, redisReplicaTimeout, err)
		case <-time.After(pollInterval):
		}
	}
	for {
		problem := c.replicaProblem(ctx, i, master)
		if problem == "" {
			return i
		}
		select {
		case <-ctx.Done():
			fail("not a synced, known replica within %s: %s", redisReplicaTimeout, problem)
		case <-time.After(pollInterval):
		}
	}
}

// replicaProblem returns "" when node r is a synced replica of node master
// known as such by every live node, all reporting cluster_state:ok; else the
// first problem found.
func (c *RedisCluster) replicaProblem(ctx context.Context, r, master int) string {
	rn, mn := c.nodes[r], c.nodes[master]
	text, err := rn.client.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Sprintf("INFO replication on %s: %v", rn.proc.name, err)
	}
	info := parseInfo(text)
	if info["role"] != "slave" || info["master_link_status"] != "up" || info["master_sync_in_progress"] != "0" {
		return fmt.Sprintf("%s: role:%s master_link_status:%s master_sync_in_progress:%s",
			rn.proc.name, info["role"], info["master_link_status"], info["master_sync_in_progress"])
	}
	if text, err = mn.client.Info(ctx, "replication").Result(); err != nil {
		return fmt.Sprintf("INFO replication on %s: %v", mn.proc.name, err)
	}
	online := false
	for k, v := range parseInfo(text) {
		// slave0:ip=127.0.0.1,port=40001,state=online,offset=42,lag=0
		if strings.HasPrefix(k, "slave") && strings.Contains(","+v+",", ",port="+strconv.Itoa(rn.port)+",") {
			online = strings.Contains(","+v+",", ",state=online,")
		}
	}
	if !online {
		return fmt.Sprintf("%s's INFO replication does not list %s as online", mn.proc.name, rn.proc.name)
	}
	for i, node := range c.nodes {
		if c.isKilled(i) {
			continue
		}
		if p := clusterStateProblem(ctx, node); p != "" {
			return p
		}
		nodes, err := node.client.ClusterNodes(ctx).Result()
		if err != nil {
			return fmt.Sprintf("CLUSTER NODES on %s: %v", node.proc.name, err)
		}
		if !knownReplica(nodes, rn.id, mn.id) {
			return fmt.Sprintf("%s does not know %s as a connected replica of %s yet", node.proc.name, rn.id, mn.id)
		}
	}
	return ""
}

// knownReplica reports whether CLUSTER NODES output has node id as a
// replica of masterID, connected and without handshake, fail or noaddr
// flags.
func knownReplica(clusterNodes, id, masterID string) bool {
	for _, line := range strings.Split(clusterNodes, "\n") {
		// <id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
		f := strings.Fields(line)
		if len(f) < 8 || f[0] != id {
			continue
		}
		flags := "," + f[2] + ","
		for _, bad := range []string{",handshake,", ",fail,", ",fail?,", ",noaddr,"} {
			if strings.Contains(flags, bad) {
				return false
			}
		}
		return strings.Contains(flags, ",slave,") && f[3] == masterID && f[7] == "connected"
	}
	return false
}

// Role returns node i's role as ROLE reports it: "master" or "slave"
// (Redis's word for a replica). A failing ROLE (e.g. node killed) or an
// index out of range is fatal.
func (c *RedisCluster) Role(tb testing.TB, i int) string {
	tb.Helper()
	c.node(tb, i)
	ctx, cancel := context.WithTimeout(context.Background(), redisCommandTimeout)
	defer cancel()
	role, err := c.role(ctx, i)
	if err != nil {
		tb.Fatal(err)
	}
	return role
}

func (c *RedisCluster) role(ctx context.Context, i int) (string, error) {
	node := c.nodes[i]
	v, err := node.client.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", fmt.Errorf("ROLE on %s: %w", node.proc.name, err)
	}
	if len(v) == 0 {
		return "", fmt.Errorf("ROLE on %s: empty reply", node.proc.name)
	}
	role, ok := v[0].(string)
	if !ok {
		return "", fmt.Errorf("ROLE on %s: first element %#v is not a string", node.proc.name, v[0])
	}
	return role, nil
}

// WaitMaster waits, up to within, until node i reports itself a master
// (ROLE), and returns when it saw that. A replica promoted by a failover
// claims its old master's slots in the same step, so from then on it serves
// them; the other nodes learn it over the cluster bus a moment later
// (WaitClusterOK waits for that). After Kill of a master, its replica is
// promoted once the master is flagged FAIL (node timeout 2000 ms plus
// gossip) and the replica won the election (a delay of 500-1000 ms, then
// one vote round): about 3-4 s in all. A node that is not a master in time,
// or a killed node, is fatal (CLUSTER NODES of every live node in the
// message).
func (c *RedisCluster) WaitMaster(tb testing.TB, i int, within time.Duration) time.Time {
	tb.Helper()
	node := c.node(tb, i)
	if c.isKilled(i) {
		tb.Fatalf("WaitMaster: node %d is killed", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last string
	for {
		rctx, rcancel := context.WithTimeout(ctx, redisCommandTimeout)
		role, err := c.role(rctx, i)
		rcancel()
		if err == nil && role == "master" {
			return time.Now()
		}
		if err != nil {
			last = err.Error()
		} else {
			last = "role " + role
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("WaitMaster: %s not a master within %s (last: %s)\n%s", node.proc.name, within, last, c.dump())
		case <-time.After(pollInterval):
		}
	}
}

// WaitClusterOK waits, up to within, until every live node reports
// cluster_state:ok and its CLUSTER SLOTS has all 16384 slots served by
// live nodes (no killed node's id), e.g. after a failover, and returns when
// it saw that. Not in time is fatal (every live node's CLUSTER INFO and
// CLUSTER NODES in the message).
func (c *RedisCluster) WaitClusterOK(tb testing.TB, within time.Duration) time.Time {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		problem := c.healthProblem(ctx)
		if problem == "" {
			return time.Now()
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("WaitClusterOK: cluster not ok within %s: %s\n%s", within, problem, c.dump())
		case <-time.After(pollInterval):
		}
	}
}

// healthProblem returns "" when every live node reports cluster_state:ok
// and sees every slot served by a live node, else the first problem found.
func (c *RedisCluster) healthProblem(ctx context.Context) string {
	dead := map[string]bool{}
	for i, node := range c.nodes {
		if c.isKilled(i) {
			dead[node.id] = true
		}
	}
	for i, node := range c.nodes {
		if c.isKilled(i) {
			continue
		}
		if p := clusterStateProblem(ctx, node); p != "" {
			return p
		}
		ranges, err := node.client.ClusterSlots(ctx).Result()
		if err != nil {
			return fmt.Sprintf("CLUSTER SLOTS on %s: %v", node.proc.name, err)
		}
		count := 0
		for _, r := range ranges {
			if len(r.Nodes) == 0 {
				continue
			}
			if dead[r.Nodes[0].ID] {
				return fmt.Sprintf("%s says slots %d-%d are served by killed node %s", node.proc.name, r.Start, r.End, r.Nodes[0].ID)
			}
			count += r.End - r.Start + 1
		}
		if count != NumSlots {
			return fmt.Sprintf("%s: CLUSTER SLOTS covers %d of %d slots", node.proc.name, count, NumSlots)
		}
	}
	return ""
}

// clusterStateProblem says why node does not report cluster_state:ok, or
// returns "".
func clusterStateProblem(ctx context.Context, node *redisNode) string {
	ci, err := node.client.ClusterInfo(ctx).Result()
	if err != nil {
		return fmt.Sprintf("CLUSTER INFO on %s: %v", node.proc.name, err)
	}
	if state := parseInfo(ci)["cluster_state"]; state != "ok" {
		return fmt.Sprintf("%s: cluster_state:%s", node.proc.name, state)
	}
	return ""
}
