package clusterenv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/test/clusterenv"
)

// keyOn returns a key (prefix plus a hash tag) whose slot node owns.
func keyOn(t *testing.T, c *clusterenv.RedisCluster, prefix string, node int) (string, int) {
	t.Helper()
	for k := 0; k < 1000; k++ {
		key := fmt.Sprintf("%s:{%d}", prefix, k)
		if slot := clusterenv.SlotOf(key); c.Owner(t, slot) == node {
			return key, slot
		}
	}
	t.Fatalf("no key %s:{k} on node %d", prefix, node)
	return "", 0
}

// TestRedisAddReplicaFailover adds a replica to master 1, moves one more
// slot to master 1 (SETSLOT must skip the replica), writes a key there,
// SIGKILLs master 1 and checks that the replica is promoted within the
// node timeout plus the election, serves both slots with the data and that
// the cluster is ok again.
func TestRedisAddReplicaFailover(t *testing.T) {
	t.Parallel()
	c := clusterenv.StartRedisCluster(t, 3)
	r := addReplicaOf1(t, c, c.URL())

	// A slot moved to master 1 while it has a replica: the replica follows.
	_, movedSlot := keyOn(t, c, "mv", 0)
	c.MoveSlot(t, movedSlot, 1)
	if got := c.Owner(t, movedSlot); got != 1 {
		t.Fatalf("Owner(%d) = %d after MoveSlot to 1", movedSlot, got)
	}

	key, slot := keyOn(t, c, "fo", 1)
	writeAndWaitReplica(t, c, key)

	killed := time.Now()
	c.Kill(1)
	promoted := c.WaitMaster(t, r, 15*time.Second)
	ok := c.WaitClusterOK(t, 10*time.Second)
	t.Logf("master 1 killed: replica %d master after %v, cluster_state:ok on every node after %v",
		r, promoted.Sub(killed), ok.Sub(killed))
	// Node timeout 2000 ms + FAIL gossip + election delay (500-1000 ms) +
	// votes: a few seconds, far below 10.
	if d := promoted.Sub(killed); d > 10*time.Second {
		t.Errorf("promotion took %v, want < 10 s", d)
	}
	checkPromoted(t, c, r, key, slot, movedSlot)

	checkClusterClientFollows(t, c, key)
}

// addReplicaOf1 adds a replica to master 1 and checks the cluster's view
// of it: node 3, a slave of master 1, known to the cluster, while URL()
// still lists the masters only (url).
func addReplicaOf1(t *testing.T, c *clusterenv.RedisCluster, url string) int {
	t.Helper()
	added := time.Now()
	r := c.AddReplica(t, 1)
	t.Logf("replica node %d of master 1 added and synced in %v", r, time.Since(added))
	if r != 3 {
		t.Fatalf("AddReplica returned node %d, want 3", r)
	}
	if got := len(c.Addrs()); got != 4 {
		t.Errorf("Addrs() has %d addresses after AddReplica, want 4", got)
	}
	if got := c.URL(); got != url {
		t.Errorf("URL() = %q after AddReplica, want the masters only %q", got, url)
	}
	if got := c.Role(t, r); got != "slave" {
		t.Errorf("Role(%d) = %q, want slave", r, got)
	}
	if got := c.Role(t, 1); got != "master" {
		t.Errorf("Role(1) = %q, want master", got)
	}
	if got := c.Info(t, 1, "replication")["connected_slaves"]; got != "1" {
		t.Errorf("master 1 connected_slaves = %q, want 1", got)
	}
	if got := c.ClusterInfo(t, r)["cluster_known_nodes"]; got != "4" {
		t.Errorf("replica's cluster_known_nodes = %q, want 4", got)
	}
	return r
}

// writeAndWaitReplica sets key to v1 on master 1 and waits until its
// replica has it. SET and WAIT go in one pipeline, so on one connection:
// WAIT waits only for the writes of its own connection (Redis docs, WAIT),
// so after a SET made elsewhere it returns at once and the kill could lose
// the key.
func writeAndWaitReplica(t *testing.T, c *clusterenv.RedisCluster, key string) {
	t.Helper()
	ctx := t.Context()
	pipe := c.Node(1).Pipeline()
	pipe.Set(ctx, key, "v1", 0)
	wait := pipe.Do(ctx, "WAIT", 1, 2000)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("SET %s + WAIT on master 1: %v", key, err)
	}
	if n, err := wait.Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 2000 on master 1 = %d, %v; want 1 replica", n, err)
	}
}

// checkPromoted checks the cluster after the failover: the promoted
// replica r owns both slots, is a master and has key; every node is ok
// with all slots assigned.
func checkPromoted(t *testing.T, c *clusterenv.RedisCluster, r int, key string, slot, movedSlot int) {
	t.Helper()
	ctx := t.Context()
	for _, s := range []int{slot, movedSlot} {
		if got := c.Owner(t, s); got != r {
			t.Errorf("Owner(%d) = %d after the failover, want the promoted replica %d", s, got, r)
		}
	}
	for _, i := range []int{0, 2, r} {
		ci := c.ClusterInfo(t, i)
		if ci["cluster_state"] != "ok" || ci["cluster_slots_assigned"] != "16384" {
			t.Errorf("node %d after the failover: cluster_state %q, slots assigned %q", i, ci["cluster_state"], ci["cluster_slots_assigned"])
		}
	}
	if got := c.Role(t, r); got != "master" {
		t.Errorf("Role(%d) = %q after WaitMaster", r, got)
	}
	if v, err := c.Node(r).Get(ctx, key).Result(); err != nil || v != "v1" {
		t.Errorf("GET %s on the promoted replica = %q, %v; want v1", key, v, err)
	}
}

// checkClusterClientFollows checks that the shared cluster client, which
// still maps the slot to the dead master until it reloads its slot map,
// reads key (5 s) after ReloadState and can write it.
func checkClusterClientFollows(t *testing.T, c *clusterenv.RedisCluster, key string) {
	t.Helper()
	ctx := t.Context()
	c.Client().ReloadState(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := c.Client().Get(gctx, key).Result()
		cancel()
		if err == nil && v == "v1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s via the cluster client after ReloadState = %q, %v", key, v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.Client().Set(ctx, key, "v2", 0).Err(); err != nil {
		t.Errorf("SET %s via the cluster client after the failover: %v", key, err)
	}
}
