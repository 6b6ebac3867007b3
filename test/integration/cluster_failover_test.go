package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/test/clusterenv"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// clusterProcStack starts a 3-master Redis Cluster, a 3-node NATS cluster
// and (after before, if set, which may add replicas) two worker and two
// gateway processes on them.
func clusterProcStack(t *testing.T, before func(rc *clusterenv.RedisCluster, n names.Names)) (*clusterenv.RedisCluster, *procStack, *proc, *proc) {
	t.Helper()
	rc := clusterenv.StartRedisCluster(t, 3)
	nc := clusterenv.StartNATSCluster(t, 3)
	ps := newProcStack(t, map[string]string{
		"ELLIPSIS_REDIS_URL": rc.URL(),
		"ELLIPSIS_NATS_URL":  nc.URL(),
	})
	if before != nil {
		before(rc, names.New(ps.s.cfg.KeyPrefix, ""))
	}
	ps.startWorker(nil)
	ps.startWorker(nil)
	return rc, ps, ps.startGateway(nil), ps.startGateway(nil)
}

// typeUntilSeen makes typist stop and start typing in each room, every
// typeRound, until every watcher got the typist's typing_start in every
// room (docs/protocol.md, "Throttle": a start after a stop is always fanned out), and
// returns when each arrived: seen[r][w] for rooms[r] and watchers[w]. It
// fails the test at deadline. The typist's own frames (error frames while
// Redis fails over) are drained each round and the error frames logged
// once each.
func typeUntilSeen(t *testing.T, typist *client, rooms []string, deadline time.Time, watchers ...*client) [][]time.Time {
	t.Helper()
	const typeRound = 100 * time.Millisecond
	seen := make([][]time.Time, len(rooms))
	for r := range seen {
		seen[r] = make([]time.Time, len(watchers))
	}
	left := len(rooms) * len(watchers)
	seenErr := map[string]bool{}
	for left > 0 {
		for r, room := range rooms {
			if !slices.ContainsFunc(seen[r], time.Time.IsZero) {
				continue
			}
			typist.stop(room)
			typist.start(room)
		}
		time.Sleep(typeRound)
		for w, c := range watchers {
			// Frames already received are read at once; f.at is when each
			// arrived. Other rooms' frames and snapshots are skipped.
			for _, f := range c.drain(time.Millisecond) {
				if f.Type == "error" {
					t.Fatalf("%s: error frame %v", c.name, f)
				}
				for r, room := range rooms {
					if seen[r][w].IsZero() && isStart(room, typist.name)(f) {
						seen[r][w] = f.at
						left--
					}
				}
			}
		}
		for _, f := range typist.drain(time.Millisecond) {
			if f.Type == "error" && !seenErr[f.Code+f.Message] {
				seenErr[f.Code+f.Message] = true
				t.Logf("%s got %v while typing", typist.name, f)
			}
		}
		if left > 0 && time.Now().After(deadline) {
			var missing []string
			for r, room := range rooms {
				for w, c := range watchers {
					if seen[r][w].IsZero() {
						missing = append(missing, c.name+" in "+room)
					}
				}
			}
			t.Fatalf("no typing_start of %s by %s: %v", typist.name, deadline.Format("15:04:05.000"), missing)
		}
	}
	return seen
}

// A master's Pub/Sub connections are killed (CLIENT KILL TYPE pubsub):
// each gateway's link to that master redials and resubscribes its channels
// one hash slot at a time (one SSUBSCRIBE across the two rooms' slots would
// get CROSSSLOT), reports them restored and resyncs, so events of both
// rooms flow again within a few seconds.
func TestClusterPubSubReconnect(t *testing.T) {
	t.Parallel()
	rc, ps, g0, g1 := clusterProcStack(t, nil)
	n := names.New(ps.s.cfg.KeyPrefix, "")

	rooms, channels, master := roomsOnOneMasterTwoSlots(t, rc, n)

	// Bob watches on both gateways: each has its own link to the master.
	alice := dial(t, g0.wsURL("alice", "Alice"), "alice")
	bobs := []*client{dial(t, g0.wsURL("bob", "Bob"), "bob0"), dial(t, g1.wsURL("bob", "Bob"), "bob1")}
	for _, room := range rooms {
		alice.join(room)
		for _, b := range bobs {
			b.join(room)
		}
		alice.start(room)
		for _, b := range bobs {
			b.next(isStart(room, "alice"), 3*time.Second, "typing_start in "+room+" before the kill")
		}
	}
	for _, b := range bobs {
		b.drain(100 * time.Millisecond)
	}

	ctx := t.Context()
	killed := time.Now()
	nKilled, err := rc.Node(master).ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	if err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub on master %d: %v", master, err)
	}
	// One link per gateway to this master (both gateways have members in
	// both rooms).
	if nKilled < 2 {
		t.Errorf("CLIENT KILL TYPE pubsub on master %d killed %d connections, want ≥ 2 (one per gateway)", master, nKilled)
	}
	deadline := killed.Add(10 * time.Second)
	var last time.Time
	for r, byBob := range typeUntilSeen(t, alice, rooms, deadline, bobs...) {
		for i, at := range byBob {
			t.Logf("%s: alice's typing_start reached %s %v after the kill", rooms[r], bobs[i].name, at.Sub(killed))
			if at.After(last) {
				last = at
			}
		}
	}
	recordRecovery(t, "redis cluster CLIENT KILL TYPE pubsub, 2 slots on the master: typing_start again", last.Sub(killed))

	waitResubscribedOnce(t, rc, master, n, channels, deadline)
	checkPubSubRelinkLogged(t, g0, g1)

	// And the rooms keep working: alice stops, bob sees it in both.
	for _, room := range rooms {
		alice.stop(room)
		for _, b := range bobs {
			b.next(isStop(room, "alice", "stopped"), 3*time.Second, "typing_stop in "+room+" after recovery")
		}
	}
}

