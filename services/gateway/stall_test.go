package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/session"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Issue 25, item 1: a slow reader is conflated, not closed
// (docs/protocol.md, "Order and loss").

// churnTruth is the true typing state of rooms driven by the test as the
// workers would: every event updates it and the emulated worker's
// snapshot before it is published, so a snapshot read after a hold lists
// every event published before it (and maybe the next one, which comes
// after it again: applying it twice changes nothing).
type churnTruth struct {
	e      *env
	name   string // every typist's name in the snapshots; "" for N<user>
	mu     sync.Mutex
	typing map[string]map[string]bool // room → user → typing
}

// set records user's state in room and the room's snapshot; the caller
// publishes the event after.
func (c *churnTruth) set(room, user string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.typing[room] == nil {
		c.typing[room] = map[string]bool{}
	}
	c.typing[room][user] = on
	var ts []protocol.Typist
	for u, on := range c.typing[room] {
		if on {
			name := c.name
			if name == "" {
				name = "N" + u
			}
			ts = append(ts, protocol.Typist{User: u, Name: name})
		}
	}
	c.e.setSnapshot(room, ts...)
}

// count is how many users type in room now.
func (c *churnTruth) count(room string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, on := range c.typing[room] {
		if on {
			n++
		}
	}
	return n
}

// state is room → sorted typists.
func (c *churnTruth) state() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for room, users := range c.typing {
		out[room] = typistSet(users)
	}
	return out
}

func typistSet(users map[string]bool) string {
	var us []string
	for u, on := range users {
		if on {
			us = append(us, u)
		}
	}
	slices.Sort(us)
	return strings.Join(us, ",")
}

// event is the payload of a typing_start (name, 5 s ttl) or a
// typing_stop (reason: stopped or expired) as a worker publishes it.
func churnEvent(room, user string, start bool, name, reason string) string {
	ev := protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: room, User: user, Reason: reason}
	if start {
		ev = protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: room, User: user, Name: name, TTLMs: 5000}
	}
	return string(protocol.RoomEventPrefix(ev)) + strconv.FormatInt(time.Now().UnixMilli(), 10) + "}"
}

// viewer is a client's view of its rooms, applied as the JS SDK does (a
// snapshot replaces the room, an event sets its user), fed by its own
// read loop (nothing dropped). delays are the receipt time less ts_ms of
// every event whose ts_ms is from measureFrom on (Unix ms; 0: none).
type viewer struct {
	mu          sync.Mutex
	rooms       map[string]map[string]bool
	frames      int
	pongs       map[string]bool
	snapshots   map[string]string // id → the typing answer's typists
	bad         []string          // frames a healthy connection should not get
	delays      []time.Duration
	measureFrom atomic.Int64
	done        chan struct{}
	err         error
}

func watch(ws *websocket.Conn) *viewer {
	v := &viewer{rooms: map[string]map[string]bool{}, pongs: map[string]bool{}, snapshots: map[string]string{}, done: make(chan struct{})}
	go func() {
		defer close(v.done)
		for {
			_ = ws.SetReadDeadline(time.Now().Add(2 * time.Minute))
			_, b, err := ws.ReadMessage()
			at := time.Now()
			if err != nil {
				v.err = err
				return
			}
			v.apply(b, at)
		}
	}()
	return v
}

