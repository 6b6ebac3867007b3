package loadgen

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// writeCases prints the cases' sections of the summary table.
func (res *Result) writeCases(w io.Writer) {
	if res.FramesPerMemberPerSec > 0 || res.ServerCPUPerSec > 0 {
		fmt.Fprintf(w, "\n  per member    %.2f frames/s read while typing was driven", res.FramesPerMemberPerSec)
		if res.ServerCPUPerSec > 0 {
			fmt.Fprintf(w, "; server cpu %.3f s/s", res.ServerCPUPerSec)
		}
		fmt.Fprintln(w)
	}
	if s := res.State; s != nil {
		writeState(w, "state", s)
	}
	if s := res.Stall; s != nil {
		fmt.Fprintf(w, "\n  stall         %d connections stopped reading at %.0fs for %.0fs (SO_RCVBUF %d), %d healthy\n",
			s.Stalled, s.AtSeconds, s.ForSeconds, s.RcvBuf, s.Healthy)
		fmt.Fprintf(w, "  closed        %d stalled, %d healthy; %d rejoined\n", s.ClosedStalled, s.ClosedHealthy, s.Rejoined)
		fmt.Fprintf(w, "  exact final   %d of %d stalled, %d of %d healthy\n", s.ExactStalled, s.Stalled, s.ExactHealthy, s.Healthy)
		fmt.Fprintf(w, "  healthy readers' state-change latency by when the change was sent (ms):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  \tcount\tp50\tp99\tmax\t")
		for _, row := range []struct {
			name string
			l    Latency
		}{{"before the stall", s.HealthyBefore}, {"during", s.HealthyDuring}, {"after", s.HealthyAfter}} {
			fmt.Fprintf(tw, "  %s\t%d\t%.3f\t%.3f\t%.3f\t\n", row.name, row.l.Count, row.l.P50, row.l.P99, row.l.Max)
		}
		tw.Flush()
	}
	if x := res.Watch; x != nil {
		fmt.Fprintf(w, "\n  watch         %d watchers of %d rooms each from %.0fs: %d rooms accepted, refused %s\n",
			x.Watchers, x.WatchRooms, x.AtSeconds, x.Accepted, formatCounts(x.Refused))
		fmt.Fprintf(w, "  summaries     %d read, %.1f per watcher per second\n", x.Summaries, x.SummariesPerWatcherPerSec)
		if x.ServerCPUBefore > 0 || x.ServerCPUAfter > 0 {
			fmt.Fprintf(w, "  server cpu    %.3f s/s before the watchers, %.3f s/s with them\n", x.ServerCPUBefore, x.ServerCPUAfter)
		}
		writeState(w, "watch state", &x.State)
	}
}

func writeState(w io.Writer, name string, s *StateResult) {
	d := s.Delay
	if s.Sampled == 0 {
		fmt.Fprintf(w, "\n  %-13s exact final state %d of %d\n", name, s.ExactFinal, s.Tracked)
		return
	}
	fmt.Fprintf(w, "\n  %-13s delay to the state (%d sampled): %d of %d changes shown, p50 %.1f p99 %.1f max %.1f ms; %d superseded, %d never shown; exact final state %d of %d",
		name, s.Sampled, d.Count, s.Expected, d.P50, d.P99, d.Max, s.Superseded, s.NeverShown, s.ExactFinal, s.Tracked)
	if s.PartialSnapshots > 0 {
		fmt.Fprintf(w, "; %d partial lists", s.PartialSnapshots)
	}
	fmt.Fprintln(w)
}

