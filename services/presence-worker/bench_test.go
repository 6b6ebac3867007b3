package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
)

// BenchmarkStartCommand measures the start command path against the real
// Redis, as a shard runs it: decode the NATS payload, run start.lua (one
// EVALSHA round trip), count the outcome. No NATS.
//
//	go test -run '^$' -bench StartCommand -benchmem
//
//	refresh      the same connection over and over: ZSCORE fast path, throttled
//	new_typist   a new user in a new room each time: full path, PUBLISH
//	busy_room    a new user joining a room of 50 typists: user scan of the set
//	parallel     refreshes of 1000 connections from GOMAXPROCS goroutines
func BenchmarkStartCommand(b *testing.B) {
	requireServices(b)
	opts, err := redis.ParseURL(testRedisURL)
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	m, err := newMetrics(prometheus.NewRegistry(), false)
	if err != nil {
		b.Fatal(err)
	}
	n := names.New("t-bench-"+randHex(4)+":", "")
	defer cleanupKeys(rdb, n.KeyPrefix())
	st, err := newStore(config.StoreZSet, testPubSub, rdb, n, config.Default().TypingTTL, config.Default().TypingThrottle, m, zap.NewNop(), ratelog.New(zap.NewNop(), time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Prepare(ctx); err != nil {
		b.Fatal(err)
	}
	s := &Server{st: st, m: m, rl: ratelog.New(zap.NewNop(), time.Minute), log: zap.NewNop()}
	apply := func(b *testing.B, payload []byte) {
		cmd, err := protocol.DecodeCommand(payload)
		if err != nil {
			b.Fatal(err)
		}
		s.apply(ctx, cmd)
	}
	payload := func(room, user, conn string) []byte {
		p, _ := json.Marshal(protocol.Command{V: 1, Op: "start", Room: room, User: user, Name: "Some Body", Conn: conn})
		return p
	}
	errors := func() float64 { return gatherSumB(m, "error") }

	b.Run("refresh", func(b *testing.B) {
		p := payload("bench-room", "alice", "gw-a1b2:17")
		b.ReportAllocs()
		for b.Loop() {
			apply(b, p)
		}
	})
	b.Run("new_typist", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			apply(b, payload(fmt.Sprintf("nt-room-%d", i), fmt.Sprintf("user-%d", i), "gw:1"))
		}
	})
	b.Run("busy_room", func(b *testing.B) {
		for j := range 50 {
			apply(b, payload("busy", fmt.Sprintf("typist-%d", j), "gw:1"))
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			apply(b, payload("busy", fmt.Sprintf("joiner-%d", i), "gw:2"))
			b.StopTimer()
			s.apply(ctx, protocol.Command{V: 1, Op: "stop", Room: "busy", User: fmt.Sprintf("joiner-%d", i)})
			b.StartTimer()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		ps := make([][]byte, 1000)
		for i := range ps {
			ps[i] = payload(fmt.Sprintf("par-room-%d", i%50), fmt.Sprintf("u%d", i), fmt.Sprintf("gw:%d", i))
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				cmd, _ := protocol.DecodeCommand(ps[i%len(ps)])
				s.apply(ctx, cmd)
				i++
			}
		})
	})
	if e := errors(); e != 0 {
		b.Fatalf("%v commands failed", e)
	}
}

func gatherSumB(m *metrics, outcome string) float64 {
	reg := prometheus.NewRegistry()
	_ = reg.Register(m.commands)
	mfs, _ := reg.Gather()
	var sum float64
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			for _, l := range mm.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					sum += mm.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
