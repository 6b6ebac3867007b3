package integration

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/test/clusterenv"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Ellipsis on a 3-master Redis Cluster (sharded Pub/Sub, the
// default there) and a 3-node NATS cluster, with two gateway and two worker
// processes. The typing scenarios run over rooms spread on every master;
// then a room's hash slot moves to another master (the gateways follow),
// and one NATS node and one gateway are killed, and the scenarios run
// again. No message crosses the cluster bus as classic PUBLISH.
func TestClusterTypingScenarios(t *testing.T) {
	t.Parallel()
	rc := clusterenv.StartRedisCluster(t, 3)
	nc := clusterenv.StartNATSCluster(t, 3)
	ps := newProcStack(t, map[string]string{
		"ELLIPSIS_REDIS_URL": rc.URL(),
		"ELLIPSIS_NATS_URL":  nc.URL(),
	})
	ps.startWorker(nil)
	ps.startWorker(nil)
	g0, g1 := ps.startGateway(nil), ps.startGateway(nil)
	prefix := ps.s.cfg.KeyPrefix

	clusterTypingScenarios(t, rc, prefix, "r1", g0, g1)
	if t.Failed() {
		return
	}

	// A slot move: bob stays joined on both gateways while the room's slot
	// moves to another master; the gateways resubscribe there.
	t.Run("slot-move", func(t *testing.T) { clusterSlotMove(t, rc, prefix, g0, g1) })

	// Failures: NATS node 1 and gateway 1 die. Clients use gateway 0; the
	// services' NATS connections move to the remaining nodes.
	killedAt := time.Now()
	nc.Kill(1)
	g1.kill(syscall.SIGKILL)
	if code, _ := g1.waitExit(t, 5*time.Second); code == 0 {
		t.Fatalf("gateway 1 exited cleanly after SIGKILL")
	}
	waitReadyz(t, g0.adminAddr, 200, 10*time.Second)
	for _, w := range ps.workers {
		waitReadyz(t, w.adminAddr, 200, 10*time.Second)
	}
	t.Logf("services ready again %v after NATS node 1 and gateway 1 died", time.Since(killedAt))
	clusterTypingScenarios(t, rc, prefix, "r2", g0, g0)

	// Sharded Pub/Sub keeps events off the cluster bus: no node sent a
	// classic PUBLISH message to its peers.
	for i := range 3 {
		info := rc.ClusterInfo(t, i)
		if n, _ := strconv.Atoi(info["cluster_stats_messages_publish_sent"]); n != 0 {
			t.Errorf("master %d sent %d classic publish messages over the cluster bus; sharded Pub/Sub should send none", i, n)
		}
	}
}

// clusterTypingScenarios runs the typing scenarios of round (the subtests
// round+"/…") with typists on gwA and receivers on gwB.
func clusterTypingScenarios(t *testing.T, rc *clusterenv.RedisCluster, prefix, round string, gwA, gwB *proc) {
	t.Helper()
	// Rooms whose keys live on each master, so every shard's Pub/Sub
	// and sweep bucket are exercised.
	rooms := roomsOnEveryMaster(t, rc, prefix, round, 2)
	t.Run(round+"/start-stop-across-gateways", func(t *testing.T) {
		for _, room := range rooms {
			alice := dial(t, gwA.wsURL("alice", "Alice"), "alice")
			bob := dial(t, gwB.wsURL("bob", "Bob"), "bob")
			alice.join(room)
			bob.join(room)
			alice.start(room)
			f := bob.next(isStart(room, "alice"), 3*time.Second, "typing_start on "+room)
			if f.Name != "Alice" {
				t.Fatalf("%s: start %v", room, f)
			}
			alice.stop(room)
			bob.next(isStop(room, "alice", "stopped"), 3*time.Second, "typing_stop on "+room)
			alice.close()
			bob.close()
		}
	})
	t.Run(round+"/snapshot-on-join", func(t *testing.T) {
		room := rooms[0]
		alice := dial(t, gwA.wsURL("alice", "Alice"), "alice")
		watcher := dial(t, gwA.wsURL("zed", ""), "zed")
		alice.join(room)
		watcher.join(room)
		alice.start(room)
		watcher.next(isStart(room, "alice"), 3*time.Second, "alice's start")
		late := dial(t, gwB.wsURL("carol", ""), "carol")
		if j := late.join(room); users(j.Typing) != "alice" {
			t.Fatalf("snapshot on join %q, want alice", users(j.Typing))
		}
		alice.stop(room)
		watcher.next(isStop(room, "alice", "stopped"), 3*time.Second, "alice's stop")
	})
	t.Run(round+"/silent-typist-expires-on-every-shard", func(t *testing.T) {
		var bobs []*client
		for _, room := range rooms {
			alice := dial(t, gwA.wsURL("alice", "Alice"), "alice")
			bob := dial(t, gwB.wsURL("bob", "Bob"), "bob")
			alice.join(room)
			bob.join(room)
			alice.start(room)
			bob.next(isStart(room, "alice"), 3*time.Second, "typing_start on "+room)
			bobs = append(bobs, bob)
		}
		for i, bob := range bobs {
			f := bob.next(isStop(rooms[i], "alice", ""), expiryBound+time.Second, "expired stop on "+rooms[i])
			if f.Reason != "expired" {
				t.Fatalf("%s: stop reason %q, want expired", rooms[i], f.Reason)
			}
		}
	})
	t.Run(round+"/abrupt-disconnect-stops-typing", func(t *testing.T) {
		room := rooms[len(rooms)-1]
		alice := dial(t, gwA.wsURL("alice", "Alice"), "alice")
		bob := dial(t, gwB.wsURL("bob", "Bob"), "bob")
		alice.join(room)
		bob.join(room)
		alice.start(room)
		bob.next(isStart(room, "alice"), 3*time.Second, "typing_start")
		alice.abort()
		f := bob.next(isStop(room, "alice", ""), expiryBound, "typing_stop after the disconnect")
		if f.Reason != "disconnected" && f.Reason != "expired" {
			t.Fatalf("stop reason %q", f.Reason)
		}
	})
}