func formatCounts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// SideBySide is the rows of a table comparing runs of one case (column per
// run): the figures every run has, then those of the case (state, stall,
// watch) when any run has them. Cells are formatted; "-" where a run lacks
// the figure.
func SideBySide(names []string, rs []*Result) [][]string {
	rows := [][]string{append([]string{""}, names...)}
	add := func(label string, cell func(*Result) (string, bool)) {
		row := []string{label}
		any := false
		for _, r := range rs {
			v, ok := cell(r)
			if !ok {
				v = "-"
			}
			any = any || ok
			row = append(row, v)
		}
		if any {
			rows = append(rows, row)
		}
	}
	f := func(format string, v float64) string { return fmt.Sprintf(format, v) }
	add("connections", func(r *Result) (string, bool) { return fmt.Sprintf("%d (%d typing)", r.Connected, r.TypingConns), true })
	add("state changes/s sent", func(r *Result) (string, bool) { return f("%.1f", r.StateChangesPerSec), true })
	add("frames per member per s", func(r *Result) (string, bool) { return f("%.2f", r.FramesPerMemberPerSec), true })
	add("server cpu s/s", func(r *Result) (string, bool) { return f("%.3f", r.ServerCPUPerSec), r.ServerCPUPerSec > 0 })
	add("loadgen cpu s", func(r *Result) (string, bool) { return f("%.1f", r.Machine.LoadgenCPU), true })
	add("loadavg before / after", func(r *Result) (string, bool) {
		return r.Machine.LoadBefore + " / " + r.Machine.LoadAfter, true
	})
	state := func(r *Result) *StateResult {
		if r.State != nil {
			return r.State
		}
		if r.Watch != nil {
			return &r.Watch.State
		}
		return nil
	}
	add("delay to state p50 / p99 / max ms", func(r *Result) (string, bool) {
		s := state(r)
		if s == nil || s.Delay.Count == 0 {
			return "", false
		}
		return fmt.Sprintf("%.1f / %.1f / %.1f", s.Delay.P50, s.Delay.P99, s.Delay.Max), true
	})
	add("changes shown / superseded / never shown", func(r *Result) (string, bool) {
		s := state(r)
		if s == nil || s.Expected == 0 {
			return "", false
		}
		return fmt.Sprintf("%d / %d / %d of %d", s.Delay.Count, s.Superseded, s.NeverShown, s.Expected), true
	})
	add("exact final state", func(r *Result) (string, bool) {
		s := state(r)
		if s == nil {
			return "", false
		}
		return fmt.Sprintf("%d of %d", s.ExactFinal, s.Tracked), true
	})
	add("event latency p50 / p99 ms", func(r *Result) (string, bool) {
		if r.Latency.Count == 0 {
			return "", false
		}
		return fmt.Sprintf("%.3f / %.3f", r.Latency.P50, r.Latency.P99), true
	})
	add("stalled: closed / exact final", func(r *Result) (string, bool) {
		if r.Stall == nil {
			return "", false
		}
		return fmt.Sprintf("%d of %d / %d of %d", r.Stall.ClosedStalled, r.Stall.Stalled, r.Stall.ExactStalled, r.Stall.Stalled), true
	})
	add("rejoined after a close", func(r *Result) (string, bool) {
		if r.Stall == nil {
			return "", false
		}
		return fmt.Sprintf("%d", r.Stall.Rejoined), true
	})
	add("healthy: closed / exact final", func(r *Result) (string, bool) {
		if r.Stall == nil {
			return "", false
		}
		return fmt.Sprintf("%d of %d / %d of %d", r.Stall.ClosedHealthy, r.Stall.Healthy, r.Stall.ExactHealthy, r.Stall.Healthy), true
	})
	stallRow := func(label string, pick func(*StallResult) Latency) {
		add(label, func(r *Result) (string, bool) {
			if r.Stall == nil {
				return "", false
			}
			l := pick(r.Stall)
			return fmt.Sprintf("%.3f / %.3f (%d)", l.P50, l.P99, l.Count), true
		})
	}
	stallRow("healthy p50 / p99 ms, before the stall", func(s *StallResult) Latency { return s.HealthyBefore })
	stallRow("healthy p50 / p99 ms, during", func(s *StallResult) Latency { return s.HealthyDuring })
	stallRow("healthy p50 / p99 ms, after", func(s *StallResult) Latency { return s.HealthyAfter })
	add("watch: rooms accepted / refused", func(r *Result) (string, bool) {
		if r.Watch == nil {
			return "", false
		}
		return fmt.Sprintf("%d / %s", r.Watch.Accepted, formatCounts(r.Watch.Refused)), true
	})
	add("summaries per watcher per s", func(r *Result) (string, bool) {
		if r.Watch == nil {
			return "", false
		}
		return f("%.1f", r.Watch.SummariesPerWatcherPerSec), true
	})
	add("server cpu s/s before / with watchers", func(r *Result) (string, bool) {
		if r.Watch == nil {
			return "", false
		}
		return fmt.Sprintf("%.3f / %.3f", r.Watch.ServerCPUBefore, r.Watch.ServerCPUAfter), true
	})
	add("errors", func(r *Result) (string, bool) { return formatCounts(r.Errors), true })
	return rows
}

// WriteSideBySide prints SideBySide as an aligned table.
func WriteSideBySide(w io.Writer, names []string, rs []*Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range SideBySide(names, rs) {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
}
