package clusterenv

// Which node serves a slot, and moving a slot between masters
// (CLUSTER SETSLOT and MIGRATE, Redis Cluster specification, "Resharding").

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Owner returns the index of the node that serves slot (0 <= slot < 16384)
// according to the live nodes themselves (the "myself" line of their
// CLUSTER NODES; a replica's lists no slots). A slot no live node claims
// (e.g. its master was killed and no replica took over yet), or a failing
// command, is fatal.
func (c *RedisCluster) Owner(tb testing.TB, slot int) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), redisCommandTimeout)
	defer cancel()
	owner, err := c.owner(ctx, slot)
	if err != nil {
		tb.Fatal(err)
	}
	return owner
}

func (c *RedisCluster) owner(ctx context.Context, slot int) (int, error) {
	for i, node := range c.nodes {
		if c.isKilled(i) {
			continue
		}
		text, err := node.client.ClusterNodes(ctx).Result()
		if err != nil {
			return -1, fmt.Errorf("CLUSTER NODES on %s: %w", node.proc.name, err)
		}
		if ownsSlot(text, slot) {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no live node claims slot %d\n%s", slot, c.dump())
}

// ownsSlot reports whether the "myself" line of CLUSTER NODES output lists
// slot among its slot ranges ("5461-10922" or "42"; "[slot->-id]" and
// "[slot-<-id]" migration markers are ignored).
func ownsSlot(clusterNodes string, slot int) bool {
	for _, line := range strings.Split(clusterNodes, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 8 || !strings.Contains(fields[2], "myself") {
			continue
		}
		for _, r := range fields[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			loS, hiS, isRange := strings.Cut(r, "-")
			lo, err := strconv.Atoi(loS)
			if err != nil {
				continue
			}
			hi := lo
			if isRange {
				if hi, err = strconv.Atoi(hiS); err != nil {
					continue
				}
			}
			if lo <= slot && slot <= hi {
				return true
			}
		}
	}
	return false
}

// MoveSlot migrates hash slot (0 <= slot < 16384) from its current owner to
// node to, the way redis-cli --cluster reshard does: CLUSTER SETSLOT slot
// IMPORTING on the target, MIGRATING on the source, MIGRATE of the slot's
// keys in batches of 100 (CLUSTER GETKEYSINSLOT), then CLUSTER SETSLOT slot
// NODE <target id> on the target, the source and every other live master.
// It then waits, up to 30 s in all, until every live node's CLUSTER SLOTS
// names the target as the slot's owner.
//
// When the slot moves away, Redis 7 sends shard-channel subscribers of that
// slot on the source a server-initiated "sunsubscribe" for each channel.
// Moving a slot to the node that already owns it is a no-op. Replicas
// (AddReplica) are not told (Redis refuses SETSLOT on a replica): they
// follow their masters. A killed target, a target that is a replica, an
// index or slot out of range, or a failing command is fatal.
func (c *RedisCluster) MoveSlot(tb testing.TB, slot int, to int) {
	tb.Helper()
	if slot < 0 || slot >= NumSlots {
		tb.Fatalf("MoveSlot: slot %d out of range [0, %d)", slot, NumSlots)
	}
	dst := c.node(tb, to)
	if c.isKilled(to) {
		tb.Fatalf("MoveSlot: target node %d is killed", to)
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisMoveTimeout)
	defer cancel()
	from, err := c.owner(ctx, slot)
	if err != nil {
		tb.Fatalf("MoveSlot: %v", err)
	}
	if from == to {
		return
	}
	src := c.nodes[from]
	fail := func(format string, args ...any) {
		tb.Helper()
		tb.Fatalf("MoveSlot %d from node %d to node %d: %s", slot, from, to, fmt.Sprintf(format, args...))
	}
	if err := dst.client.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err(); err != nil {
		fail("CLUSTER SETSLOT IMPORTING on %s: %v", dst.proc.name, err)
	}
	if err := src.client.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err(); err != nil {
		fail("CLUSTER SETSLOT MIGRATING on %s: %v", src.proc.name, err)
	}
	for {
		keys, err := src.client.ClusterGetKeysInSlot(ctx, slot, redisMigrateBatch).Result()
		if err != nil {
			fail("CLUSTER GETKEYSINSLOT on %s: %v", src.proc.name, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", dst.port, "", 0, redisMigrateTimeout, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.client.Do(ctx, args...).Err(); err != nil {
			fail("MIGRATE of %d keys from %s: %v", len(keys), src.proc.name, err)
		}
	}
	order := []int{to, from}
	for i := range c.nodes {
		if i != to && i != from && !c.isKilled(i) {
			role, err := c.role(ctx, i)
			if err != nil {
				fail("%v", err)
			}
			if role == "master" {
				order = append(order, i)
			}
		}
	}
	for _, i := range order {
		if err := c.nodes[i].client.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err(); err != nil {
			fail("CLUSTER SETSLOT NODE on %s: %v", c.nodes[i].proc.name, err)
		}
	}
	for {
		problem := c.slotOwnerProblem(ctx, slot, dst.id)
		if problem == "" {
			return
		}
		select {
		case <-ctx.Done():
			fail("nodes do not agree on the new owner within %s: %s\n%s", redisMoveTimeout, problem, c.dump())
		case <-time.After(pollInterval):
		}
	}
}

// slotOwnerProblem returns "" when every live node's CLUSTER SLOTS names
// node id wantID as the master of slot, else the first disagreement.
func (c *RedisCluster) slotOwnerProblem(ctx context.Context, slot int, wantID string) string {
	for i, node := range c.nodes {
		if c.isKilled(i) {
			continue
		}
		ranges, err := node.client.ClusterSlots(ctx).Result()
		if err != nil {
			return fmt.Sprintf("CLUSTER SLOTS on %s: %v", node.proc.name, err)
		}
		got := ""
		for _, r := range ranges {
			if r.Start <= slot && slot <= r.End && len(r.Nodes) > 0 {
				got = r.Nodes[0].ID
			}
		}
		if got != wantID {
			return fmt.Sprintf("%s says slot %d is served by %q, want %q", node.proc.name, slot, got, wantID)
		}
	}
	return ""
}
