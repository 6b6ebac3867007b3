package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// natsMsgs collects the messages of one NATS subscription.
type natsMsgs struct {
	t   *testing.T
	sub *nats.Subscription
}

// subscribeNATS subscribes subject on the test's own connection and
// returns once the server has the subscription.
func (e *env) subscribeNATS(subject string) *natsMsgs {
	e.t.Helper()
	sub, err := e.nc.SubscribeSync(subject)
	if err != nil {
		e.t.Fatalf("subscribe %s: %v", subject, err)
	}
	if err := e.nc.FlushTimeout(waitLong); err != nil {
		e.t.Fatalf("flush: %v", err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &natsMsgs{t: e.t, sub: sub}
}

// drain returns every message arriving within d of the previous one.
func (m *natsMsgs) drain(d time.Duration) []*nats.Msg {
	var out []*nats.Msg
	for {
		msg, err := m.sub.NextMsg(d)
		if errors.Is(err, nats.ErrTimeout) {
			return out
		}
		if err != nil {
			m.t.Fatalf("next NATS message: %v", err)
		}
		out = append(out, msg)
	}
}

// eventsOn turns ELLIPSIS_NATS_EVENTS on.
func eventsOn(c *config.Config) { c.NATSEvents = true }

// collectUntil reads the Redis stream until n events arrived (or waitLong
// after the last one: then fails).
func collectUntil(t *testing.T, s *storetest.Stream, n int, d time.Duration) []storetest.Received {
	t.Helper()
	var out []storetest.Received
	for len(out) < n {
		r, ok := s.Next(d)
		if !ok {
			var raws []string
			for _, r := range out {
				raws = append(raws, r.Raw)
			}
			t.Fatalf("got %d Redis events, want %d: %v", len(out), n, raws)
		}
		out = append(out, r)
	}
	return out
}

// TestNATSRoomEventsAreTheRedisBytes: with ELLIPSIS_NATS_EVENTS on, a
// subscriber on <prefix>.typing.v1.room.> gets exactly the bytes the Redis
// channel got, on the room's subject, for starts and stops of the command
// path, expired stops of the sweeper, and the trailing edge the sweeper
// publishes for a coalesced start; and nothing more. Per (room, user) the
// order is the Redis order (one worker: one shard per connection, the
// sweeper's events come hundreds of ms later). Both stores, every backend.
func TestNATSRoomEventsAreTheRedisBytes(t *testing.T) {
	storetest.ForEachKindAndBackend(t, func(t *testing.T, be storetest.Backend, kind string) {
		e := newEnv(t, be, eventsOn, func(c *config.Config) {
			c.Store = kind
			// carol's fifth command is coalesced only if the worker applies
			// it within one interval of the event rate limit (throttle / 2)
			// of her first, on Redis's running clock. With testThrottle
			// that is 150 ms, which a loaded 2-vCPU machine under -race
			// exceeded; a 2 s throttle gives 1 s (ttl and refresh raised
			// to keep throttle < refresh < ttl; the expiries come 2 s
			// later, still well within collectUntil's wait).
			c.TypingTTL, c.TypingRefresh, c.TypingThrottle = 3*time.Second, 2500*time.Millisecond, 2*time.Second
		})
		e.startWorker()
		s := e.subscribe("r1", "r2")
		all := e.subscribeNATS(e.names.RoomEventsWildcard())

		sendNATSEventTraffic(e)
		// alice 2, bob 2, dave 4, carol 4 + trailing start + expired stop.
		redisEvs := collectUntil(t, s, 14, expiryBound+waitLong)
		s.ExpectNone(3 * testSweep)
		natsEvs := all.drain(3 * testSweep)

		fromRedis, fromNATS := roomEvsOf(t, e.names, redisEvs, natsEvs)
		if !slices.Equal(sortRoomEvs(fromRedis), sortRoomEvs(fromNATS)) {
			t.Fatalf("NATS events differ from Redis's:\nredis %v\nnats  %v", fromRedis, fromNATS)
		}
		// Per (room, user), the same order.
		pr, pn := roomEvsPerKey(fromRedis), roomEvsPerKey(fromNATS)
		for k := range pr {
			if !slices.Equal(pr[k], pn[k]) {
				t.Fatalf("%s: NATS order %v, Redis order %v", k, pn[k], pr[k])
			}
		}
		checkNATSEventTrafficCovered(t, redisEvs, pr)
		if n := e.metric("ellipsis_worker_nats_events_total", map[string]string{"result": natsEventPublished}); n != 14 {
			t.Fatalf("nats_events_total{published} = %v, want 14", n)
		}
		if n := e.metric("ellipsis_worker_nats_events_total", nil); n != 14 {
			t.Fatalf("nats_events_total = %v, want 14 (none dropped or failed)", n)
		}
	})
}

// sendNATSEventTraffic sends the commands of
// TestNATSRoomEventsAreTheRedisBytes: starts and stops of the command
// path, expiries for the sweeper, a disconnect from two rooms, and a
// coalesced start for a trailing edge.
func sendNATSEventTraffic(e *env) {
	e.t.Helper()
	// alice: start, stop (the command path).
	e.send(start("r1", "alice", "Alice", "a1", 1))
	e.send(stop("r1", "alice", "a1", 2))
	// bob: start, then expiry (the sweeper).
	e.send(start("r2", "bob", "", "b1", 1))
	// dave: two rooms, then a disconnect (one stop script per room).
	e.send(start("r1", "dave", "", "d1", 1), start("r2", "dave", "", "d1", 2),
		protocol.Command{V: 1, Op: protocol.OpDisconnect, Rooms: []string{"r1", "r2"}, User: "dave", Conn: "d1", Seq: 3})
	// carol: five transitions at once; the event rate limit (4 at
	// once) coalesces the fifth, a start, which the sweeper publishes
	// when allowed (the trailing edge); then it expires.
	e.send(start("r1", "carol", "Carol", "c1", 1), stop("r1", "carol", "c1", 2), start("r1", "carol", "Carol", "c1", 3),
		stop("r1", "carol", "c1", 4), start("r1", "carol", "Carol", "c1", 5))
	if n := e.metric("ellipsis_worker_commands_total", map[string]string{"outcome": store.OutcomeCoalesced.String()}); n != 1 {
		e.t.Fatalf("commands_total{coalesced} = %v, want 1 (the test needs a trailing edge)", n)
	}
}

// roomEv is one room event as TestNATSRoomEventsAreTheRedisBytes compares
// them: its NATS subject, room/user, and bytes.
type roomEv struct{ subject, key, raw string }

// roomEvsOf is the events of the Redis channel and of NATS as roomEvs.
func roomEvsOf(t *testing.T, n names.Names, redisEvs []storetest.Received, natsEvs []*nats.Msg) (fromRedis, fromNATS []roomEv) {
	t.Helper()
	for _, r := range redisEvs {
		fromRedis = append(fromRedis, roomEv{n.RoomEventSubject(r.Ev.Room), r.Ev.Room + "/" + r.Ev.User, r.Raw})
	}
	for _, m := range natsEvs {
		re, err := protocol.DecodeRoomEvent(m.Data)
		if err != nil {
			t.Fatalf("NATS event %q: %v", m.Data, err)
		}
		fromNATS = append(fromNATS, roomEv{m.Subject, re.Room + "/" + re.User, string(m.Data)})
	}
	return fromRedis, fromNATS
}

// sortRoomEvs is a copy of x sorted by bytes.
func sortRoomEvs(x []roomEv) []roomEv {
	y := slices.Clone(x)
	slices.SortFunc(y, func(a, b roomEv) int {
		if a.raw < b.raw {
			return -1
		} else if a.raw > b.raw {
			return 1
		}
		return 0
	})
	return y
}

// roomEvsPerKey is the bytes of x by room/user, in order.
func roomEvsPerKey(x []roomEv) map[string][]string {
	m := map[string][]string{}
	for _, v := range x {
		m[v.key] = append(m[v.key], v.raw)
	}
	return m
}

// checkNATSEventTrafficCovered checks that the Redis events of
// sendNATSEventTraffic hold two expired stops, carol's trailing start,
// her six events and two disconnected stops; pr is them per room/user.
func checkNATSEventTrafficCovered(t *testing.T, redisEvs []storetest.Received, pr map[string][]string) {
	t.Helper()
	// What the test meant to cover did happen.
	var expired, trailing int
	for i, r := range redisEvs {
		if r.Ev.Reason == protocol.ReasonExpired {
			expired++
		}
		if r.Ev.User == "carol" && r.Ev.Type == protocol.TypeTypingStart && i > 0 && pr["r1/carol"][4] == r.Raw {
			trailing++
		}
	}
	var disconnected int
	for _, r := range redisEvs {
		if r.Ev.Reason == protocol.ReasonDisconnected {
			disconnected++
		}
	}
	if expired != 2 || trailing != 1 || len(pr["r1/carol"]) != 6 || disconnected != 2 {
		t.Fatalf("expired stops %d (want 2), trailing starts %d (want 1), carol's events %d (want 6), disconnected stops %d (want 2): %v",
			expired, trailing, len(pr["r1/carol"]), disconnected, pr["r1/carol"])
	}
}

// TestNATSRoomEventSubjectTokens: room ids with '.', '*', '>', space, '%'
// and non-ASCII bytes are one subject token each, escaped as the contract
// says, and one room can be followed alone: a subscriber on one room's
// subject gets that room's events only, and no dot in a room id makes a
// subject hierarchy.
func TestNATSRoomEventSubjectTokens(t *testing.T) {
	// Nothing expires meanwhile: the drains below take about a second on a
	// loaded machine, and an expiry's typing_stop would be a tenth event.
	e := newEnv(t, storetest.Backends[0], eventsOn, func(c *config.Config) { c.TypingTTL = 20 * time.Second })
	e.startWorker()
	p := e.cfg.SubjectPrefix + ".typing.v1.room."
	rooms := map[string]string{
		"a.b":      "a%2Eb",
		"a":        "a",
		"*":        "%2A",
		">":        "%3E",
		"x y":      "x%20y",
		"100%":     "100%25",
		"café ☕":   "caf%C3%A9%20%E2%98%95",
		"a.b.>":    "a%2Eb%2E%3E",
		"team-7_q": "team-7_q",
	}
	all := e.subscribeNATS(p + ">")
	one := e.subscribeNATS(p + "a%2Eb")
	hier := e.subscribeNATS(p + "a.>")
	star := e.subscribeNATS(p + "*")
	var seq uint64
	for room := range rooms {
		seq++
		e.send(start(room, "u", "", fmt.Sprintf("c%d", seq), 1))
	}
	got := map[string]string{}
	for _, m := range all.drain(500 * time.Millisecond) {
		re, err := protocol.DecodeRoomEvent(m.Data)
		if err != nil {
			t.Fatalf("NATS event %q: %v", m.Data, err)
		}
		got[re.Room] = m.Subject
	}
	if len(got) != len(rooms) {
		t.Fatalf("events for %d rooms on NATS, want %d: %v", len(got), len(rooms), got)
	}
	for room, tok := range rooms {
		if got[room] != p+tok {
			t.Errorf("room %q on %q, want %q", room, got[room], p+tok)
		}
	}
	ones := one.drain(100 * time.Millisecond)
	if len(ones) != 1 {
		t.Fatalf("the subscriber of room a.b got %d events, want 1", len(ones))
	}
	if re, _ := protocol.DecodeRoomEvent(ones[0].Data); re.Room != "a.b" {
		t.Fatalf("the subscriber of room a.b got %s", ones[0].Data)
	}
	if ms := hier.drain(100 * time.Millisecond); len(ms) != 0 {
		t.Fatalf("%s.a.> got %d events (a room id's dot must not make a subject level)", p, len(ms))
	}
	// '*' matches one token: every room's subject, each exactly once.
	if ms := star.drain(100 * time.Millisecond); len(ms) != len(rooms) {
		t.Fatalf("%s* got %d events, want %d", p, len(ms), len(rooms))
	}
}

// TestNATSRoomEventsOffByDefault: without ELLIPSIS_NATS_EVENTS (the
// default), room events go to Redis only, none to NATS, and the sweep
// script returns no event list (it keeps nothing).
func TestNATSRoomEventsOffByDefault(t *testing.T) {
	if config.Default().NATSEvents || config.Dev().NATSEvents {
		t.Fatal("ELLIPSIS_NATS_EVENTS must default to false")
	}
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		w := e.startWorker()
		if w.events != nil {
			t.Fatal("events publisher built with ELLIPSIS_NATS_EVENTS off")
		}
		all := e.subscribeNATS(e.names.RoomEventsWildcard())
		s := e.subscribe("r")
		e.send(start("r", "alice", "", "a1", 1), start("r", "bob", "", "b1", 1))
		e.send(stop("r", "alice", "a1", 2))
		collectUntil(t, s, 4, expiryBound+waitLong) // two starts, a stop, bob's expiry
		if ms := all.drain(3 * testSweep); len(ms) != 0 {
			t.Fatalf("%d events on NATS with ELLIPSIS_NATS_EVENTS off, first %s", len(ms), ms[0].Data)
		}
		if n := e.metric("ellipsis_worker_nats_events_total", nil); n != 0 {
			t.Fatalf("nats_events_total = %v", n)
		}
	})
}

