package loadgen

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Peers is the peer benchmark's outcome (tools/loadgen/peers.sh, `make
// bench-peers`): the same workload run against Ellipsis and against
// Centrifugo back to back, and the ratios Ellipsis / Centrifugo. It
// marshals to the JSON the benchmark writes.
type Peers struct {
	// Load names the load (L1, L2, L3 or custom).
	Load       string  `json:"load"`
	Ellipsis   *Result `json:"ellipsis"`
	Centrifugo *Result `json:"centrifugo"`
	// Ratios are Ellipsis / Centrifugo: below 1 is Ellipsis ahead. Zero
	// when either side has no figure.
	Ratios struct {
		P50               float64 `json:"p50"`
		P99               float64 `json:"p99"`
		P999              float64 `json:"p99_9"`
		CPUPerStateChange float64 `json:"cpu_per_state_change"`
	} `json:"ratios"`
}

// ComparePeers pairs an Ellipsis and a Centrifugo run of one load.
func ComparePeers(load string, ellipsis, centrifugo *Result) *Peers {
	p := &Peers{Load: load, Ellipsis: ellipsis, Centrifugo: centrifugo}
	p.Ratios.P50 = ratio(ellipsis.Latency.P50, centrifugo.Latency.P50)
	p.Ratios.P99 = ratio(ellipsis.Latency.P99, centrifugo.Latency.P99)
	p.Ratios.P999 = ratio(ellipsis.Latency.P999, centrifugo.Latency.P999)
	p.Ratios.CPUPerStateChange = ratio(cpuPerChange(ellipsis), cpuPerChange(centrifugo))
	return p
}

func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return a / b
}

// cpuPerChange is the server processes' CPU per state change (µs), 0
// when not measured.
func cpuPerChange(r *Result) float64 {
	if r.ServerCPU == nil {
		return 0
	}
	return r.ServerCPU.CPUPerStateChangeUs
}

// WriteTable prints the comparison: one row per system and one of ratios.
func (p *Peers) WriteTable(w io.Writer) {
	e, c := p.Ellipsis, p.Centrifugo
	fmt.Fprintf(w, "\nPeer benchmark %s: %d connections, %d rooms (%.1f per room), %d typing, %.0f state changes/s offered, %.0fs per system; %d CPUs, loadavg %s before Ellipsis, %s before Centrifugo\n",
		p.Load, e.Conns, e.Rooms, e.MembersPerRoom, e.TypingConns, e.Rate, e.DurationSeconds, e.Machine.CPUs, e.Machine.LoadBefore, c.Machine.LoadBefore)
	fmt.Fprintln(w, "latency: sender's write -> receiver's read of state changes (ms); delivered / lost: state-change deliveries to the room's other members; echoes: a sender's own events (not counted); CPU: the server processes, user + system, per state change sent; RSS/conn: growth of the process holding the connections (gateway; centrifugo) from before connecting to the end, per connection")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tconnected\tstate changes/s\tp50\tp99\tp99.9\tmax\tdelivered\tlost\techoes\terrors\tserver CPU s\tCPU/change µs\tRSS/conn KiB\t")
	row := func(name string, r *Result) {
		var cpuS, perChange string = "-", "-"
		if r.ServerCPU != nil {
			cpuS = fmt.Sprintf("%.2f", r.ServerCPU.TotalSeconds)
			perChange = fmt.Sprintf("%.0f", r.ServerCPU.CPUPerStateChangeUs)
		}
		var errs int64
		for k, v := range r.Errors {
			if k != "missing_delivery" { // that is "lost"
				errs += v
			}
		}
		rss := "-"
		if r.RSS != nil && r.RSS.PerConnBytes > 0 {
			rss = fmt.Sprintf("%.1f", r.RSS.PerConnBytes/1024)
		}
		l := r.Latency
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", name, r.Connected, r.StateChangesPerSec,
			l.P50, l.P99, l.P999, l.Max, r.Delivered.MatchedState, r.Delivered.LostState, r.Delivered.Echoes, errs, cpuS, perChange, rss)
	}
	row("ellipsis", e)
	row("centrifugo", c)
	x := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", v)
	}
	fmt.Fprintf(tw, "ellipsis/centrifugo\t\t\t%s\t%s\t%s\t\t\t\t\t\t\t%s\t\t\n", x(p.Ratios.P50), x(p.Ratios.P99), x(p.Ratios.P999), x(p.Ratios.CPUPerStateChange))
	tw.Flush()
	for _, r := range []*Result{e, c} {
		if sc := r.ServerCPU; sc != nil {
			fmt.Fprintf(w, "%s server CPU:", r.System)
			for i := range sc.PIDs {
				fmt.Fprintf(w, " %s %.2fs", sc.Names[i], sc.Seconds[i])
			}
			fmt.Fprintf(w, " over %.1fs\n", sc.WindowSeconds)
		}
		if len(r.Errors) > 0 {
			fmt.Fprintf(w, "%s errors:", r.System)
			for _, k := range sortedKeys(r.Errors) {
				fmt.Fprintf(w, " %s %d", k, r.Errors[k])
			}
			fmt.Fprintln(w)
		}
	}
}
