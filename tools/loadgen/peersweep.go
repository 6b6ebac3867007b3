package loadgen

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// LabelBatchWindow is the label (Result.Labels) that names the Ellipsis
// gateway's ELLIPSIS_BATCH_WINDOW of a run; tools/loadgen/peers.sh sets
// it, "default" when the gateway ran with its default.
const LabelBatchWindow = "batch_window"

// DefaultSweepP99TargetMs is the latency target capacity is measured at:
// the design's end-to-end budget, 200 ms at p99 (docs/BENCHMARKS.md,
// "Against Centrifugo").
const DefaultSweepP99TargetMs = 200.0

// sweepShortFraction: a point whose achieved rate of state changes is
// below this fraction of the offered rate did not get its load (the load
// generator, or the machine, fell short) and is never within the target.
const sweepShortFraction = 0.95

// Sweep is the outcome of a peer benchmark sweep (tools/loadgen/peers.sh
// with WINDOWS or RATES, `make bench-peers`): one run per system, batch
// window and offered rate, each judged against a p99 target, and the
// capacity of each system and window: the highest offered rate up to
// which every rate tried was within the target. It marshals to the JSON the sweep writes.
type Sweep struct {
	// Load names the load (L1, L2, L3 or custom).
	Load string `json:"load"`
	// P99TargetMs is the target a point must meet (ms).
	P99TargetMs float64      `json:"p99_target_ms"`
	Points      []SweepPoint `json:"points"`
	// Capacity is one entry per system and window, Centrifugo first.
	Capacity []SweepCapacity `json:"capacity"`
}

// SweepPoint is one run of a sweep.
type SweepPoint struct {
	System string `json:"system"`
	// Window is the run's LabelBatchWindow ("" for Centrifugo, which has
	// no window).
	Window string `json:"batch_window,omitempty"`
	// Rate is the offered rate, state changes per second.
	Rate float64 `json:"rate"`
	// Verdict is "ok" within the target, else the first reason it is not:
	// "connect" (not every connection opened), "short" (achieved rate
	// below 95 % of the offered), "throttle" (an Ellipsis run whose
	// typists each sent more state changes than the transition throttle
	// lets through at the protocol's default throttle: the workload, not
	// the system, sets what is delivered; see ThrottleLoad), "lost" (a
	// state change not delivered),
	// "errors" (any other error the load generator counted), "p99" (over
	// the target).
	Verdict string `json:"verdict"`
	// CPURatio, P50Ratio and P99Ratio are this run's figure ÷ the
	// Centrifugo run's at the same offered rate (Ellipsis points only; 0
	// when there is none or a side lacks the figure).
	CPURatio float64 `json:"cpu_ratio,omitempty"`
	P50Ratio float64 `json:"p50_ratio,omitempty"`
	P99Ratio float64 `json:"p99_ratio,omitempty"`
	Result   *Result `json:"result"`
}

// SweepCapacity is the capacity of one system at one window.
type SweepCapacity struct {
	System string `json:"system"`
	Window string `json:"batch_window,omitempty"`
	// Rate is the highest offered rate (state changes/s) that, with
	// every lower rate tried, was within the target; 0 when the lowest
	// was not.
	Rate float64 `json:"rate"`
	// AtLeast: every rate tried was within the target, or the first that
	// was not is a "throttle" run (Throttled), so the capacity is at
	// least Rate (the sweep did not find the limit).
	AtLeast bool `json:"at_least"`
	// Throttled: the rate after Rate was a "throttle" run: above Rate
	// this workload's typists outrun the transition throttle, so a
	// sweep that is to find the limit needs more typists (SHARE, CONNS)
	// at the same rate.
	Throttled bool `json:"throttled,omitempty"`
	// Ratio is Rate ÷ Centrifugo's capacity (Ellipsis only): 0 when
	// either is 0 or the sweep did not find Centrifugo's limit (its
	// AtLeast); a lower bound when AtLeast.
	Ratio float64 `json:"ratio,omitempty"`
}

