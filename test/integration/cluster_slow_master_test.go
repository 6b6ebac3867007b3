package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/faultproxy"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/test/clusterenv"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// A slow master on a real Redis Cluster: one master is reached through a
// TCP proxy that delays every chunk by 500 ms (the master announces the
// proxy's port, so every Cluster client, the worker's too, goes through
// it). A worker process gets a flood of commands for a room on that master,
// more than its shard queue holds; commands for rooms on the other masters,
// published after the flood, are still applied at once: their events
// arrive within 2 × the delay of being published (blocked behind the slow
// master they would wait many seconds, the queue draining one 500 ms round
// trip per batch), while the slow shard still has commands queued. The
// flood beyond the queue is shed, and counted.
func TestClusterSlowMasterDoesNotDelayOtherShards(t *testing.T) {
	t.Parallel()
	const delay = 500 * time.Millisecond
	const shards = 16
	rc := clusterenv.StartRedisCluster(t, 3)
	const slow = 2 // the master behind the proxy
	px, err := faultproxy.New(rc.Addrs()[slow])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	_, pport, _ := net.SplitHostPort(px.Addr())
	ctx := context.Background()
	if err := rc.Node(slow).ConfigSet(ctx, "cluster-announce-port", pport).Err(); err != nil {
		t.Fatalf("CONFIG SET cluster-announce-port: %v", err)
	}
	// Every node must hand out the proxy's address for the slow master's
	// slots before the worker loads its slot map.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		agreed := 0
		for i := range 3 {
			if strings.Contains(rc.Node(i).ClusterNodes(ctx).Val(), "127.0.0.1:"+pport+"@") {
				agreed++
			}
		}
		if agreed == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster does not announce the proxy port %s for master %d", pport, slow)
		}
	}

	ps := newProcStack(t, map[string]string{
		"ELLIPSIS_REDIS_URL":     rc.URL(),
		"ELLIPSIS_WORKER_SHARDS": strconv.Itoa(shards),
		"ELLIPSIS_TYPING_TTL":    "30s",
	})
	w := ps.startWorker(nil)
	n := names.New(ps.s.cfg.KeyPrefix, ps.s.cfg.SubjectPrefix)
	owner := func(key string) int { return rc.Owner(t, clusterenv.SlotOf(key)) }
	// The slow room on the slow master; fast rooms on the others, whose
	// sweep bucket (indexed by the worker after a start on Cluster) is on a
	// fast master too.
	var slowRoom string
	var fastRooms []string
	for k := 0; (slowRoom == "" || len(fastRooms) < 4) && k < 10000; k++ {
		room := fmt.Sprintf("sm%d", k)
		o := owner(n.UsersKey(room))
		switch {
		case o == slow && slowRoom == "":
			slowRoom = room
		case o != slow && owner(n.SweepKey(names.SweepBucket(room))) != slow && len(fastRooms) < 4:
			fastRooms = append(fastRooms, room)
		}
	}
	if slowRoom == "" || len(fastRooms) < 4 {
		t.Fatalf("rooms: slow %q, fast %v", slowRoom, fastRooms)
	}
	// Connections on worker shards other than the slow connection's
	// (dispatch: FNV-1a of conn, modulo the shards).
	shardOf := func(conn string) int {
		h := fnv.New32a()
		h.Write([]byte(conn))
		return int(h.Sum32() % shards)
	}
	slowConn := "slow:0"
	var fastConns []string
	used := map[int]bool{shardOf(slowConn): true}
	for k := 0; len(fastConns) < len(fastRooms); k++ {
		c := "fast:" + strconv.Itoa(k)
		if !used[shardOf(c)] {
			used[shardOf(c)] = true
			fastConns = append(fastConns, c)
		}
	}

	// The test's own subscribers (one per room: a sharded subscription
	// lives on its channel's master) reach every master directly.
	arrived := make(chan protocol.RoomEvent, 64)
	for _, room := range fastRooms {
		sub := rc.Client().SSubscribe(ctx, n.RoomChannel(room))
		t.Cleanup(func() { sub.Close() })
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatalf("SSUBSCRIBE %s: %v", room, err)
		}
		go func() {
			for m := range sub.Channel() {
				if ev, err := protocol.DecodeRoomEvent([]byte(m.Payload)); err == nil {
					arrived <- ev
				}
			}
		}()
	}
	nc := connectNATS(t, testkit.NATSURL())
	pub := func(cmd protocol.Command) {
		t.Helper()
		publishCommand(t, nc, ps.s.cfg.SubjectPrefix, cmd)
	}
	waitStart := func(room, user string, within time.Duration) bool {
		deadline := time.After(within)
		for {
			select {
			case ev := <-arrived:
				if ev.Type == protocol.TypeTypingStart && ev.Room == room && ev.User == user {
					return true
				}
			case <-deadline:
				return false
			}
		}
	}
	// Warm up: the worker has loaded its scripts and slot map, and the fast
	// rooms answer.
	for i, room := range fastRooms {
		pub(protocol.Command{Op: protocol.OpStart, Room: room, User: "warm", Conn: fastConns[i], Seq: 1})
		if !waitStart(room, "warm", 15*time.Second) {
			t.Fatalf("no warm-up start in %s", room)
		}
	}

	px.Slow(delay)
	// The worker's calls for the slow room do cross the proxy: a start's
	// event, watched on the master itself (not through the proxy), comes
	// no sooner than the delay after it was published.
	probe := rc.Node(slow).SSubscribe(ctx, n.RoomChannel(slowRoom))
	t.Cleanup(func() { probe.Close() })
	if _, err := probe.Receive(ctx); err != nil {
		t.Fatalf("SSUBSCRIBE %s: %v", slowRoom, err)
	}
	sent := time.Now()
	pub(protocol.Command{Op: protocol.OpStart, Room: slowRoom, User: "probe", Conn: "probe:0", Seq: 1})
	select {
	case <-probe.Channel():
		if took := time.Since(sent); took < delay {
			t.Fatalf("the slow room's start took %v, less than the proxy's delay %v: the worker does not go through the proxy", took, delay)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event of the slow room's start")
	}
	// The flood: more starts of one connection in the slow room than its
	// shard queue holds (1024). Each batch of up to 64 waits a delayed
	// round trip.
	for seq := uint64(1); seq <= 3000; seq++ {
		cmd := protocol.Command{V: protocol.Version, Op: protocol.OpStart, Room: slowRoom, User: "slowpoke", Conn: slowConn, Seq: seq, TsMs: time.Now().UnixMilli()}
		b, _ := json.Marshal(cmd)
		if err := nc.Publish(n.CommandSubject(), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The flood has reached the worker (counted shed or queued) before the
	// fast commands are timed.
	for deadline := time.Now().Add(20 * time.Second); metric(t, w.adminAddr, "ellipsis_worker_commands_total", `outcome="shed"`) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no start shed from the flooded shard: %v commands counted",
				metric(t, w.adminAddr, "ellipsis_worker_commands_total"))
		}
	}

	bound := 2 * delay
	for round := range 3 {
		for i, room := range fastRooms {
			user := fmt.Sprintf("u%d", round)
			sent = time.Now()
			pub(protocol.Command{Op: protocol.OpStart, Room: room, User: user, Conn: fastConns[i], Seq: uint64(2 + round)})
			if !waitStart(room, user, bound) {
				t.Fatalf("round %d: the start of %s in %s (master %d) took over %v while master %d is delayed by %v",
					round, user, room, owner(n.UsersKey(room)), bound, slow, delay)
			}
			t.Logf("round %d %s: %v", round, room, time.Since(sent).Round(time.Millisecond))
		}
	}
	if q := metric(t, w.adminAddr, "ellipsis_worker_queued_commands"); q == 0 {
		t.Fatalf("the slow shard's queue drained before the fast commands were timed (queued %v): nothing was shown", q)
	}
	px.Slow(0)
}
