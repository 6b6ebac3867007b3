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
	"github.com/nats-io/nats.go"
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
	waitProxyAnnounced(t, rc, slow, pport)

	ps := newProcStack(t, map[string]string{
		"ELLIPSIS_REDIS_URL":     rc.URL(),
		"ELLIPSIS_WORKER_SHARDS": strconv.Itoa(shards),
		"ELLIPSIS_TYPING_TTL":    "30s",
	})
	sm := &slowMasterEnv{
		t: t, rc: rc, slow: slow, ps: ps,
		w: ps.startWorker(nil),
		n: names.New(ps.s.cfg.KeyPrefix, ps.s.cfg.SubjectPrefix),
	}
	sm.pickRooms()
	sm.pickConns(shards)
	sm.subscribeFastRooms(ctx)
	sm.nc = connectNATS(t, testkit.NATSURL())
	sm.warmUp()

	px.Slow(delay)
	sm.probeSlowRoomCrossesProxy(ctx, delay)
	sm.floodSlowShard()
	sm.timeFastRooms(delay)
	if q := metric(t, sm.w.adminAddr, "ellipsis_worker_queued_commands"); q == 0 {
		t.Fatalf("the slow shard's queue drained before the fast commands were timed (queued %v): nothing was shown", q)
	}
	px.Slow(0)
}

// waitProxyAnnounced waits (up to 30 s) until every node of rc hands out
// the proxy's port pport for the slow master's slots, so the worker loads a
// slot map that goes through the proxy.
func waitProxyAnnounced(t *testing.T, rc *clusterenv.RedisCluster, slow int, pport string) {
	t.Helper()
	ctx := context.Background()
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
}

// slowMasterEnv is the slow-master scenario: a worker on a cluster whose
// master slow sits behind a delaying proxy, one slow room on that master
// and four fast rooms (and connections on other worker shards) elsewhere.
type slowMasterEnv struct {
	t         *testing.T
	rc        *clusterenv.RedisCluster
	slow      int
	ps        *procStack
	w         *proc
	n         names.Names
	nc        *nats.Conn
	arrived   chan protocol.RoomEvent
	slowRoom  string
	fastRooms []string
	slowConn  string
	fastConns []string
}

func (sm *slowMasterEnv) owner(key string) int { return sm.rc.Owner(sm.t, clusterenv.SlotOf(key)) }

// pickRooms finds the slow room on the slow master; fast rooms on the
// others, whose sweep bucket (indexed by the worker after a start on
// Cluster) is on a fast master too.
func (sm *slowMasterEnv) pickRooms() {
	t, n, slow := sm.t, sm.n, sm.slow
	t.Helper()
	for k := 0; (sm.slowRoom == "" || len(sm.fastRooms) < 4) && k < 10000; k++ {
		room := fmt.Sprintf("sm%d", k)
		o := sm.owner(n.UsersKey(room))
		switch {
		case o == slow && sm.slowRoom == "":
			sm.slowRoom = room
		case o != slow && sm.owner(n.SweepKey(names.SweepBucket(room))) != slow && len(sm.fastRooms) < 4:
			sm.fastRooms = append(sm.fastRooms, room)
		}
	}
	if sm.slowRoom == "" || len(sm.fastRooms) < 4 {
		t.Fatalf("rooms: slow %q, fast %v", sm.slowRoom, sm.fastRooms)
	}
}

// pickConns picks connections on worker shards other than the slow
// connection's (dispatch: FNV-1a of conn, modulo the shards).
func (sm *slowMasterEnv) pickConns(shards int) {
	shardOf := func(conn string) int {
		h := fnv.New32a()
		h.Write([]byte(conn))
		return int(h.Sum32() % uint32(shards))
	}
	sm.slowConn = "slow:0"
	used := map[int]bool{shardOf(sm.slowConn): true}
	for k := 0; len(sm.fastConns) < len(sm.fastRooms); k++ {
		c := "fast:" + strconv.Itoa(k)
		if !used[shardOf(c)] {
			used[shardOf(c)] = true
			sm.fastConns = append(sm.fastConns, c)
		}
	}
}

// subscribeFastRooms starts the test's own subscribers (one per room: a
// sharded subscription lives on its channel's master), which reach every
// master directly, feeding sm.arrived.
func (sm *slowMasterEnv) subscribeFastRooms(ctx context.Context) {
	t := sm.t
	t.Helper()
	sm.arrived = make(chan protocol.RoomEvent, 64)
	for _, room := range sm.fastRooms {
		sub := sm.rc.Client().SSubscribe(ctx, sm.n.RoomChannel(room))
		t.Cleanup(func() { sub.Close() })
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatalf("SSUBSCRIBE %s: %v", room, err)
		}
		go func() {
			for m := range sub.Channel() {
				if ev, err := protocol.DecodeRoomEvent([]byte(m.Payload)); err == nil {
					sm.arrived <- ev
				}
			}
		}()
	}
}

