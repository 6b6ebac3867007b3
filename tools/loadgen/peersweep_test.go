package loadgen

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// sweepRun is a run at offered rate with p99 (ms), CPU per change (µs) and
// lost state changes.
func sweepRun(system, window string, rate, p50, p99, cpu float64, lost int64) *Result {
	r := &Result{System: system, Conns: 100, Connected: 100, Rate: rate, StateChangesPerSec: rate,
		Latency:   Latency{P50: p50, P99: p99, P999: p99 * 1.5},
		ServerCPU: &ServerCPU{Names: []string{"a", "b"}, Seconds: []float64{3, 1}, TotalSeconds: 4, CPUPerStateChangeUs: cpu}}
	r.Delivered.MatchedState, r.Delivered.LostState = 1000-lost, lost
	if window != "" {
		r.Labels = map[string]string{LabelBatchWindow: window}
	}
	return r
}

func TestSweepCapacityAndRatios(t *testing.T) {
	runs := []*Result{
		sweepRun(SystemCentrifugo, "", 3000, 1, 150, 300, 0),
		sweepRun(SystemCentrifugo, "", 4000, 2, 280, 280, 0), // over the target
		sweepRun(SystemEllipsis, "5ms", 4000, 6, 30, 190, 0),
		sweepRun(SystemEllipsis, "5ms", 3000, 5, 25, 240, 0),
		sweepRun(SystemEllipsis, "5ms", 8000, 9, 100, 150, 0),
		sweepRun(SystemEllipsis, "0s", 3000, 1, 40, 400, 0),
		sweepRun(SystemEllipsis, "0s", 4000, 3, 90, 300, 2),   // lost
		sweepRun(SystemEllipsis, "0s", 8000, 50, 150, 200, 0), // within, but above a failed rate
		sweepRun(SystemEllipsis, "default", 3000, 5, 25, 240, 0),
		sweepRun(SystemEllipsis, "10ms", 3000, 9, 30, 200, 0),
	}
	short := sweepRun(SystemEllipsis, "2ms", 3000, 1, 10, 100, 0)
	short.StateChangesPerSec = 2000
	runs = append(runs, short)
	s := NewSweep("custom", 0, runs)
	if s.P99TargetMs != DefaultSweepP99TargetMs {
		t.Fatalf("target %g, want the default %g", s.P99TargetMs, DefaultSweepP99TargetMs)
	}
	var order []string
	for _, p := range s.Points {
		order = append(order, p.System+"/"+p.Window+"/"+p.Verdict)
	}
	want := "ellipsis/0s/ok ellipsis/0s/lost ellipsis/0s/ok ellipsis/2ms/short ellipsis/5ms/ok ellipsis/5ms/ok ellipsis/5ms/ok ellipsis/10ms/ok ellipsis/default/ok centrifugo//ok centrifugo//p99"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("points %s\nwant   %s", got, want)
	}
	// Ellipsis 5 ms at 4,000/s against Centrifugo at 4,000/s.
	p := s.Points[5]
	for name, got := range map[string][2]float64{"cpu": {p.CPURatio, 190.0 / 280}, "p50": {p.P50Ratio, 3}, "p99": {p.P99Ratio, 30.0 / 280}} {
		if math.Abs(got[0]-got[1]) > 1e-9 {
			t.Errorf("%s ratio %g, want %g", name, got[0], got[1])
		}
	}
	if s.Points[6].CPURatio != 0 {
		t.Errorf("8,000/s has no Centrifugo run, ratio %g, want 0", s.Points[6].CPURatio)
	}
	caps := map[string]SweepCapacity{}
	for _, c := range s.Capacity {
		caps[c.System+"/"+c.Window] = c
	}
	if s.Capacity[0].System != SystemCentrifugo {
		t.Errorf("capacity starts with %s, want Centrifugo", s.Capacity[0].System)
	}
	for key, w := range map[string]SweepCapacity{
		"centrifugo/":  {Rate: 3000},
		"ellipsis/5ms": {Rate: 8000, AtLeast: true, Ratio: 8000.0 / 3000},
		"ellipsis/0s":  {Rate: 3000, Ratio: 1},
		"ellipsis/2ms": {},
	} {
		c := caps[key]
		if c.Rate != w.Rate || c.AtLeast != w.AtLeast || math.Abs(c.Ratio-w.Ratio) > 1e-9 {
			t.Errorf("capacity %s: %+v, want rate %g at least %v ratio %g", key, c, w.Rate, w.AtLeast, w.Ratio)
		}
	}
	// Without Centrifugo's limit (every rate within) there is no ratio.
	open := NewSweep("custom", 200, []*Result{runs[0], runs[3]})
	for _, c := range open.Capacity {
		if c.Rate != 3000 || !c.AtLeast || c.Ratio != 0 {
			t.Errorf("capacity %+v with Centrifugo's limit not found: want 3000, at least, no ratio", c)
		}
	}
	var b bytes.Buffer
	s.WriteTable(&b)
	out := b.String()
	for _, want := range []string{"Peer sweep custom: 11 runs", "p99 ≤ 200 ms", "a 142 b 48", "0.68×",
		"ellipsis, window 5ms: at least 8000/s (the highest rate tried), at least 2.67× Centrifugo's",
		"ellipsis, window 2ms: none of the rates tried", "centrifugo: 3000/s\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// Each reason a run is not within the target, in the order checked.
func TestSweepVerdict(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Result)
		want string
	}{
		{"ok", func(*Result) {}, "ok"},
		{"connect", func(r *Result) { r.Connected = 99; r.Latency.P99 = 500 }, "connect"},
		{"short", func(r *Result) { r.StateChangesPerSec = 0.9 * r.Rate; r.Delivered.LostState = 1 }, "short"},
		{"lost", func(r *Result) { r.Delivered.LostState = 1; r.Errors = map[string]int64{"missing_delivery": 1} }, "lost"},
		{"errors", func(r *Result) { r.Errors = map[string]int64{"unmatched_event": 1}; r.Latency.P99 = 500 }, "errors"},
		{"p99", func(r *Result) { r.Latency.P99 = 200.5 }, "p99"},
		{"p99 at the target", func(r *Result) { r.Latency.P99 = 200 }, "ok"},
	} {
		r := sweepRun(SystemEllipsis, "5ms", 1000, 1, 10, 100, 0)
		tc.mod(r)
		if got := verdict(r, 200); got != tc.want {
			t.Errorf("%s: verdict %q, want %q", tc.name, got, tc.want)
		}
	}
}