// fakePublisher records publishes; a non-nil release makes Publish wait
// until it is closed.
type fakePublisher struct {
	mu      sync.Mutex
	got     []string
	release chan struct{}
}

func (p *fakePublisher) Publish(subject string, data []byte) error {
	if p.release != nil {
		<-p.release
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, subject+" "+string(data))
	return nil
}

func (p *fakePublisher) published() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

func newTestEvents(t *testing.T) (*natsEvents, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, false)
	if err != nil {
		t.Fatal(err)
	}
	return newNATSEvents(names.New("", "p"), m, ratelog.New(zap.NewNop(), time.Minute)), reg
}

// TestNATSEventsQueue: events are published in the order handed over; a
// full queue drops (never blocks) and counts; a publish error counts as
// failed; stop publishes what is queued, and is safe twice and without
// start.
func TestNATSEventsQueue(t *testing.T) {
	e, reg := newTestEvents(t)
	pub := &fakePublisher{release: make(chan struct{})}
	e.start(pub)
	// The goroutine takes one event and blocks in Publish; the queue then
	// holds natsEventQueue more, and every later one is dropped at once.
	total := natsEventQueue + 1 + 100
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range total {
			e.RoomEvent(fmt.Sprintf("r.%d", i), []byte(fmt.Sprint(i)))
		}
	}()
	select {
	case <-done:
	case <-time.After(waitLong):
		t.Fatal("RoomEvent blocked on a full queue")
	}
	dropped := storetest.GatherSum(t, reg, "ellipsis_worker_nats_events_total", map[string]string{"result": natsEventDropped})
	// The goroutine may not have taken the first event yet: 100 or 101.
	if dropped != 100 && dropped != 101 {
		t.Fatalf("dropped = %v, want 100 (or 101)", dropped)
	}
	close(pub.release)
	e.stop()
	e.stop()
	got := pub.published()
	if len(got) != total-int(dropped) {
		t.Fatalf("published %d, want %d", len(got), total-int(dropped))
	}
	for i, g := range got {
		if want := fmt.Sprintf("p.typing.v1.room.r%%2E%d %d", i, i); g != want {
			t.Fatalf("publish %d = %q, want %q (order kept)", i, g, want)
		}
	}
	if n := storetest.GatherSum(t, reg, "ellipsis_worker_nats_events_total", map[string]string{"result": natsEventPublished}); int(n) != len(got) {
		t.Fatalf("published counted %v, want %d", n, len(got))
	}

	// NATS gone (a closed connection, as after the worker's drain): the
	// publish fails and is counted, nothing blocks.
	requireServices(t)
	nc, err := nats.Connect(testkit.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	e2, reg2 := newTestEvents(t)
	e2.RoomEvent("r", []byte("x")) // before start: waits in the queue
	e2.start(nc)
	e2.stop()
	if n := storetest.GatherSum(t, reg2, "ellipsis_worker_nats_events_total", map[string]string{"result": natsEventFailed}); n != 1 {
		t.Fatalf("failed = %v, want 1", n)
	}
	e3, _ := newTestEvents(t)
	e3.stop() // never started: returns
	e3.start(&fakePublisher{})
	e3.RoomEvent("r", []byte("x")) // after stop: queued, never published, no panic
}

