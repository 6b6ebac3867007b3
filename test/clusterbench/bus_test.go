package clusterbench

import (
	"testing"
	"time"
)

// benchShape is the measured load; ELLIPSIS_BENCH_ROOMS, ELLIPSIS_BENCH_RATE
// and ELLIPSIS_BENCH_SECONDS override it.
func benchShape(tb testing.TB) shape {
	return shape{
		Masters:  3,
		Gateways: 3,
		// One worker: a room's commands are then applied in the order sent
		// (a worker keeps a connection's commands in order; across workers
		// seq would drop the odd reordered one), so every command publishes
		// exactly one event and both modes carry the same load.
		Workers:  1,
		Rooms:    envInt(tb, "ELLIPSIS_BENCH_ROOMS", 300),
		Rate:     envInt(tb, "ELLIPSIS_BENCH_RATE", 2000),
		Duration: time.Duration(envInt(tb, "ELLIPSIS_BENCH_SECONDS", 10)) * time.Second,
	}
}

// BenchmarkClusterBusTraffic runs one fixed typing load against a fresh
// 3-master Redis Cluster per mode, classic PUBLISH and sharded SPUBLISH, and
// reports per load window (op): cluster bus messages and bytes, and the
// masters' CPU (docs/BENCHMARKS.md, "Redis Cluster: classic PUBLISH vs
// sharded Pub/Sub"):
//
//	cd test && go test -run '^$' -bench ClusterBusTraffic -benchtime 1x -count 1 ./clusterbench/
//
// Each -benchtime iteration is one whole load window on the same stack
// (use 1x: a window is Rate*Duration commands, 10 s by default).
func BenchmarkClusterBusTraffic(b *testing.B) {
	sh := benchShape(b)
	for _, mode := range []string{modeClassic, modeSharded} {
		b.Run(mode, func(b *testing.B) {
			s := newStack(b, mode, sh)
			rooms, owners := s.rooms(sh.Rooms)
			w := s.watch(rooms)
			d := s.driver()
			time.Sleep(500 * time.Millisecond) // subscriptions and gossip settle
			b.ResetTimer()
			r := s.measure(rooms, owners, w, d, b.N, 3*time.Second, 10*time.Second)
			b.StopTimer()
			b.Log(r.table()) // 9 lines: the testing package cuts a benchmark's log at 10
			if r.events != r.commands {
				b.Errorf("watchers received %d typing events for %d commands (each command publishes one): the machine did not keep up, lower ELLIPSIS_BENCH_RATE", r.events, r.commands)
			}
			report(b, r)
		})
	}
}

// report turns a result into benchmark metrics, per load window where the
// unit ends in /op.
func report(b *testing.B, r *result) {
	n := float64(r.windows)
	ev := float64(r.events)
	if ev == 0 {
		ev = 1
	}
	masters := float64(len(r.nodes))
	b.ReportMetric(float64(r.events)/n, "events/op")
	b.ReportMetric(float64(r.total("sent"))/ev, "bus-msgs/event")
	b.ReportMetric(float64(r.total("publish_sent")+r.total("publishshard_sent"))/ev, "pub-msgs/event")
	b.ReportMetric(float64(r.total("sent"))/r.elapsed.Seconds(), "bus-msgs/s")
	if bus := r.totalBus(); bus >= 0 {
		b.ReportMetric(float64(bus)/ev, "bus-B/event")
	}
	b.ReportMetric(float64(r.totalCPU().Milliseconds())/masters/n, "cpu-ms/node/op")
	b.ReportMetric(float64(r.totalCPU().Microseconds())/ev, "redis-cpu-µs/event")
	if r.machBusy >= 0 {
		b.ReportMetric(100*r.machBusy, "machine-busy-%")
	}
}

// TestClusterBusTraffic is the benchmark's quick sanity check (what
// `go test ./...` and `make test` run): a tiny load in each mode on its
// own fresh cluster. Sharded Pub/Sub must send no classic publish message
// over the cluster bus; classic must broadcast every event from the
// room's master to each other master; the watchers must get every event
// in both.
func TestClusterBusTraffic(t *testing.T) {
	t.Parallel()
	sh := shape{Masters: 3, Gateways: 3, Workers: 1, Rooms: 30, Rate: 300, Duration: time.Second}
	for _, mode := range []string{modeClassic, modeSharded} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := run(t, mode, sh, 1)
			t.Log(r.table())
			if r.events != r.commands {
				t.Errorf("watchers received %d typing events, want %d (one per command)", r.events, r.commands)
			}
			pubSent, pubRecv := r.total("publish_sent"), r.total("publish_received")
			switch mode {
			case modeSharded:
				if pubSent != 0 || pubRecv != 0 {
					t.Errorf("sharded Pub/Sub: %d classic publish messages sent, %d received over the cluster bus; want 0", pubSent, pubRecv)
				}
				if n := r.total("publishshard_sent"); n != 0 {
					t.Errorf("sharded Pub/Sub: %d publishshard messages sent; want 0 (masters without replicas have nobody to send them to)", n)
				}
			case modeClassic:
				// Every PUBLISH goes from the room's master to each other master.
				if want := int64(sh.Masters-1) * r.events; pubSent < want || pubRecv < want {
					t.Errorf("classic Pub/Sub: %d publish messages sent, %d received over the cluster bus; want at least %d each ((masters-1) x %d events)",
						pubSent, pubRecv, want, r.events)
				}
				for i, d := range r.nodes {
					if d.msg("publish_sent") == 0 || d.msg("publish_received") == 0 {
						t.Errorf("classic Pub/Sub: master %d sent %d and received %d publish messages; want both > 0 (rooms on every master)",
							i, d.msg("publish_sent"), d.msg("publish_received"))
					}
				}
			}
		})
	}
}