// NewSweep judges results (one per run, any order) against a p99 target
// (ms; DefaultSweepP99TargetMs when not positive) and computes each
// system's and window's capacity. Points are sorted by system (Ellipsis
// first), window (compareWindows), then rate.
func NewSweep(load string, p99TargetMs float64, results []*Result) *Sweep {
	if p99TargetMs <= 0 {
		p99TargetMs = DefaultSweepP99TargetMs
	}
	s := &Sweep{Load: load, P99TargetMs: p99TargetMs}
	cf := map[float64]*Result{}
	for _, r := range results {
		p := SweepPoint{System: r.System, Rate: r.Rate, Result: r, Verdict: verdict(r, p99TargetMs)}
		if r.System == SystemCentrifugo {
			cf[r.Rate] = r
		} else {
			p.Window = r.Labels[LabelBatchWindow]
		}
		s.Points = append(s.Points, p)
	}
	for i := range s.Points {
		p := &s.Points[i]
		if c := cf[p.Rate]; c != nil && p.System != SystemCentrifugo {
			p.CPURatio = ratio(cpuPerChange(p.Result), cpuPerChange(c))
			p.P50Ratio = ratio(p.Result.Latency.P50, c.Latency.P50)
			p.P99Ratio = ratio(p.Result.Latency.P99, c.Latency.P99)
		}
	}
	slices.SortStableFunc(s.Points, func(a, b SweepPoint) int {
		return cmp.Or(cmp.Compare(systemOrder(a.System), systemOrder(b.System)), compareWindows(a.Window, b.Window), cmp.Compare(a.Rate, b.Rate))
	})
	var cfCap float64
	broken := false // a lower rate of the current system and window was not within
	for _, p := range s.Points {
		n := len(s.Capacity)
		if n == 0 || s.Capacity[n-1].System != p.System || s.Capacity[n-1].Window != p.Window {
			s.Capacity = append(s.Capacity, SweepCapacity{System: p.System, Window: p.Window, AtLeast: true})
			n++
			broken = false
		}
		c := &s.Capacity[n-1]
		switch {
		case p.Verdict == "throttle" && !broken:
			broken, c.Throttled = true, true
		case p.Verdict == "throttle":
		case p.Verdict != "ok":
			if !broken {
				c.AtLeast = false
			}
			broken = true
		case !broken:
			c.Rate = p.Rate
		}
	}
	slices.SortStableFunc(s.Capacity, func(a, b SweepCapacity) int {
		return cmp.Compare(-systemOrder(a.System), -systemOrder(b.System))
	})
	for _, c := range s.Capacity {
		if c.System == SystemCentrifugo && !c.AtLeast {
			cfCap = c.Rate
		}
	}
	for i := range s.Capacity {
		if c := &s.Capacity[i]; c.System != SystemCentrifugo {
			c.Ratio = ratio(c.Rate, cfCap)
		}
	}
	return s
}

// systemOrder puts Ellipsis before Centrifugo in the points.
func systemOrder(system string) int {
	if system == SystemCentrifugo {
		return 1
	}
	return 0
}

