package store

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// recordSink is an [EventSink] that keeps what it gets, as "room event".
// It never blocks (a mutex held for an append).
type recordSink struct {
	mu  sync.Mutex
	evs []string
}

func (r *recordSink) RoomEvent(room string, ev []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, room+" "+string(ev))
}

// got returns what the sink got, as "room event", in order.
func (r *recordSink) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs)
}

// withEvents builds a second store on se's Redis, names and kind, reporting
// its events to sink through Options.Events (the way the worker builds it).
func withEvents(se *storeEnv, sink EventSink) *redisStore {
	se.t.Helper()
	st, err := New(Options{Kind: se.kind, PubSub: se.pubsub, Redis: se.rdb, Names: se.names, TTL: stTTL, Throttle: stThrottle, Events: sink})
	if err != nil {
		se.t.Fatal(err)
	}
	return st.(*redisStore)
}

// TestSweepReplyCarriesEventsOnlyWhenAsked: the sweep script's reply has
// the event list (sixth element) only with ARGV[8] "1", which a store
// built with Options.Events sends and one without does not, and the list
// holds exactly the payloads published.
func TestSweepReplyCarriesEventsOnlyWhenAsked(t *testing.T) {
	se := newStoreEnv(t, storetest.Backends[0])
	sub := se.subscribe("r")
	for _, on := range []bool{false, true} {
		rec := &recordSink{}
		st := se.st.(*redisStore) // built without Events
		if on {
			st = withEvents(se, rec)
		}
		if _, err := st.Start(context.Background(), start("r", "u", "", "c", 0)); err != nil {
			t.Fatal(err)
		}
		pub := sub.Expect(protocol.TypeTypingStart, "r", "u", "", waitLong)
		// Expire the entry by hand: its score and the connection's entry
		// in the past (the sweeper only moves a score whose entries live).
		if err := se.rdb.ZAdd(context.Background(), se.names.UsersKey("r"), redis.Z{Score: 1, Member: names.Enc("u")}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := se.rdb.HSet(context.Background(), se.names.UserKey("r", "u"), "c:c", "1").Err(); err != nil {
			t.Fatal(err)
		}
		call, err := st.sweepCall("r")
		if err != nil {
			t.Fatal(err)
		}
		res, errs := st.eval(context.Background(), scriptSweep, []scriptCall{call})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		reply := res[0].([]any)
		stopEv := sub.Expect(protocol.TypeTypingStop, "r", "u", protocol.ReasonExpired, waitLong)
		if !on {
			if len(reply) != 5 {
				t.Fatalf("events off: sweep reply %v, want 5 elements", reply)
			}
			continue
		}
		if len(reply) != 6 {
			t.Fatalf("events on: sweep reply %v, want 6 elements", reply)
		}
		st.emitSweep("r", reply)
		want := []string{"r " + pub.Raw, "r " + stopEv.Raw}
		if got := rec.got(); !slices.Equal(got, want) {
			t.Fatalf("sink got %q, want the start and the expired stop %q", got, want)
		}
	}
}

// TestEventSinkGetsWhatRedisGot: a store built with Options.Events reports
// every event it publishes on Redis, same bytes, same room, in the same
// order per room: starts and stops alone and batched (Apply), the stops of
// a disconnect (one script per room), and the sweep's expired stops. Events
// refused (throttled, no-op) are reported by neither. Both stores, every
// backend.
func TestEventSinkGetsWhatRedisGot(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		for _, kind := range []string{config.StoreZSet, config.StoreKeys} {
			t.Run(kind, func(t *testing.T) {
				se := newStoreEnvKind(t, be, kind)
				rec := &recordSink{}
				st := withEvents(se, rec)
				s := se.subscribe("r1", "r2")
				ctx := context.Background()

				if out, err := st.Start(ctx, start("r1", "alice", "Alice", "a1", 1)); err != nil || out != OutcomeStarted {
					t.Fatalf("start: %q, %v", out, err)
				}
				if out, err := st.Start(ctx, start("r1", "alice", "Alice", "a1", 2)); err != nil || out != OutcomeThrottled {
					t.Fatalf("second start: %q, %v (want throttled: no event)", out, err)
				}
				if out, err := st.Stop(ctx, stop("r1", "alice", "a1", 3), protocol.ReasonStopped); err != nil || out != OutcomeStopped {
					t.Fatalf("stop: %q, %v", out, err)
				}
				if out, err := st.Stop(ctx, stop("r1", "nobody", "n1", 1), protocol.ReasonStopped); err != nil || out != OutcomeNoop {
					t.Fatalf("stop of nobody: %q, %v (want noop: no event)", out, err)
				}
				outs, errs := st.Apply(ctx, []protocol.Command{
					start("r1", "dave", "", "d1", 1), start("r2", "dave", "", "d1", 2),
					{V: 1, Op: protocol.OpDisconnect, Rooms: []string{"r1", "r2"}, User: "dave", Conn: "d1", Seq: 3},
					start("r2", "bob", "", "b1", 1),
				})
				for i, err := range errs {
					if err != nil {
						t.Fatalf("apply %d: %q, %v", i, outs[i], err)
					}
				}
				se.advance(stTTL + stMargin)
				if r, err := st.Sweep(ctx); err != nil || r.Stops != 1 {
					t.Fatalf("sweep: %+v, %v (want bob's expired stop)", r, err)
				}

				// alice 2, dave 2 + 2 disconnected, bob start + expired.
				var fromRedis []string
				for range 8 {
					r, ok := s.Next(waitLong)
					if !ok {
						t.Fatalf("Redis events %q, want 8", fromRedis)
					}
					fromRedis = append(fromRedis, r.Ev.Room+" "+r.Raw)
				}
				s.ExpectNone(100 * time.Millisecond)
				got := rec.got()
				perRoom := func(x []string) map[string][]string {
					m := map[string][]string{}
					for _, v := range x {
						room, _, _ := strings.Cut(v, " ")
						m[room] = append(m[room], v)
					}
					return m
				}
				pr, ps := perRoom(fromRedis), perRoom(got)
				if len(got) != len(fromRedis) || !slices.Equal(pr["r1"], ps["r1"]) || !slices.Equal(pr["r2"], ps["r2"]) {
					t.Fatalf("sink events differ from Redis's (per room, in order):\nredis %q\nsink  %q", fromRedis, got)
				}
				var disconnected, expired int
				for _, v := range fromRedis {
					if strings.Contains(v, `"reason":"`+protocol.ReasonDisconnected+`"`) {
						disconnected++
					}
					if strings.Contains(v, `"reason":"`+protocol.ReasonExpired+`"`) {
						expired++
					}
				}
				if disconnected != 2 || expired != 1 {
					t.Fatalf("disconnected stops %d (want 2), expired stops %d (want 1): %q", disconnected, expired, fromRedis)
				}
			})
		}
	})
}