func (v *viewer) apply(b []byte, at time.Time) {
	var f protocol.ServerFrame
	if err := json.Unmarshal(b, &f); err != nil {
		v.mu.Lock()
		v.bad = append(v.bad, string(b))
		v.mu.Unlock()
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.frames++
	set := func(list []protocol.Typist) map[string]bool {
		m := map[string]bool{}
		for _, t := range list {
			m[t.User] = true
		}
		v.rooms[f.Room] = m
		return m
	}
	switch f.Type {
	case protocol.TypeJoined:
		set(f.Typing)
	case protocol.TypeTyping:
		m := set(f.Users)
		if f.ID != "" {
			v.snapshots[f.ID] = typistSet(m)
		}
	case protocol.TypeTypingStart, protocol.TypeTypingStop:
		if v.rooms[f.Room] == nil {
			v.rooms[f.Room] = map[string]bool{}
		}
		v.rooms[f.Room][f.User] = f.Type == protocol.TypeTypingStart
		if from := v.measureFrom.Load(); from != 0 && f.TsMs >= from {
			v.delays = append(v.delays, at.Sub(time.UnixMilli(f.TsMs)))
		}
	case protocol.TypePong:
		v.pongs[f.ID] = true
	default:
		v.bad = append(v.bad, string(b))
	}
}

func (v *viewer) state() map[string]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]string{}
	for room, users := range v.rooms {
		out[room] = typistSet(users)
	}
	return out
}

func (v *viewer) has(f func(v *viewer) bool) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return f(v)
}

// alive fails t once the viewer's connection ended.
func (v *viewer) alive(t *testing.T, who string) {
	t.Helper()
	select {
	case <-v.done:
		t.Fatalf("%s's connection ended: %v", who, v.err)
	default:
	}
}

// quiet waits until v got no frame for a second (at most 30 s).
func (v *viewer) quiet(t *testing.T) {
	t.Helper()
	last, since := -1, time.Now()
	testkit.WaitFor(t, 30*time.Second, "the connection to go quiet", func() bool {
		n := 0
		v.has(func(v *viewer) bool { n = v.frames; return true })
		if n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) > time.Second
	})
}