// compareWindows orders batch windows by duration; one that is not a Go
// duration ("default") after those that are, by name among themselves.
func compareWindows(a, b string) int {
	da, errA := time.ParseDuration(a)
	db, errB := time.ParseDuration(b)
	switch {
	case errA == nil && errB == nil:
		return cmp.Compare(da, db)
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return cmp.Compare(a, b)
}

// verdict is SweepPoint.Verdict of r against the p99 target (ms).
func verdict(r *Result, p99TargetMs float64) string {
	var errs int64
	for k, v := range r.Errors {
		if k != "missing_delivery" { // that is "lost"
			errs += v
		}
	}
	switch {
	case r.Connected < int64(r.Conns):
		return "connect"
	case r.Rate > 0 && r.StateChangesPerSec < sweepShortFraction*r.Rate:
		return "short"
	case outrunsThrottle(r):
		return "throttle"
	case r.Delivered.LostState > 0:
		return "lost"
	case errs > 0:
		return "errors"
	case r.Latency.P99 > p99TargetMs:
		return "p99"
	}
	return "ok"
}

// WriteTable prints the sweep: one row per run, with the CPU split per
// server process and the ratios to Centrifugo at the same rate, then the
// capacity of each system and window.
func (s *Sweep) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nPeer sweep %s: %d runs; a run is within the target when every connection opened, the offered rate was achieved (≥ %.0f %%), nothing was lost or failed, and p99 ≤ %.0f ms\n",
		s.Load, len(s.Points), 100*sweepShortFraction, s.P99TargetMs)
	fmt.Fprintln(w, "latency: sender's write -> receiver's read of state changes (ms); CPU: the server processes, user + system, per state change sent (µs), then each process's; ratios: Ellipsis ÷ Centrifugo at the same offered rate")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\twindow\toffered/s\tachieved/s\tp50\tp99\tp99.9\tdelivered\tlost\tverdict\tCPU/change µs\tper process µs\tCPU ratio\tp50 ratio\tp99 ratio\t")
	x := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", v)
	}
	for _, p := range s.Points {
		r := p.Result
		perChange, split := "-", "-"
		if sc := r.ServerCPU; sc != nil {
			perChange = fmt.Sprintf("%.0f", sc.CPUPerStateChangeUs)
			split = ""
			for i := range sc.Seconds {
				if i > 0 {
					split += " "
				}
				us := 0.0
				if sc.TotalSeconds > 0 {
					us = sc.CPUPerStateChangeUs * sc.Seconds[i] / sc.TotalSeconds
				}
				split += fmt.Sprintf("%s %.0f", sc.Names[i], us)
			}
		}
		window := cmp.Or(p.Window, "-")
		l := r.Latency
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.2f\t%.1f\t%.1f\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.System, window, p.Rate, r.StateChangesPerSec,
			l.P50, l.P99, l.P999, r.Delivered.MatchedState, r.Delivered.LostState, p.Verdict, perChange, split, x(p.CPURatio), x(p.P50Ratio), x(p.P99Ratio))
	}
	tw.Flush()
	fmt.Fprintf(w, "capacity (highest offered rate up to which every run was within the target, p99 ≤ %.0f ms):\n", s.P99TargetMs)
	for _, c := range s.Capacity {
		name := c.System
		if c.Window != "" {
			name += ", window " + c.Window
		}
		switch {
		case c.Rate == 0 && c.Throttled:
			fmt.Fprintf(w, "  %s: not found (at every rate tried this workload's typists outrun the transition throttle: more typists, SHARE or CONNS)\n", name)
		case c.Rate == 0:
			fmt.Fprintf(w, "  %s: none of the rates tried\n", name)
		case c.Throttled:
			fmt.Fprintf(w, "  %s: at least %.0f/s (above it this workload's typists outrun the transition throttle: more typists, SHARE or CONNS, to find the limit)", name, c.Rate)
		case c.AtLeast:
			fmt.Fprintf(w, "  %s: at least %.0f/s (the highest rate tried)", name, c.Rate)
		default:
			fmt.Fprintf(w, "  %s: %.0f/s", name, c.Rate)
		}
		switch {
		case c.Rate > 0 && c.Ratio > 0 && c.AtLeast:
			fmt.Fprintf(w, ", at least %.2f× Centrifugo's", c.Ratio)
		case c.Rate > 0 && c.Ratio > 0:
			fmt.Fprintf(w, ", %.2f× Centrifugo's", c.Ratio)
		}
		if c.Rate > 0 {
			fmt.Fprintln(w)
		}
	}
}

// outrunsThrottle: r is an Ellipsis rate-mode run whose typists outran
// the transition throttle at the protocol's default (ThrottleLoad).
func outrunsThrottle(r *Result) bool {
	t, ok := defaultThrottleLoad(r)
	return ok && t.Outruns()
}