// clusterSlotMove checks that after the move the gateways get the new
// master's events within 10 s, and each counts a channel move and keeps one Pub/Sub link
// per master.
func clusterSlotMove(t *testing.T, rc *clusterenv.RedisCluster, prefix string, g0, g1 *proc) {
	t.Helper()
	room := "moving:" + testkit.RandHex(5)
	slot := clusterenv.SlotOf(names.New(prefix, "").RoomChannel(room))
	alice := dial(t, g0.wsURL("alice", "Alice"), "alice")
	bob0 := dial(t, g0.wsURL("bob", "Bob"), "bob0")
	bob1 := dial(t, g1.wsURL("bob", "Bob"), "bob1")
	for _, c := range []*client{alice, bob0, bob1} {
		c.join(room)
	}
	alice.start(room)
	for _, b := range []*client{bob0, bob1} {
		b.next(isStart(room, "alice"), 3*time.Second, "start before the move")
	}
	from := rc.Owner(t, slot)
	to := (from + 1) % 3
	moved := time.Now()
	rc.MoveSlot(t, slot, to)
	t.Logf("moved slot %d of %q from master %d to %d in %v", slot, room, from, to, time.Since(moved))
	// The typist's entry moved with the slot; the gateways resync
	// (a snapshot) and then get the new master's events.
	deadline := time.Now().Add(10 * time.Second)
	for _, b := range []*client{bob0, bob1} {
		for {
			alice.stop(room)
			alice.start(room)
			if _, ok := b.tryNext(isStart(room, "alice"), 300*time.Millisecond); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no typing_start from the room's new master within 10 s of the move", b.name)
			}
		}
	}
	t.Logf("events flow from the new master %v after the move began", time.Since(moved))
	for _, g := range []*proc{g0, g1} {
		if n := metric(t, g.adminAddr, "ellipsis_gateway_redis_channel_moves_total"); n < 1 {
			t.Errorf("%s: redis_channel_moves_total = %v, want ≥ 1", g.name, n)
		}
		if n := metric(t, g.adminAddr, "ellipsis_gateway_redis_pubsub_links"); n != 3 {
			t.Errorf("%s: redis_pubsub_links = %v, want 3 (one per master)", g.name, n)
		}
	}
}

// roomsOnEveryMaster returns perMaster room names (ending in suffix) for
// each master of rc, chosen by their keys' hash slot.
func roomsOnEveryMaster(t *testing.T, rc *clusterenv.RedisCluster, prefix, suffix string, perMaster int) []string {
	t.Helper()
	n := names.New(prefix, "")
	count := map[int]int{}
	var rooms []string
	for k := 0; len(rooms) < 3*perMaster && k < 10000; k++ {
		room := fmt.Sprintf("c%d:%s", k, suffix)
		owner := rc.Owner(t, clusterenv.SlotOf(n.UsersKey(room)))
		if count[owner] < perMaster {
			count[owner]++
			rooms = append(rooms, room)
		}
	}
	if len(rooms) < 3*perMaster {
		t.Fatalf("rooms per master %v", count)
	}
	return rooms
}