// discardPublisher publishes nowhere.
type discardPublisher struct{}

func (discardPublisher) Publish(string, []byte) error { return nil }

// BenchmarkNATSEventsRoomEvent is the worker's side of ELLIPSIS_NATS_EVENTS
// per room event the store reports, in two parts that add up: "enqueue",
// RoomEvent on the command path (the queue is emptied, untimed, whenever
// it fills, so nothing is dropped), and "publish", what the queue's
// goroutine does per event (build the subject, hand the event to a no-op
// publisher, count it). The store's side (rebuilding the event from the
// script reply) is BenchmarkEmitCommands in internal/store. No servers.
//
//	cd services/presence-worker
//	go test -run '^$' -bench NATSEventsRoomEvent -benchmem .
func BenchmarkNATSEventsRoomEvent(b *testing.B) {
	event := []byte(`{"v":1,"type":"typing_start","room":"42","user":"alice","name":"Alice","ts_ms":1764480000000}`)
	newEvents := func(b *testing.B) (*natsEvents, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		m, err := newMetrics(reg, false)
		if err != nil {
			b.Fatal(err)
		}
		return newNATSEvents(names.New("", ""), m, ratelog.New(zap.NewNop(), time.Minute)), reg
	}
	b.Run("enqueue", func(b *testing.B) {
		ev, reg := newEvents(b) // never started: the benchmark empties the queue
		for range b.N {
			if len(ev.q) == cap(ev.q) {
				b.StopTimer()
				for len(ev.q) > 0 {
					<-ev.q
				}
				b.StartTimer()
			}
			ev.RoomEvent("42", event)
		}
		b.StopTimer()
		if d := storetest.GatherSum(b, reg, "ellipsis_worker_nats_events_total", map[string]string{"result": natsEventDropped}); d != 0 {
			b.Fatalf("%v events dropped", d)
		}
	})
	b.Run("publish", func(b *testing.B) {
		ev, reg := newEvents(b)
		for b.Loop() {
			ev.publish(discardPublisher{}, natsEvent{"42", event})
		}
		b.StopTimer()
		if n := storetest.GatherSum(b, reg, "ellipsis_worker_nats_events_total", map[string]string{"result": natsEventPublished}); n == 0 {
			b.Fatal("nothing published")
		}
	})
}

