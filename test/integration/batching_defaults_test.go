package integration

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// TestProcessesShippedBatching runs two gateways and two workers with the
// batching settings as shipped (ELLIPSIS_BATCH_WINDOW and
// ELLIPSIS_WORKER_SHARDS at config.Default's values; the rest of the suite
// pins send-at-once and 16 shards): every member of three rooms spread
// over both gateways sees each other member start and stop exactly once a
// round, the gateways did send batches of several commands, a burst of
// one connection's commands inside one window ends in its last command's
// state, and a single command that a platform service publishes on the
// command subject alongside the batches is applied too.
func TestProcessesShippedBatching(t *testing.T) {
	t.Parallel()
	def := config.Default()
	if def.BatchWindow <= 0 {
		t.Fatalf("config.Default's BatchWindow is %v: this test is about a batching default", def.BatchWindow)
	}
	ps := newProcStack(t, map[string]string{
		"ELLIPSIS_BATCH_WINDOW":  def.BatchWindow.String(),
		"ELLIPSIS_WORKER_SHARDS": strconv.Itoa(def.WorkerShards),
	})
	ps.startWorker(nil)
	ps.startWorker(nil)
	g0, g1 := ps.startGateway(nil), ps.startGateway(nil)
	gws := []*proc{g0, g1}

	rooms := []string{"b0", "b1", "b2"}
	var members [][]*client
	for r, room := range rooms {
		var cs []*client
		for i := range 4 {
			u := fmt.Sprintf("u%d%d", r, i)
			c := dial(t, gws[i%2].wsURL(u, ""), u)
			c.join(room)
			cs = append(cs, c)
		}
		members = append(members, cs)
	}
	for round := range 3 {
		// Every member of every room at once: the commands of one
		// window share a batch.
		for r, cs := range members {
			for _, c := range cs {
				c.start(rooms[r])
			}
		}
		time.Sleep(200 * time.Millisecond)
		for r, cs := range members {
			for _, c := range cs {
				c.stop(rooms[r])
			}
		}
		for _, cs := range members {
			for i, c := range cs {
				got := map[string]int{}
				for _, f := range c.drain(700 * time.Millisecond) {
					if f.Type == "typing_start" || f.Type == "typing_stop" {
						got[f.Type+" "+f.User]++
					}
				}
				for j, o := range cs {
					want := 1
					if j == i {
						want = 0
					}
					if got["typing_start "+o.name] != want || got["typing_stop "+o.name] != want {
						t.Fatalf("round %d: %s saw %v for %s, want %d start and %d stop", round, c.name, got, o.name, want, want)
					}
				}
			}
		}
	}
	batches := metric(t, g0.adminAddr, "ellipsis_gateway_command_batches_total") + metric(t, g1.adminAddr, "ellipsis_gateway_command_batches_total")
	inBatches := metric(t, g0.adminAddr, "ellipsis_gateway_command_batch_commands_sum") + metric(t, g1.adminAddr, "ellipsis_gateway_command_batch_commands_sum")
	if batches == 0 || inBatches <= batches {
		t.Fatalf("the gateways sent %v batches holding %v commands: want batches of more than one command", batches, inBatches)
	}
	t.Logf("%v batches, %.1f commands each", batches, inBatches/batches)

	// One connection's burst inside one window: start, stop, start goes
	// out in one batch and must end shown, and stay shown (a batch
	// applied out of order would end in the stop); the stop sent after it
	// ends it.
	room := rooms[0]
	bob := watch(dial(t, g1.wsURL("bob", ""), "bob"))
	bob.join(room)
	alice := dial(t, g0.wsURL("alice", ""), "alice")
	alice.join(room)
	alice.start(room)
	alice.stop(room)
	alice.start(room)
	bob.waitShown(room, "alice", 3*time.Second)
	time.Sleep(300 * time.Millisecond) // well past the window and a delivery
	if got := bob.shown(room); got != "alice" {
		t.Fatalf("after the burst start, stop, start bob shows %q, want alice", got)
	}
	alice.stop(room)
	bob.waitShown(room, "", 3*time.Second)

	// A platform service's single command, published while the gateways
	// batch, is applied by the same workers.
	nc, err := nats.Connect(testkit.NATSURL(), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	publishCommand(t, nc, ps.s.cfg.SubjectPrefix, protocol.Command{Op: protocol.OpStart, Room: room, User: "svc", Conn: "svc:1", Seq: 1})
	bob.waitShown(room, "svc", 3*time.Second)
}