func (sm *slowMasterEnv) pub(cmd protocol.Command) {
	sm.t.Helper()
	publishCommand(sm.t, sm.nc, sm.ps.s.cfg.SubjectPrefix, cmd)
}

// waitStart reports whether user's typing_start in room arrives within.
func (sm *slowMasterEnv) waitStart(room, user string, within time.Duration) bool {
	deadline := time.After(within)
	for {
		select {
		case ev := <-sm.arrived:
			if ev.Type == protocol.TypeTypingStart && ev.Room == room && ev.User == user {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// warmUp waits until the worker has loaded its scripts and slot map, and
// the fast rooms answer.
func (sm *slowMasterEnv) warmUp() {
	sm.t.Helper()
	for i, room := range sm.fastRooms {
		sm.pub(protocol.Command{Op: protocol.OpStart, Room: room, User: "warm", Conn: sm.fastConns[i], Seq: 1})
		if !sm.waitStart(room, "warm", 15*time.Second) {
			sm.t.Fatalf("no warm-up start in %s", room)
		}
	}
}

// probeSlowRoomCrossesProxy checks that the worker's calls for the slow
// room do cross the proxy: a start's event, watched on the master itself
// (not through the proxy), comes no sooner than the delay after it was
// published.
func (sm *slowMasterEnv) probeSlowRoomCrossesProxy(ctx context.Context, delay time.Duration) {
	t := sm.t
	t.Helper()
	probe := sm.rc.Node(sm.slow).SSubscribe(ctx, sm.n.RoomChannel(sm.slowRoom))
	t.Cleanup(func() { probe.Close() })
	if _, err := probe.Receive(ctx); err != nil {
		t.Fatalf("SSUBSCRIBE %s: %v", sm.slowRoom, err)
	}
	sent := time.Now()
	sm.pub(protocol.Command{Op: protocol.OpStart, Room: sm.slowRoom, User: "probe", Conn: "probe:0", Seq: 1})
	select {
	case <-probe.Channel():
		if took := time.Since(sent); took < delay {
			t.Fatalf("the slow room's start took %v, less than the proxy's delay %v: the worker does not go through the proxy", took, delay)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event of the slow room's start")
	}
}

// floodSlowShard publishes more starts of one connection in the slow room
// than its shard queue holds (1024), each batch of up to 64 waiting a
// delayed round trip, and waits until the flood has reached the worker
// (counted shed or queued) before the fast commands are timed.
func (sm *slowMasterEnv) floodSlowShard() {
	t := sm.t
	t.Helper()
	for seq := uint64(1); seq <= 3000; seq++ {
		cmd := protocol.Command{V: protocol.Version, Op: protocol.OpStart, Room: sm.slowRoom, User: "slowpoke", Conn: sm.slowConn, Seq: seq, TsMs: time.Now().UnixMilli()}
		b, _ := json.Marshal(cmd)
		if err := sm.nc.Publish(sm.n.CommandSubject(), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := sm.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); metric(t, sm.w.adminAddr, "ellipsis_worker_commands_total", `outcome="shed"`) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no start shed from the flooded shard: %v commands counted",
				metric(t, sm.w.adminAddr, "ellipsis_worker_commands_total"))
		}
	}
}

// timeFastRooms checks, three rounds over the fast rooms, that each start
// arrives within 2 × delay while the slow master is delayed.
func (sm *slowMasterEnv) timeFastRooms(delay time.Duration) {
	t := sm.t
	t.Helper()
	bound := 2 * delay
	for round := range 3 {
		for i, room := range sm.fastRooms {
			user := fmt.Sprintf("u%d", round)
			sent := time.Now()
			sm.pub(protocol.Command{Op: protocol.OpStart, Room: room, User: user, Conn: sm.fastConns[i], Seq: uint64(2 + round)})
			if !sm.waitStart(room, user, bound) {
				t.Fatalf("round %d: the start of %s in %s (master %d) took over %v while master %d is delayed by %v",
					round, user, room, sm.owner(sm.n.UsersKey(room)), bound, sm.slow, delay)
			}
			t.Logf("round %d %s: %v", round, room, time.Since(sent).Round(time.Millisecond))
		}
	}
}