// flood publishes events of about 1 KB (a start with a 1000-byte name,
// or a stop) in the rooms next gives, 200 at a time, 10 ms apart (about
// 10 MB/s), until done holds (checked after each batch; at most 60 s): it
// fills the socket buffers of a frozen reader, whatever their size, at a
// pace the gateway writes them unconflated to a reader that reads.
func (e *env) flood(t *testing.T, what string, next func() (room, user string, start bool), done func() bool) {
	t.Helper()
	name := strings.Repeat("B", 1000)
	for deadline := time.Now().Add(60 * time.Second); !done(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("flooded for 60 s without %s", what)
		}
		pipe := e.rdb.Pipeline()
		for range 200 {
			room, user, start := next()
			pipe.Publish(context.Background(), e.names.RoomChannel(room), churnEvent(room, user, start, name, protocol.ReasonStopped))
		}
		if _, err := pipe.Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// blocked reports whether user's one connection conflates and keeps
// conflating for a second (polled every 10 ms): its writer is blocked on
// a full socket (one that writes would drain the kept events, a few
// dozen, at once).
func (e *env) blocked(user string) bool {
	for until := time.Now().Add(time.Second); time.Now().Before(until); time.Sleep(10 * time.Millisecond) {
		if o, ok := e.outboundOf(user); !ok || !o.Conflating {
			return false
		}
	}
	return true
}

// publishRaw publishes payload on room's channel.
func (e *env) publishRaw(room, payload string) {
	e.t.Helper()
	if err := e.rdb.Publish(context.Background(), e.names.RoomChannel(room), payload).Err(); err != nil {
		e.t.Fatalf("publish: %v", err)
	}
}

// outboundOf is the outbound state of user's one connection; false when
// it has none (or more).
func (e *env) outboundOf(user string) (session.Outbound, bool) {
	all := e.srv.OutboundOf(user)
	if len(all) != 1 {
		return session.Outbound{}, false
	}
	return all[0], true
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// A reader that stops reading for 20 s while its rooms churn (140 users
// in 5 rooms, one with more users than ELLIPSIS_SNAPSHOT_MAX; starts,
// stops and expiries all along, and a flood that fills its socket) is conflated, not closed: meanwhile its
// outbound state stays within the bounds of docs/protocol.md ("Order and
// loss"), and a healthy reader of the same rooms gets every event at
// once; once it reads again it ends with exactly the true state of every
// room, and stops conflating.
func TestFrozenReaderEndsExactWithinBounds(t *testing.T) {
	t.Parallel()
	const (
		roomCap = 20 // ELLIPSIS_SNAPSHOT_MAX
		freeze  = 20 * time.Second
	)
	e := newEnv(t, func(c *config.Config) { c.SnapshotMax = roomCap; c.WriteStall = 2 * time.Minute })
	var asked sync.Map // room → *atomic.Int64: snapshot requests
	e.onSnapshot = func(room string) {
		n, _ := asked.LoadOrStore(room, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	e.startWorker("")
	askedOf := func(room string) int64 {
		n, _ := asked.LoadOrStore(room, new(atomic.Int64))
		return n.(*atomic.Int64).Load()
	}
	truth := &churnTruth{e: e, typing: map[string]map[string]bool{}}
	rooms := []string{"big", "r1", "r2", "r3", "r4"}
	// The churned users: 60 in big, over the room cap (snapshot pushes),
	// 10 in each other room, which the flood's 10 users (f*) join there.
	users := map[string]int{"big": 3 * roomCap}
	for _, r := range rooms[1:] {
		users[r] = 10
	}

	px := newFreezeProxy(t, e.srv.HTTPAddr())
	slowC := e.dialURL("ws://"+px.addr()+"/v1/ws?user=alice", nil)
	healthyC := e.dial("bob", "")
	for _, r := range rooms {
		slowC.join(r)
		healthyC.join(r)
	}
	joinAsks := askedOf("big")
	healthy := watch(healthyC.ws)

	px.freeze()
	frozenAt := time.Now()
	stop := make(chan struct{})
	halt := sync.OnceFunc(func() { close(stop) })
	var workers sync.WaitGroup
	t.Cleanup(func() { halt(); workers.Wait() }) // before the gateway's shutdown

	// Churn: one worker per room, for the whole freeze.
	var published atomic.Int64
	for i, room := range rooms {
		workers.Add(1)
		go func() {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 25))
			pause := 20 * time.Millisecond
			if room == "big" {
				pause = 10 * time.Millisecond
			}
			for {
				select {
				case <-stop:
					return
				case <-time.After(pause):
				}
				user := "u" + strconv.Itoa(rng.IntN(users[room]))
				truth.mu.Lock()
				on := truth.typing[room][user]
				truth.mu.Unlock()
				start := !on && truth.count(room) < roomCap // a snapshot lists them all
				reason := protocol.ReasonStopped
				if rng.IntN(3) == 0 {
					reason = protocol.ReasonExpired
				}
				truth.set(room, user, start)
				if err := e.rdb.Publish(context.Background(), e.names.RoomChannel(room), churnEvent(room, user, start, "N"+user, reason)).Err(); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				published.Add(1)
			}
		}()
	}

	// Meanwhile the frozen reader's state stays within its bounds: the
	// client asks nothing, so its answers are the rooms' pushed
	// snapshots, at most one per room.
	var (
		smu                 sync.Mutex
		most                session.Outbound
		samples, conflating int
		over                string
		closed              bool
	)
	workers.Add(1)
	go func() {
		defer workers.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			s, ok := e.outboundOf("alice")
			smu.Lock()
			closed = closed || !ok
			samples++
			if s.Conflating {
				conflating++
			}
			most.HighWater = max(most.HighWater, s.HighWater)
			most.Conflated = max(most.Conflated, s.Conflated)
			most.ConflatedRooms = max(most.ConflatedRooms, s.ConflatedRooms)
			most.Queued = max(most.Queued, s.Queued-s.Answers) // events queued
			most.Answers = max(most.Answers, s.Answers)
			if over == "" && (s.Conflated > len(rooms)*s.RoomCap || s.ConflatedRooms > len(rooms) || s.Queued-s.Answers > s.HighWater || s.Answers > len(rooms)) {
				over = fmt.Sprintf("%+v", s)
			}
			smu.Unlock()
		}
	}()

	// A flood until the frozen reader's socket buffers are full and it
	// conflates for good, then a marker that the healthy reader has read
	// it all: from there its delays count.
	i := 0
	e.flood(t, "the frozen reader to conflate", func() (string, string, bool) {
		room := rooms[1+i%4]
		user := "f" + strconv.Itoa((i/4)%10)
		start := (i/40)%2 == 0
		i++
		truth.set(room, user, start)
		return room, user, start
	}, func() bool { return e.blocked("alice") })
	truth.set("big", "marker", false)
	e.publishRaw("big", churnEvent("big", "marker", false, "", protocol.ReasonStopped))
	testkit.WaitFor(t, 30*time.Second, "the healthy reader to read the bursts", func() bool {
		return healthy.has(func(v *viewer) bool { _, ok := v.rooms["big"]["marker"]; return ok })
	})
	measured := time.Now()
	healthy.measureFrom.Store(measured.UnixMilli())

	// 20 s frozen, and at least 5 s of it measured (a slow flood).
	time.Sleep(max(time.Until(frozenAt.Add(freeze)), time.Until(measured.Add(5*time.Second))))
	o, open := e.outboundOf("alice")
	halt()
	workers.Wait()
	pushes := askedOf("big") - joinAsks
	t.Logf("frozen %v: %d events flooded, %d churned; %d samples, %d conflating; most %d entries in %d rooms (bound %d × %d), %d events + %d answers queued (high-water %d); %d pushes of the big room",
		time.Since(frozenAt).Round(time.Millisecond), i, published.Load(), samples, conflating, most.Conflated, most.ConflatedRooms, len(rooms), roomCap, most.Queued, most.Answers, most.HighWater, pushes)
	switch {
	case closed || !open:
		t.Fatal("the frozen reader's connection was closed")
	case over != "":
		t.Fatalf("frozen reader over its bound: %s (rooms %d)", over, len(rooms))
	case !o.Conflating:
		t.Fatalf("not conflating at the end of the freeze (%+v): the freeze did not hold the reader back", o)
	case pushes == 0 || most.Conflated == 0:
		t.Fatalf("%d snapshot pushes of the big room, most %d entries conflated: its cap was never passed", pushes, most.Conflated)
	}

	// The healthy reader did not wait behind it.
	healthy.quiet(t)
	healthy.alive(t, "the healthy reader")
	var delays []time.Duration
	healthy.has(func(v *viewer) bool { delays = slices.Clone(v.delays); return true })
	if len(delays) < 100 {
		t.Fatalf("the healthy reader got %d churned events", len(delays))
	}
	p50, p99 := percentile(delays, 0.50), percentile(delays, 0.99)
	t.Logf("healthy reader: %d events, delivery delay p50 %v p99 %v max %v", len(delays), p50, p99, percentile(delays, 1))
	// Waiting behind the frozen reader would cost seconds to all 20 s; a
	// busy machine costs tens or hundreds of ms (measured: p99 5–210 ms).
	if p99 > 5*time.Second {
		t.Fatalf("healthy reader's p99 delivery delay %v while another reader was frozen, want under 5 s", p99)
	}
	want := truth.state()
	if got := healthy.state(); !maps.Equal(got, want) {
		t.Fatalf("the healthy reader ends with %v, want %v", got, want)
	}

	// Thawed, the frozen reader reads everything, is conflating no more,
	// and ends with the true state of every room, which a fresh snapshot
	// of each confirms; it was never closed and answers a ping.
	px.thaw()
	slow := watch(slowC.ws)
	slowC.send(`{"type":"ping","id":"thawed"}`)
	testkit.WaitFor(t, 60*time.Second, "the thawed reader's pong", func() bool {
		slow.alive(t, "the thawed reader")
		return slow.has(func(v *viewer) bool { return v.pongs["thawed"] })
	})
	testkit.WaitFor(t, 30*time.Second, "conflation to end", func() bool {
		o, ok := e.outboundOf("alice")
		return ok && !o.Conflating && o.Queued == 0 && o.PushesAwaited == 0
	})
	slow.quiet(t)
	if got := slow.state(); !maps.Equal(got, want) {
		n := 0
		for r, ts := range want {
			if got[r] != ts {
				n++
			}
		}
		t.Fatalf("the thawed reader ends with %d of %d rooms wrong:\n got %v\nwant %v", n, len(want), got, want)
	}
	for _, r := range rooms {
		slowC.send(`{"type":"sync","room":"` + r + `","id":"s-` + r + `"}`)
	}
	slowC.send(`{"type":"ping","id":"after"}`)
	testkit.WaitFor(t, 10*time.Second, "the fresh snapshots and the pong", func() bool {
		slow.alive(t, "the thawed reader")
		return slow.has(func(v *viewer) bool { return len(v.snapshots) == len(rooms) && v.pongs["after"] })
	})
	slow.has(func(v *viewer) bool {
		for _, r := range rooms {
			if v.snapshots["s-"+r] != want[r] {
				t.Errorf("fresh snapshot of %s lists %q, want %q", r, v.snapshots["s-"+r], want[r])
			}
		}
		if len(v.bad) > 0 {
			t.Errorf("unexpected frames: %q", v.bad[:min(len(v.bad), 3)])
		}
		return true
	})
	for _, series := range []string{`ellipsis_gateway_closes_total{code="1013"}`, "ellipsis_gateway_write_stall_closes_total", "ellipsis_gateway_slow_consumer_closes_total"} {
		if n := e.metric(series); n != 0 {
			t.Errorf("%s = %v, want 0", series, n)
		}
	}
}

// A reader frozen past ELLIPSIS_WRITE_STALL while it conflates is closed
// and counted as a 1013 (write_stall_closes_total), and its conflation
// ends with it; another reader of the room is not touched.
func TestFrozenReaderPastWriteStallIsClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.WriteStall = 2 * time.Second })
	e.startWorker("")
	px := newFreezeProxy(t, e.srv.HTTPAddr())
	slowC := e.dialURL("ws://"+px.addr()+"/v1/ws?user=alice", nil)
	slowC.join("r")
	other := e.dial("bob", "")
	other.join("r")
	seen := watch(other.ws)
	px.freeze()
	i := 0
	sawConflating := false
	e.flood(t, "the frozen reader to conflate, then be closed", func() (string, string, bool) {
		i++
		return "r", "u" + strconv.Itoa(i%30), i%2 == 0
	}, func() bool {
		if o, ok := e.outboundOf("alice"); ok && o.Conflating && o.Conflated > 0 {
			sawConflating = true
		}
		return len(e.srv.OutboundOf("alice")) == 0
	})
	if !sawConflating {
		t.Fatal("the frozen reader was closed before it was seen conflating")
	}
	testkit.WaitFor(t, 10*time.Second, "the close to be counted as a 1013 write stall", func() bool {
		return e.metric(`ellipsis_gateway_closes_total{code="1013"}`) == 1 && e.metric("ellipsis_gateway_write_stall_closes_total") == 1
	})
	testkit.WaitFor(t, 10*time.Second, "its conflation to end with it", func() bool {
		return e.metric("ellipsis_gateway_conflating_connections") == 0 && len(e.srv.OutboundOf("alice")) == 0
	})
	px.thaw()
	// What reaches the client is the socket's backlog, then the end: a
	// 1013 close frame or, the stalled write having broken the socket, a
	// cut connection.
	_ = slowC.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, _, err := slowC.ws.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) && ce.Code != websocket.CloseTryAgainLater && ce.Code != websocket.CloseAbnormalClosure {
			t.Fatalf("frozen reader closed with %d, want 1013 (or cut)", ce.Code)
		}
		break
	}
	other.send(`{"type":"ping","id":"still"}`)
	testkit.WaitFor(t, 10*time.Second, "the other reader's pong", func() bool {
		seen.alive(t, "the other reader")
		return seen.has(func(v *viewer) bool { return v.pongs["still"] })
	})
	if n := e.metric(`ellipsis_gateway_closes_total{code="1013"}`); n != 1 {
		t.Fatalf("closes_total{1013} = %v, want 1 (the frozen reader only)", n)
	}
}
