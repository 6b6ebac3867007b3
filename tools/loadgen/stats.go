package loadgen

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds, from 1 µs to 60 s, with 3
// significant digits (0.1% resolution at every scale).
const (
	histMin     = 1
	histMax     = 60_000_000
	histDigits  = 3
	histShards  = 32 // receivers record into shard (conn index % histShards)
	microsecond = int64(time.Microsecond)
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

// shard holds the latencies recorded since the last collect by the
// receivers that map to it.
type shard struct {
	mu      sync.Mutex
	state   *hdrhistogram.Histogram // start (burst) and stop
	refresh *hdrhistogram.Histogram
}

// counters are the run's totals, updated atomically by every goroutine.
type counters struct {
	connected atomic.Int64 // connections open and joined
	open      atomic.Int64 // connections currently open

	sentStart   atomic.Int64
	sentRefresh atomic.Int64
	sentStop    atomic.Int64

	// expected deliveries: the room's other members, per send.
	expectState   atomic.Int64
	expectRefresh atomic.Int64

	framesIn     atomic.Int64 // every frame read by the clients during the run
	matchedState atomic.Int64
	matchedRefr  atomic.Int64
	unmatched    atomic.Int64 // typing events no send explains
	echoes       atomic.Int64 // a sender's own events echoed back to it (Centrifugo)
	pings        atomic.Int64 // server pings answered (Centrifugo)
	replies      atomic.Int64 // command replies read (Centrifugo: one per publish)
	expiredStops atomic.Int64 // typing_stop expired
	otherStops   atomic.Int64 // typing_stop disconnected / left
	snapshots    atomic.Int64 // typing frames (resync pushes)
}

// stats gathers what the connections observe.
type stats struct {
	c      counters
	shards [histShards]shard

	mu         sync.Mutex
	errs       map[string]int64 // kind -> count
	totalState *hdrhistogram.Histogram
	totalRefr  *hdrhistogram.Histogram
}

func newStats() *stats {
	s := &stats{errs: map[string]int64{}, totalState: newHist(), totalRefr: newHist()}
	for i := range s.shards {
		s.shards[i].state = newHist()
		s.shards[i].refresh = newHist()
	}
	return s
}

// record adds one latency (ns) seen by connection conn.
func (s *stats) record(conn int, ns int64, refresh bool) {
	us := ns / microsecond
	if us < histMin {
		us = histMin
	}
	if us > histMax {
		us = histMax
	}
	sh := &s.shards[conn%histShards]
	sh.mu.Lock()
	if refresh {
		_ = sh.refresh.RecordValue(us)
	} else {
		_ = sh.state.RecordValue(us)
	}
	sh.mu.Unlock()
}

// fail counts one error of kind.
func (s *stats) fail(kind string) {
	s.mu.Lock()
	s.errs[kind]++
	s.mu.Unlock()
}

// collect moves what the shards recorded since the last collect into the
// totals, and returns that interval's state-change histogram.
func (s *stats) collect() *hdrhistogram.Histogram {
	interval := newHist()
	refr := newHist()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		interval.Merge(sh.state)
		refr.Merge(sh.refresh)
		sh.state.Reset()
		sh.refresh.Reset()
		sh.mu.Unlock()
	}
	s.mu.Lock()
	s.totalState.Merge(interval)
	s.totalRefr.Merge(refr)
	s.mu.Unlock()
	return interval
}

func (s *stats) errors() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.errs))
	for k, v := range s.errs {
		out[k] = v
	}
	return out
}

func (s *stats) errorTotal() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, v := range s.errs {
		n += v
	}
	return n
}

// Latency summarises a latency distribution, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

func summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{
		Count: h.TotalCount(),
		P50:   ms(h.ValueAtQuantile(50)),
		P90:   ms(h.ValueAtQuantile(90)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
		Mean:  h.Mean() / 1000,
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
