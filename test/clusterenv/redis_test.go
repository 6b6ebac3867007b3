package clusterenv_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/test/clusterenv"
)

// receiveTimeout bounds every wait for a Pub/Sub push in these tests.
const receiveTimeout = 5 * time.Second

// TestRedisClusterForms starts 3 masters and checks the topology, the URL,
// the inspection helpers and SlotOf against CLUSTER KEYSLOT.
func TestRedisClusterForms(t *testing.T) {
	t.Parallel()
	c := clusterenv.StartRedisCluster(t, 3)
	ctx := t.Context()

	addrs := c.Addrs()
	if len(addrs) != 3 {
		t.Fatalf("Addrs() = %v, want 3 addresses", addrs)
	}
	wantURL := fmt.Sprintf("redis+cluster://%s?addr=%s&addr=%s", addrs[0], addrs[1], addrs[2])
	if got := c.URL(); got != wantURL {
		t.Errorf("URL() = %q, want %q", got, wantURL)
	}
	opts, err := redis.ParseClusterURL(strings.TrimPrefix(c.URL(), "redis+cluster://"))
	if err == nil {
		t.Errorf("ParseClusterURL accepted a URL without a redis:// scheme: %+v", opts)
	}
	opts, err = redis.ParseClusterURL("redis://" + strings.TrimPrefix(c.URL(), "redis+cluster://"))
	if err != nil {
		t.Fatalf("ParseClusterURL of URL() with redis:// scheme: %v", err)
	}
	if strings.Join(opts.Addrs, ",") != strings.Join(addrs, ",") {
		t.Errorf("ParseClusterURL addresses = %v, want %v", opts.Addrs, addrs)
	}

	for i := range 3 {
		ci := c.ClusterInfo(t, i)
		if ci["cluster_state"] != "ok" || ci["cluster_known_nodes"] != "3" || ci["cluster_slots_assigned"] != "16384" {
			t.Errorf("node %d CLUSTER INFO: state %q, known nodes %q, slots assigned %q",
				i, ci["cluster_state"], ci["cluster_known_nodes"], ci["cluster_slots_assigned"])
		}
		if _, ok := ci["cluster_stats_messages_sent"]; !ok {
			t.Errorf("node %d CLUSTER INFO lacks cluster_stats_messages_sent: %v", i, ci)
		}
		if v := c.Info(t, i, "server")["redis_mode"]; v != "cluster" {
			t.Errorf("node %d INFO server redis_mode = %q, want cluster", i, v)
		}
		if _, ok := c.Info(t, i, "cpu")["used_cpu_sys"]; !ok {
			t.Errorf("node %d INFO cpu lacks used_cpu_sys", i)
		}
		// Node i owns its even share: slot 0 -> node 0, 16383 -> node 2.
		if owner := c.Owner(t, i*clusterenv.NumSlots/3); owner != i {
			t.Errorf("Owner(%d) = %d, want %d", i*clusterenv.NumSlots/3, owner, i)
		}
	}
	t.Logf("redis version %s, URL %s", c.Info(t, 0, "server")["redis_version"], c.URL())

	keys := []string{
		"", "foo", "bar", "123456789", "chat:room:{abc}", "typing:users:{abc}",
		"typing:users:{r1}", "chat:room:{r1}", "{user1000}.following", "foo{}{bar}",
		"foo{{bar}}zap", "foo{bar}{zap}", "{}", "}{", "a{b", "ünïcode:{ключ}",
	}
	for _, key := range keys {
		want, err := c.Node(0).ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
		}
		if got := clusterenv.SlotOf(key); int64(got) != want {
			t.Errorf("SlotOf(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
	if clusterenv.SlotOf("chat:room:{abc}") != clusterenv.SlotOf("typing:users:{abc}") {
		t.Error("chat:room:{abc} and typing:users:{abc} are in different slots")
	}

	// Keys spread over all nodes through the cluster client.
	for i := range 50 {
		key := fmt.Sprintf("spread:%d", i)
		if err := c.Client().Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s via cluster client: %v", key, err)
		}
	}
	for i := range 3 {
		n, err := c.Node(i).DBSize(ctx).Result()
		if err != nil || n == 0 {
			t.Errorf("node %d DBSIZE = %d, %v; want keys on every node", i, n, err)
		}
	}
}

// subscribeSharded SSUBSCRIBEs to ch on the master that serves it and waits
// for the confirmation.
func subscribeSharded(t *testing.T, c *clusterenv.RedisCluster, ch string) *redis.PubSub {
	t.Helper()
	ctx := t.Context()
	master, err := c.Client().MasterForKey(ctx, ch)
	if err != nil {
		t.Fatalf("MasterForKey(%q): %v", ch, err)
	}
	sub := master.SSubscribe(ctx, ch)
	t.Cleanup(func() { sub.Close() })
	msg, err := sub.ReceiveTimeout(ctx, receiveTimeout)
	if err != nil {
		t.Fatalf("SSUBSCRIBE %s: %v", ch, err)
	}
	if s, ok := msg.(*redis.Subscription); !ok || s.Kind != "ssubscribe" || s.Channel != ch {
		t.Fatalf("SSUBSCRIBE %s: first push = %#v, want ssubscribe confirmation", ch, msg)
	}
	return sub
}

// receiveMessage waits for the next push on sub and requires it to be a
// message on ch with payload.
func receiveMessage(t *testing.T, sub *redis.PubSub, ch, payload string) {
	t.Helper()
	msg, err := sub.ReceiveTimeout(t.Context(), receiveTimeout)
	if err != nil {
		t.Fatalf("waiting for %q on %s: %v", payload, ch, err)
	}
	m, ok := msg.(*redis.Message)
	if !ok || m.Channel != ch || m.Payload != payload {
		t.Fatalf("waiting for %q on %s: got %#v", payload, ch, msg)
	}
}

// TestRedisShardedPubSub checks SPUBLISH through the cluster client and
// SPUBLISH from an EVAL script whose keys share the channel's slot.
func TestRedisShardedPubSub(t *testing.T) {
	t.Parallel()
	c := clusterenv.StartRedisCluster(t, 3)
	ctx := t.Context()
	const ch = "chat:room:{r1}"
	sub := subscribeSharded(t, c, ch)

	n, err := c.Client().SPublish(ctx, ch, "hello").Result()
	if err != nil {
		t.Fatalf("SPUBLISH %s via cluster client: %v", ch, err)
	}
	if n != 1 {
		t.Errorf("SPUBLISH %s reached %d subscribers, want 1", ch, n)
	}
	receiveMessage(t, sub, ch, "hello")

	// The typing path: one script touches the typing key and publishes on
	// the room's shard channel, both in slot of {r1}.
	const script = `
redis.call('SET', KEYS[1], ARGV[1], 'PX', 5000)
return redis.call('SPUBLISH', KEYS[2], ARGV[1])`
	keys := []string{"typing:users:{r1}", ch}
	got, err := c.Client().Eval(ctx, script, keys, "x").Result()
	if err != nil {
		t.Fatalf("EVAL with SPUBLISH on Redis cluster: %v", err)
	}
	t.Logf("EVAL SET + SPUBLISH returned %v (receivers)", got)
	if got != int64(1) {
		t.Errorf("EVAL SPUBLISH returned %v, want 1 receiver", got)
	}
	receiveMessage(t, sub, ch, "x")
	if v, err := c.Client().Get(ctx, "typing:users:{r1}").Result(); err != nil || v != "x" {
		t.Errorf("GET typing:users:{r1} after EVAL = %q, %v; want x", v, err)
	}

	// A shard channel served by another node than the script's keys is
	// refused ({r1} is slot 2121 on node 0, {other} slot 11361 on node 2).
	const remote = "chat:room:{other}"
	if a, b := c.Owner(t, clusterenv.SlotOf(ch)), c.Owner(t, clusterenv.SlotOf(remote)); a == b {
		t.Fatalf("%s and %s are both on node %d; the check below needs two nodes", ch, remote, a)
	}
	_, err = c.Client().Eval(ctx, `return redis.call('SPUBLISH', ARGV[1], 'y')`,
		[]string{"typing:users:{r1}"}, remote).Result()
	if err == nil {
		t.Errorf("EVAL publishing to %s (another node) succeeded, want a non-local error", remote)
	} else {
		t.Logf("EVAL SPUBLISH to a channel on another node refused as expected: %v", err)
	}

	sent := c.ClusterInfo(t, c.Owner(t, clusterenv.SlotOf(ch)))["cluster_stats_messages_publishshard_sent"]
	t.Logf("owner's cluster_stats_messages_publishshard_sent = %q (no replicas: nothing to send)", sent)
}

// TestRedisMoveSlotUnsubscribes moves a shard channel's slot (with keys) to
// another node: the subscriber gets a server-sent sunsubscribe and the keys
// stay readable through the cluster client.
func TestRedisMoveSlotUnsubscribes(t *testing.T) {
	t.Parallel()
	c := clusterenv.StartRedisCluster(t, 3)
	ctx := t.Context()
	const ch = "chat:room:{mv}"
	slot := clusterenv.SlotOf(ch)
	const nKeys = 250 // > one MIGRATE batch of 100
	for i := range nKeys {
		if err := c.Client().Set(ctx, fmt.Sprintf("k:{mv}:%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET via cluster client: %v", err)
		}
	}
	sub := subscribeSharded(t, c, ch)

	from := c.Owner(t, slot)
	to := (from + 1) % 3
	c.MoveSlot(t, slot, to)
	if got := c.Owner(t, slot); got != to {
		t.Fatalf("after MoveSlot(%d, %d) the owner is node %d", slot, to, got)
	}

	msg, err := sub.ReceiveTimeout(ctx, receiveTimeout)
	if err != nil {
		t.Fatalf("waiting for a server-sent sunsubscribe after the slot move: %v", err)
	}
	s, ok := msg.(*redis.Subscription)
	if !ok || s.Kind != "sunsubscribe" || s.Channel != ch {
		t.Fatalf("after the slot move the subscriber got %#v, want a sunsubscribe for %s", msg, ch)
	}
	t.Logf("slot %d moved node %d -> %d; subscriber got %s %s (count %d)", slot, from, to, s.Kind, s.Channel, s.Count)

	for i := range nKeys {
		key := fmt.Sprintf("k:{mv}:%d", i)
		v, err := c.Client().Get(ctx, key).Int()
		if err != nil || v != i {
			t.Fatalf("GET %s via cluster client after the move = %d, %v; want %d", key, v, err, i)
		}
	}
	if n, err := c.Node(to).ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != nKeys {
		t.Errorf("node %d CLUSTER COUNTKEYSINSLOT %d = %d, %v; want %d", to, slot, n, err, nKeys)
	}
	if n, err := c.Node(from).ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != 0 {
		t.Errorf("node %d CLUSTER COUNTKEYSINSLOT %d = %d, %v; want 0", from, slot, n, err)
	}

	// Following the move: subscribe again where the slot now lives.
	sub2 := subscribeSharded(t, c, ch)
	if err := c.Client().SPublish(ctx, ch, "after-move").Err(); err != nil {
		t.Fatalf("SPUBLISH after the move: %v", err)
	}
	receiveMessage(t, sub2, ch, "after-move")
}