// roomsOnOneMasterTwoSlots picks two rooms whose channels share a master
// but not a slot, and returns them, their channels and the master.
func roomsOnOneMasterTwoSlots(t *testing.T, rc *clusterenv.RedisCluster, n names.Names) (rooms, channels []string, master int) {
	t.Helper()
	tok := testkit.RandHex(5)
	var slots []int
	master = -1
	for k := 0; len(rooms) < 2 && k < 200; k++ {
		room := fmt.Sprintf("reconnect-%d:%s", k, tok)
		ch := n.RoomChannel(room)
		slot := clusterenv.SlotOf(ch)
		owner := rc.Owner(t, slot)
		if master == -1 {
			master = owner
		}
		if owner == master && !slices.Contains(slots, slot) {
			rooms, channels, slots = append(rooms, room), append(channels, ch), append(slots, slot)
		}
	}
	if len(rooms) < 2 {
		t.Fatalf("no two rooms in different slots of master %d: %v", master, rooms)
	}
	t.Logf("rooms %q (slots %v) on master %d", rooms, slots, master)
	return rooms, channels, master
}

// waitResubscribedOnce waits until deadline for master to have exactly
// channels subscribed again (PUBSUB SHARDCHANNELS), each by 2 subscribers
// (SHARDNUMSUB): once per gateway.
func waitResubscribedOnce(t *testing.T, rc *clusterenv.RedisCluster, master int, n names.Names, channels []string, deadline time.Time) {
	t.Helper()
	ctx := t.Context()
	for {
		got, err := rc.Node(master).PubSubShardChannels(ctx, n.KeyPrefix()+"chat:room:*").Result()
		if err != nil {
			t.Fatalf("PUBSUB SHARDCHANNELS on master %d: %v", master, err)
		}
		counts, err := rc.Node(master).PubSubShardNumSub(ctx, channels...).Result()
		if err != nil {
			t.Fatalf("PUBSUB SHARDNUMSUB on master %d: %v", master, err)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(channels))
		if slices.Equal(got, want) && counts[channels[0]] == 2 && counts[channels[1]] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("master %d: PUBSUB SHARDCHANNELS = %q, SHARDNUMSUB = %v; want %q with 2 subscribers each", master, got, counts, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkPubSubRelinkLogged checks that each gateway logged its lost Pub/Sub
// link and its channels restored, and got no CROSSSLOT reply.
func checkPubSubRelinkLogged(t *testing.T, g0, g1 *proc) {
	t.Helper()
	for _, g := range []*proc{g0, g1} {
		lost := g.countLines("redis pubsub connection lost")
		restored := g.countLines("redis pubsub channels restored")
		crossSlot := g.countLines("CROSSSLOT")
		t.Logf("%s: %d connection-lost, %d restored, %d CROSSSLOT log lines", g.name, lost, restored, crossSlot)
		if lost < 1 || restored < 1 || crossSlot != 0 {
			t.Errorf("%s: want the lost link logged, its channels restored and no CROSSSLOT reply", g.name)
		}
	}
}

// The master of a room's slot is SIGKILLed; its replica is promoted by the
// cluster (node timeout 2000 ms plus election). Gateways must move the
// room's subscription to the promoted master's link and workers must write
// there, so alice's typing reaches bob again, new joins work and a silent
// typist's expired stop is pushed (by a sweep of the promoted master's
// bucket). docs/protocol.md ("Order and loss"): typing state the replica had not received is
// lost; the test does not depend on it.
func TestClusterMasterFailover(t *testing.T) {
	t.Parallel()
	var room string
	var master, replica int
	rc, ps, g0, g1 := clusterProcStack(t, func(rc *clusterenv.RedisCluster, n names.Names) {
		room, master, replica = pickFailoverRoom(t, rc, n)
	})

	// Bob watches on both gateways: each must move its subscription.
	alice := dial(t, g0.wsURL("alice", "Alice"), "alice")
	bobs := []*client{dial(t, g0.wsURL("bob", "Bob"), "bob0"), dial(t, g1.wsURL("bob", "Bob"), "bob1")}
	alice.join(room)
	for _, b := range bobs {
		b.join(room)
	}
	alice.start(room)
	for _, b := range bobs {
		b.next(isStart(room, "alice"), 3*time.Second, "typing_start before the failover")
		b.drain(100 * time.Millisecond)
	}

	killed := time.Now()
	rc.Kill(master)
	promoted := rc.WaitMaster(t, replica, 15*time.Second)
	t.Logf("master %d SIGKILLed; replica %d promoted after %v", master, replica, promoted.Sub(killed))

	var last time.Time
	for i, at := range typeUntilSeen(t, alice, []string{room}, killed.Add(20*time.Second), bobs...)[0] {
		t.Logf("alice's typing_start reached %s %v after the kill (%v after the promotion)",
			bobs[i].name, at.Sub(killed), at.Sub(promoted))
		if at.After(last) {
			last = at
		}
	}
	recordRecovery(t, "redis cluster master SIGKILL, replica promoted: typing_start again", last.Sub(killed))
	alice.stop(room)
	for _, b := range bobs {
		b.next(isStop(room, "alice", "stopped"), 3*time.Second, "alice's typing_stop after the failover")
	}
	alice.drain(100 * time.Millisecond) // error frames of the failover rounds

	checkSubscribedOnPromoted(t, rc, replica, names.New(ps.s.cfg.KeyPrefix, "").RoomChannel(room), g0, g1)

	checkExpiryAfterFailover(t, g0, g1, alice, bobs, room)
	if d := time.Since(killed); d > 30*time.Second {
		t.Errorf("the failover scenario took %v, want < 30 s", d)
	}
}

// pickFailoverRoom picks a room whose sweep bucket is on the room's master
// too, so the expiry after the failover is swept from the promoted master,
// and adds a replica to that master.
func pickFailoverRoom(t *testing.T, rc *clusterenv.RedisCluster, n names.Names) (room string, master, replica int) {
	t.Helper()
	tok := testkit.RandHex(5)
	for k := 0; k < 200 && room == ""; k++ {
		r := fmt.Sprintf("failover-%d:%s", k, tok)
		m := rc.Owner(t, clusterenv.SlotOf(n.RoomChannel(r)))
		if rc.Owner(t, clusterenv.SlotOf(n.SweepKey(names.SweepBucket(r)))) == m {
			room, master = r, m
		}
	}
	if room == "" {
		t.Fatal("no room with its sweep bucket on its own master")
	}
	added := time.Now()
	replica = rc.AddReplica(t, master)
	t.Logf("room %q on master %d (slot %d); replica node %d synced in %v",
		room, master, clusterenv.SlotOf(n.RoomChannel(room)), replica, time.Since(added))
	return room, master, replica
}

// checkSubscribedOnPromoted checks that both gateways subscribe channel on
// the promoted master (node replica) now, and counted a channel move.
func checkSubscribedOnPromoted(t *testing.T, rc *clusterenv.RedisCluster, replica int, channel string, g0, g1 *proc) {
	t.Helper()
	ctx := t.Context()
	if got, err := rc.Node(replica).PubSubShardNumSub(ctx, channel).Result(); err != nil || got[channel] != 2 {
		t.Errorf("PUBSUB SHARDNUMSUB %s on the promoted master = %v, %v; want 2 (one per gateway)", channel, got, err)
	}
	for _, g := range []*proc{g0, g1} {
		if n := metric(t, g.adminAddr, "ellipsis_gateway_redis_channel_moves_total"); n < 1 {
			t.Errorf("%s: redis_channel_moves_total = %v, want ≥ 1", g.name, n)
		}
	}
}

// checkExpiryAfterFailover makes new joins on the room, on both gateways,
// with snapshots; carol types once and goes silent: the promoted master's
// sweep bucket yields her expired stop on both gateways.
func checkExpiryAfterFailover(t *testing.T, g0, g1 *proc, alice *client, bobs []*client, room string) {
	t.Helper()
	carol := dial(t, g1.wsURL("carol", "Carol"), "carol")
	dave := dial(t, g0.wsURL("dave", "Dave"), "dave")
	if j := carol.join(room); users(j.Typing) != "" {
		t.Errorf("carol's join snapshot %q, want nobody typing", users(j.Typing))
	}
	dave.join(room)

	carol.start(room)
	started := dave.next(isStart(room, "carol"), 3*time.Second, "carol's typing_start").at
	for _, b := range bobs {
		b.next(isStart(room, "carol"), 3*time.Second, "carol's typing_start")
	}
	for _, c := range append([]*client{dave, alice}, bobs...) {
		f := c.next(isStop(room, "carol", ""), expiryBound+time.Second, "carol's expired typing_stop")
		if f.Reason != "expired" {
			t.Fatalf("%s: carol's stop reason %q, want expired", c.name, f.Reason)
		}
		if c == dave {
			t.Logf("carol's expired stop reached dave %v after her start", f.at.Sub(started))
		}
	}
}