// TestNATSRoomEventsOfCommandsQueuedAtShutdown: the commands a worker took
// before Shutdown have their room events published on NATS (counted
// published, none failed): Shutdown drains the subscriptions, lets the
// shards finish and publishes the queued events before it closes the
// connection.
func TestNATSRoomEventsOfCommandsQueuedAtShutdown(t *testing.T) {
	requireServices(t)
	t.Parallel()
	e := newEnv(t, storetest.Backend{Name: "redis", PubSub: storetest.PubSub}, eventsOn)
	w := e.startWorker()
	all := e.subscribeNATS(e.names.RoomEventsWildcard())
	const n = 300
	var ps [][]byte
	for i := range n {
		b, _ := json.Marshal(start(fmt.Sprintf("r%d", i%30), fmt.Sprintf("u%d", i), "", fmt.Sprintf("c%d", i), 1))
		ps = append(ps, b)
	}
	e.publishRaw(ps...)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := e.metric("ellipsis_worker_commands_total", map[string]string{"outcome": "started"}); got != n {
		t.Fatalf("%v commands started, want %d", got, n)
	}
	failed := e.metric("ellipsis_worker_nats_events_total", map[string]string{"result": natsEventFailed})
	dropped := e.metric("ellipsis_worker_nats_events_total", map[string]string{"result": natsEventDropped})
	published := e.metric("ellipsis_worker_nats_events_total", map[string]string{"result": natsEventPublished})
	if failed != 0 || dropped != 0 || published < n {
		t.Fatalf("NATS events: %v published, %v failed, %v dropped; want >= %d published, none failed or dropped", published, failed, dropped, n)
	}
	starts := 0
	for _, m := range all.drain(time.Second) {
		if ev, err := protocol.DecodeRoomEvent(m.Data); err == nil && ev.Type == protocol.TypeTypingStart {
			starts++
		}
	}
	if starts != n {
		t.Fatalf("%d typing_start events received on NATS, want %d", starts, n)
	}
}
