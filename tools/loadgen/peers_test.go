package loadgen

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestComparePeers(t *testing.T) {
	e := &Result{System: SystemEllipsis, Conns: 10, Rooms: 2, Connected: 10, Latency: Latency{P50: 0.5, P99: 1, P999: 3},
		ServerCPU: &ServerCPU{PIDs: []int{1, 2}, Names: []string{"gateway", "presence-worker"}, Seconds: []float64{1, 2}, TotalSeconds: 3, CPUPerStateChangeUs: 300}}
	c := &Result{System: SystemCentrifugo, Conns: 10, Rooms: 2, Connected: 10, Latency: Latency{P50: 0.25, P99: 2, P999: 2},
		ServerCPU: &ServerCPU{PIDs: []int{3}, Names: []string{"centrifugo"}, Seconds: []float64{2}, TotalSeconds: 2, CPUPerStateChangeUs: 200},
		Errors:    map[string]int64{"missing_delivery": 4, "dial:timeout": 1}}
	c.Delivered.Echoes = 7
	p := ComparePeers("L1", e, c)
	for name, got := range map[string][2]float64{
		"p50": {p.Ratios.P50, 2}, "p99": {p.Ratios.P99, 0.5}, "p99.9": {p.Ratios.P999, 1.5}, "cpu": {p.Ratios.CPUPerStateChange, 1.5},
	} {
		if math.Abs(got[0]-got[1]) > 1e-9 {
			t.Errorf("%s ratio %g, want %g", name, got[0], got[1])
		}
	}
	var b bytes.Buffer
	p.WriteTable(&b)
	out := b.String()
	for _, want := range []string{"Peer benchmark L1", "ellipsis/centrifugo", "2.00×", "0.50×", "1.50×", "presence-worker 2.00s", "dial:timeout 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// A side without CPU figures gives no CPU ratio.
	c.ServerCPU = nil
	if r := ComparePeers("L1", e, c).Ratios.CPUPerStateChange; r != 0 {
		t.Errorf("CPU ratio %g without Centrifugo's CPU, want 0", r)
	}
}
