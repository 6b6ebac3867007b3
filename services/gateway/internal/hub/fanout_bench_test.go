package hub

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/pubsub"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Fan-out benchmarks: one room event from Redis Pub/Sub to N local members
// (100, 1,000, 10,000), through the hub's real fanOut (channel to room,
// decode once, self filter, holds, per-member Send, metrics). Members are
// fakes: no Redis I/O and no sockets are involved (the hub is never
// started), so this is the gateway's own CPU cost per frame; the socket
// writes are measured end to end by tools/loadgen.
//
//	cd services/gateway && go test -run '^$' -bench FanOut -benchmem ./internal/hub
//
// Sinks:
//   - count: Send only counts: the hub's loop alone.
//   - queue: Send is the session's non-blocking send on a 256-frame
//     channel, drained by one goroutine per member, as the session's
//     writer goroutine would (without the socket write). The benchmark
//     waits for the drains every 128 events, so no queue overflows.
//
// frames/s is N × events / elapsed: the target is ≥ 200,000 per gateway.

// countMember counts what it is sent.
type countMember struct {
	user string
	n    int64
}

func (m *countMember) User() string { return m.user }
func (m *countMember) Send([]byte) bool {
	m.n++ // the fan-out holds the room's lock: no race
	return true
}

// queueMember queues like session.Conn.Send; a drain goroutine empties it.
type queueMember struct {
	user string
	ch   chan []byte // 256, as ELLIPSIS_OUTBOUND_QUEUE; full: Send fails (the session closes 1013)
	got  atomic.Int64
}

func (m *queueMember) User() string { return m.user }
func (m *queueMember) Send(f []byte) bool {
	select {
	case m.ch <- f:
		return true
	default:
		return false
	}
}

func (m *queueMember) drain(wg *sync.WaitGroup) {
	defer wg.Done()
	var n int64
	for f := range m.ch {
		_ = f
		n++
		m.got.Store(n)
	}
}

// benchHub is a hub on the in-memory broker with room "r" holding
// members, never started (no I/O).
// nobodyTyping is a Backend whose every room has an empty snapshot.
type nobodyTyping struct{}

func (nobodyTyping) Snapshot(context.Context, string) (protocol.Snapshot, error) {
	return protocol.Snapshot{}, nil
}

func benchHub(b *testing.B, members []Member) *Hub {
	b.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	h := New(Options{Broker: pubsub.NewMemory(), Names: names.New("bench:", "bench"), Metrics: met, Backend: nobodyTyping{}})
	b.Cleanup(h.Close)
	rm := &room{name: "r", members: map[Member]*membership{}}
	for _, m := range members {
		rm.members[m] = &membership{joined: true}
	}
	sh := h.shard("r")
	sh.mu.Lock()
	sh.rooms["r"] = rm
	sh.mu.Unlock()
	return h
}

var fanOutSizes = []int{100, 1000, 10000}

func benchEvent() (channel, payload string) {
	ev := protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: "sender", Name: "Sender Example", TTLMs: 5000}
	return names.New("bench:", "bench").RoomChannel("r"),
		string(protocol.RoomEventPrefix(ev)) + strconv.FormatInt(time.Now().UnixMilli(), 10) + "}"
}

func reportFrames(b *testing.B, n int) {
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "frames/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(n)*float64(b.N)), "ns/frame")
}