// discardSink is an [EventSink] that drops what it gets and counts it.
type discardSink struct{ n int }

func (d *discardSink) RoomEvent(string, []byte) { d.n++ }

// BenchmarkEmitCommands is the store's side of ELLIPSIS_NATS_EVENTS per
// start reply that published an event: "on", rebuilding the event from the
// reply and handing it to a sink that discards it; "off" (no
// Options.Events), one nil check. No servers. The worker's side (queueing
// for NATS) is BenchmarkNATSEventsRoomEvent in the worker's package.
//
//	cd services/presence-worker
//	go test -run '^$' -bench EmitCommands -benchmem ./internal/store
func BenchmarkEmitCommands(b *testing.B) {
	st := &redisStore{}
	a := st.startArgs(protocol.Command{Room: "42", User: "alice", Name: "Alice", Conn: "gw:1", Seq: 1})
	args := make([]any, argEvent+1)
	args[argEvent] = a.Event
	calls := []scriptCall{{args: args}}
	rooms := []string{"42"}
	res := []any{[]any{OutcomeStarted.String(), int64(1764480000000), int64(0)}}
	errs := []error{nil}
	b.Run("off", func(b *testing.B) {
		st.events = nil
		for b.Loop() {
			st.emitCommands(calls, rooms, res, errs)
		}
	})
	b.Run("on", func(b *testing.B) {
		sink := &discardSink{}
		st.events = sink
		for b.Loop() {
			st.emitCommands(calls, rooms, res, errs)
		}
		b.StopTimer()
		st.events = nil
		if sink.n == 0 {
			b.Fatal("the sink got no event")
		}
	})
}
