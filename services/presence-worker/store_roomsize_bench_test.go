package worker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// BenchmarkRoomSize measures the Redis time of each typing command against
// the number of live entries in the room (issue 13, item 2: a throttled
// refresh at most 10 µs, a state change at most 25 µs, at 10, 1,000 and
// 10,000 live entries), on a private redis-server, from INFO commandstats
// (usec of EVALSHA and EVAL) read around each single operation, so the
// room stays at its size: every new user is stopped again.
//
//	go test -run '^$' -bench RoomSize -benchtime 300x -timeout 20m
//
//	op=refresh      a start of a visible user inside the throttle window (throttled)
//	op=first_start  a start of a user not yet typing (started)
//	op=stop         that user's stop (stopped)
//	op=sweep        one Sweep with one expired entry in the room (all its scripts)
//
// The metric is srv-µs/op, the server's time per operation.
func BenchmarkRoomSize(b *testing.B) {
	p := startPrivateRedis(b)
	ctx := context.Background()
	for _, size := range []int{10, 1000, 10000} {
		for _, kind := range storeKinds {
			pfx := "entries=" + strconv.Itoa(size) + "/store=" + kind
			st, n := benchStore(b, kind, p.rdb)
			fillRoom(b, st, "big", size)
			evals := func() int64 {
				s := p.cmdStats(b)
				return s["evalsha"].usec + s["eval"].usec
			}
			measure := func(b *testing.B, f func(i int)) {
				var usec int64
				for i := range b.N {
					before := evals()
					f(i)
					usec += evals() - before
				}
				b.ReportMetric(float64(usec)/float64(b.N), "srv-µs/op")
			}
			b.Run(pfx+"/op=refresh", func(b *testing.B) {
				ok := mustOutcome(b, OutcomeThrottled)
				cmd := protocol.Command{V: 1, Op: "start", Room: "big", User: "user-1", Name: "Some Body", Conn: "gw:1"}
				measure(b, func(int) { ok(st.Start(ctx, cmd)) })
			})
			b.Run(pfx+"/op=first_start", func(b *testing.B) {
				ok, okStop := mustOutcome(b, OutcomeStarted), mustOutcome(b, OutcomeStopped)
				var usec int64
				for i := range b.N {
					u, c := "new-"+strconv.Itoa(i), "gw:n"+strconv.Itoa(i)
					before := evals()
					ok(st.Start(ctx, protocol.Command{V: 1, Op: "start", Room: "big", User: u, Name: "New", Conn: c}))
					usec += evals() - before
					okStop(st.Stop(ctx, protocol.Command{V: 1, Op: "stop", Room: "big", User: u, Conn: c}, protocol.ReasonStopped))
				}
				b.ReportMetric(float64(usec)/float64(b.N), "srv-µs/op")
			})
			b.Run(pfx+"/op=stop", func(b *testing.B) {
				ok := mustOutcome(b, OutcomeStopped)
				var usec int64
				for i := range b.N {
					u := "stop-" + strconv.Itoa(i)
					_, _ = st.Start(ctx, protocol.Command{V: 1, Op: "start", Room: "big", User: u, Conn: "gw:s" + strconv.Itoa(i)})
					before := evals()
					ok(st.Stop(ctx, protocol.Command{V: 1, Op: "stop", Room: "big", User: u, Conn: "gw:s" + strconv.Itoa(i)}, protocol.ReasonStopped))
					usec += evals() - before
				}
				b.ReportMetric(float64(usec)/float64(b.N), "srv-µs/op")
			})
			b.Run(pfx+"/op=sweep", func(b *testing.B) {
				m, _ := newMetrics(prometheus.NewRegistry(), false)
				short, err := newStore(kind, testPubSub, p.rdb, n, 20*time.Millisecond, 10*time.Millisecond, m, zap.NewNop(), newRateLog(zap.NewNop(), time.Minute))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = st.Sweep(ctx) // settle the index
				var usec int64
				for i := range b.N {
					_, _ = short.Start(ctx, protocol.Command{V: 1, Op: "start", Room: "big", User: "exp-" + strconv.Itoa(i), Conn: "gw:e"})
					time.Sleep(30 * time.Millisecond)
					before := evals()
					res, err := st.Sweep(ctx)
					usec += evals() - before
					if err != nil || res.Stops != 1 {
						b.Fatalf("sweep: %+v, %v; want 1 stop", res, err)
					}
				}
				b.ReportMetric(float64(usec)/float64(b.N), "srv-µs/op")
			})
			p.dropPrefix(b, n.KeyPrefix())
		}
	}
}

// fillRoom adds size typists (one connection each) to room, 256 starts per
// pipeline.
func fillRoom(b *testing.B, st Store, room string, size int) {
	b.Helper()
	var cmds []protocol.Command
	flush := func() {
		_, errs := st.Apply(context.Background(), cmds)
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		cmds = cmds[:0]
	}
	for i := range size {
		cmds = append(cmds, protocol.Command{V: 1, Op: "start", Room: room, User: "user-" + strconv.Itoa(i), Name: "Some Body", Conn: "gw:" + strconv.Itoa(i), Seq: 1})
		if len(cmds) == 256 {
			flush()
		}
	}
	if len(cmds) > 0 {
		flush()
	}
}
