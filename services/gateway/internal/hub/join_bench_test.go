package hub

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// BenchmarkJoinUnderFanOut: join latency in one room while a
// 10,000-member room fans out 100 events/s, on the
// in-memory broker (so only the hub's locks are measured).
//
//	cd services/gateway && go test -run '^$' -bench JoinUnderFanOut -benchtime 5s ./internal/hub
func BenchmarkJoinUnderFanOut(b *testing.B) {
	ms := make([]Member, 10000)
	for i := range ms {
		ms[i] = newConnMember("u" + strconv.Itoa(i))
	}
	h := benchHub(b, ms)
	h.Start()
	channel, payload := benchEvent()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				h.fanOut(channel, payload)
			}
		}
	}()
	// A resident member keeps room "other" subscribed: joins measure the
	// hub, not a SUBSCRIBE per join.
	resident := &countMember{user: "resident"}
	hd, _, err := h.Join(context.Background(), "other", resident, nil)
	if err != nil {
		b.Fatal(err)
	}
	h.Release(hd, nil, "")
	measure := func(b *testing.B, op func(m Member)) {
		lat := make([]time.Duration, 0, 1<<16)
		i := 0
		for b.Loop() {
			m := &countMember{user: "j" + strconv.Itoa(i)}
			i++
			start := time.Now()
			op(m)
			lat = append(lat, time.Since(start))
			h.Leave("other", m)
			// Paced, one op every 200 µs: a back-to-back loop would count
			// thousands of fast ops per one that waited.
			time.Sleep(200 * time.Microsecond)
		}
		slices.Sort(lat)
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
		b.ReportMetric(us(lat[len(lat)/2]), "p50-µs")
		b.ReportMetric(us(lat[len(lat)*99/100]), "p99-µs")
		b.ReportMetric(us(lat[len(lat)-1]), "max-µs")
	}
	// join: Join (subscription confirmed), Release with the joined frame.
	b.Run("op=join", func(b *testing.B) {
		measure(b, func(m Member) {
			hd, _, err := h.Join(context.Background(), "other", m, nil)
			if err != nil {
				b.Fatal(err)
			}
			h.Release(hd, []byte("joined"), protocol.TypeJoined)
		})
	})
	// hold: Hold and Release of the resident member (what sync and resync
	// take of the hub; no subscription involved).
	b.Run("op=hold", func(b *testing.B) {
		measure(b, func(Member) {
			hd := h.Hold("other", resident)
			h.Release(hd, []byte("snapshot"), protocol.TypeTyping)
		})
	})
	close(stop)
	wg.Wait()
}

// connMember costs about what session.Conn.Send does per frame: a closed
// check, a queue mutex, an append bounded by the queue size, and a
// non-blocking wake of the writer (nobody drains it: the frames are
// dropped at the bound, as the benchmark only needs the cost).
type connMember struct {
	user  string
	quit  chan struct{}
	mu    sync.Mutex
	n     int
	ready chan struct{}
}

func newConnMember(user string) *connMember {
	return &connMember{user: user, quit: make(chan struct{}), ready: make(chan struct{}, 1)}
}

func (m *connMember) User() string { return m.user }
func (m *connMember) Send([]byte) bool {
	select {
	case <-m.quit:
		return false
	default:
	}
	m.mu.Lock()
	m.n++
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
	return true
}

func (m *connMember) SendEvent(_, _ string, f []byte) bool    { return m.Send(f) }
func (m *connMember) SendSnapshot(_ string, f []byte) bool    { return m.Send(f) }
func (m *connMember) SendRoomSummary(_ string, f []byte) bool { return m.Send(f) }