func BenchmarkFanOut(b *testing.B) {
	channel, payload := benchEvent()
	for _, n := range fanOutSizes {
		b.Run("sink=count/members="+strconv.Itoa(n), func(b *testing.B) {
			ms := make([]Member, n)
			for i := range ms {
				ms[i] = &countMember{user: "u" + strconv.Itoa(i)}
			}
			h := benchHub(b, ms)
			b.ReportAllocs()
			for b.Loop() {
				h.fanOut(channel, payload)
			}
			reportFrames(b, n)
			if got := ms[0].(*countMember).n; got != int64(b.N) {
				b.Fatalf("member 0 got %d of %d frames", got, b.N)
			}
		})
		b.Run("sink=queue/members="+strconv.Itoa(n), func(b *testing.B) {
			qs := make([]*queueMember, n)
			ms := make([]Member, n)
			var wg sync.WaitGroup
			for i := range qs {
				qs[i] = &queueMember{user: "u" + strconv.Itoa(i), ch: make(chan []byte, 256)}
				ms[i] = qs[i]
				wg.Add(1)
				go qs[i].drain(&wg)
			}
			h := benchHub(b, ms)
			var sent int64
			waitDrained := func() {
				for _, q := range qs {
					for q.got.Load() < sent {
						runtime.Gosched()
					}
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				h.fanOut(channel, payload)
				sent++
				if sent%128 == 0 {
					waitDrained()
				}
			}
			waitDrained()
			reportFrames(b, n)
			for _, q := range qs {
				close(q.ch)
			}
			wg.Wait()
		})
	}
}

// clientEvent is what a gateway that re-encoded events per client would
// send: the server frame without the backplane's "v" and "ts_ms".
type clientEvent struct {
	Type   string `json:"type"`
	Room   string `json:"room"`
	User   string `json:"user"`
	Name   string `json:"name,omitempty"`
	TTLMs  int64  `json:"ttl_ms,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// fanOutReencode is the alternative the hub does not take: decode the
// event and encode a frame for every member (as a gateway that personalises
// or strips fields per client must). Otherwise it does what fanOut does.
func (h *Hub) fanOutReencode(channel, payload string, once bool) {
	room, ok := h.opts.Names.RoomFromChannel(channel)
	if !ok {
		return
	}
	ev, err := protocol.DecodeRoomEvent([]byte(payload))
	if err != nil {
		return
	}
	ce := clientEvent{Type: ev.Type, Room: ev.Room, User: ev.User, Name: ev.Name, TTLMs: ev.TTLMs, Reason: ev.Reason}
	var shared []byte
	if once {
		shared, _ = json.Marshal(ce)
	}
	rm := h.lookup(room)
	if rm == nil {
		return
	}
	defer rm.mu.Unlock()
	for m := range rm.members {
		if m.User() == ev.User {
			continue
		}
		frame := shared
		if !once {
			frame, _ = json.Marshal(ce)
		}
		h.deliver(m, ev.Room, ev.User, frame, ev.Type)
	}
}

// BenchmarkFanOutEncoding proves the hot-path choice: the hub forwards the
// Pub/Sub payload bytes as they are (one decode per event, one shared
// []byte for every member) instead of encoding a frame per client. The
// worker builds the event JSON once, in the client frame's shape, so
// nothing per client is needed: "v" and "ts_ms" ride along (clients
// ignore unknown fields; ts_ms feeds delivery_delay_seconds).
func BenchmarkFanOutEncoding(b *testing.B) {
	channel, payload := benchEvent()
	for _, n := range []int{100, 1000} {
		ms := make([]Member, n)
		for i := range ms {
			ms[i] = &countMember{user: "u" + strconv.Itoa(i)}
		}
		b.Run("forward_as_is/members="+strconv.Itoa(n), func(b *testing.B) {
			h := benchHub(b, ms)
			b.ReportAllocs()
			for b.Loop() {
				h.fanOut(channel, payload)
			}
			reportFrames(b, n)
		})
		b.Run("encode_once/members="+strconv.Itoa(n), func(b *testing.B) {
			h := benchHub(b, ms)
			b.ReportAllocs()
			for b.Loop() {
				h.fanOutReencode(channel, payload, true)
			}
			reportFrames(b, n)
		})
		b.Run("encode_per_client/members="+strconv.Itoa(n), func(b *testing.B) {
			h := benchHub(b, ms)
			b.ReportAllocs()
			for b.Loop() {
				h.fanOutReencode(channel, payload, false)
			}
			reportFrames(b, n)
		})
	}
}

func (m *countMember) SendEvent(_, _ string, f []byte) bool    { return m.Send(f) }
func (m *countMember) SendSnapshot(_ string, f []byte) bool    { return m.Send(f) }
func (m *countMember) SendRoomSummary(_ string, f []byte) bool { return m.Send(f) }

func (m *queueMember) SendEvent(_, _ string, f []byte) bool    { return m.Send(f) }
func (m *queueMember) SendSnapshot(_ string, f []byte) bool    { return m.Send(f) }
func (m *queueMember) SendRoomSummary(_ string, f []byte) bool { return m.Send(f) }
