package loadgen

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// progress prints one line a second.
type progress struct {
	r   *runner
	out io.Writer

	mu       sync.Mutex
	phase    string
	runStart time.Time
	t0       time.Time
	// previous totals, for per-second rates
	prevSent, prevFrames, prevMatched int64
}

func newProgress(r *runner, out io.Writer) *progress {
	return &progress{r: r, out: out, phase: "connect", t0: time.Now()}
}

func (p *progress) setPhase(ph string) {
	p.mu.Lock()
	p.phase = ph
	p.mu.Unlock()
}

func (p *progress) startRun(t time.Time) {
	p.mu.Lock()
	p.runStart = t
	p.mu.Unlock()
}

// loop prints a line every second until stop is closed. It also collects
// the shards (so the totals grow during the run) and samples the RSS.
func (p *progress) loop(stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			p.line(now.Sub(last))
			last = now
		}
	}
}

func (p *progress) line(dt time.Duration) {
	r := p.r
	iv := r.st.collect()
	var rss string
	if r.opts.RSSPID > 0 {
		if v, err := readRSS(r.opts.RSSPID); err == nil {
			if v > r.rssPeak.Load() {
				r.rssPeak.Store(v)
			}
			rss = fmt.Sprintf(" | rss %.1f MiB", float64(v)/(1<<20))
		}
	}
	if p.out == nil {
		return
	}
	c := &r.st.c
	p.mu.Lock()
	phase, runStart := p.phase, p.runStart
	p.mu.Unlock()
	sent := c.sentStart.Load() + c.sentRefresh.Load() + c.sentStop.Load()
	frames := c.framesIn.Load()
	matched := c.matchedState.Load() + c.matchedRefr.Load()
	secs := dt.Seconds()
	perSec := func(now int64, prev *int64) float64 {
		v := float64(now-*prev) / secs
		*prev = now
		return v
	}
	sentRate, frameRate, evRate := perSec(sent, &p.prevSent), perSec(frames, &p.prevFrames), perSec(matched, &p.prevMatched)
	var at string
	if phase == "connect" || runStart.IsZero() {
		at = fmt.Sprintf("[connect %4.0fs]", time.Since(p.t0).Seconds())
	} else {
		at = fmt.Sprintf("[%-6s %4.0fs]", phase, time.Since(runStart).Seconds())
	}
	lat := "e2e -"
	if iv.TotalCount() > 0 {
		l := summarize(iv)
		lat = fmt.Sprintf("e2e p50 %.3f p99 %.3f max %.3f ms", l.P50, l.P99, l.Max)
	}
	fmt.Fprintf(p.out, "%s conns %d/%d | sent %.0f/s | delivered %.0f frames/s (%.0f events/s) | %s | errors %d%s\n",
		at, c.open.Load(), r.opts.Conns, sentRate, frameRate, evRate, lat, r.st.errorTotal()+c.unmatched.Load(), rss)
}

// WriteTable prints the summary of a run.
func (res *Result) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nEllipsis load generator: system %s, mode %s, run %s\n", res.System, res.Mode, res.RunID)
	target := strings.Join(res.URLs, ", ")
	if res.Stack != "" {
		target += " (in-process stack: " + res.Stack + ")"
	}
	fmt.Fprintf(w, "  target        %s\n", target)
	fmt.Fprintf(w, "  connections   %d of %d open and joined (%d typing) over %d rooms, %.1f per room; connect took %.1fs\n",
		res.Connected, res.Conns, res.TypingConns, res.Rooms, res.MembersPerRoom, res.ConnectSeconds)
	switch res.Mode {
	case ModeRate:
		fmt.Fprintf(w, "  load          %.0f state changes/s offered for %.0fs (then %.1fs settle)\n", res.Rate, res.DurationSeconds, res.SettleSeconds)
	case ModeReplay:
		fmt.Fprintf(w, "  load          real keystrokes (%s) at speed %g through the SDK timers, %.0fs (then %.1fs settle)\n", res.Keystrokes, res.Speed, res.DurationSeconds, res.SettleSeconds)
	case ModeIdle:
		fmt.Fprintf(w, "  load          idle (joined, nothing sent) for %.0fs\n", res.DurationSeconds)
	}
	fmt.Fprintf(w, "  machine       %d CPUs, %s, loadavg %s before, %s after; loadgen CPU %.1fs; nofile %d\n",
		res.Machine.CPUs, res.Machine.GoVersion, res.Machine.LoadBefore, res.Machine.LoadAfter, res.Machine.LoadgenCPU, res.Machine.NoFileLimit)
	d := res.Delivered
	if res.Mode != ModeIdle {
		fmt.Fprintf(w, "\n  sent          %d starts, %d refreshes, %d stops: %.1f state changes/s\n",
			res.Sent.Starts, res.Sent.Refreshes, res.Sent.Stops, res.StateChangesPerSec)
		if t, ok := defaultThrottleLoad(res); ok && t.Outruns() {
			fmt.Fprintf(w, "  throttle      each typist sent %.1f state changes, more than the transition throttle lets through in %.0fs (%.1f: a burst of %d, then %d per %s; docs/protocol.md, \"Throttle\"): the surplus is coalesced by contract, so missing deliveries and the tail here are the workload's; add typists (SHARE, CONNS) for this rate\n",
				t.PerTypist, res.DurationSeconds, t.Through, throttleBurst, throttleTokensPerWindow, defaultThrottle())
		}
		fmt.Fprintf(w, "  delivered     %d frames read, %.0f frames/s; state changes %d of %d expected (missing %d), refreshes %d of %d; %.0f events/s\n",
			d.Frames, res.FramesPerSec, d.MatchedState, d.ExpectedState, d.LostState, d.MatchedRefresh, d.ExpectedRefresh, d.EventsPerSecond)
		if d.Echoes+d.Replies+d.Pings > 0 {
			fmt.Fprintf(w, "  not counted   %d echoes (a sender's own events), %d command replies, %d pings answered\n", d.Echoes, d.Replies, d.Pings)
		}
		if d.ExpiredStops+d.OtherStops+d.SnapshotsPushed+d.Unmatched > 0 {
			fmt.Fprintf(w, "  also          %d expired stops, %d other stops, %d snapshots pushed, %d unmatched events\n",
				d.ExpiredStops, d.OtherStops, d.SnapshotsPushed, d.Unmatched)
		}
		fmt.Fprintf(w, "\n  end-to-end latency, sender's write -> receiver's read (ms):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  \tcount\tp50\tp90\tp99\tp99.9\tmax\tmean\t")
		row := func(name string, l Latency) {
			fmt.Fprintf(tw, "  %s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", name, l.Count, l.P50, l.P90, l.P99, l.P999, l.Max, l.Mean)
		}
		row("state changes", res.Latency)
		row("refreshes", res.Refresh)
		tw.Flush()
	}
	if p := res.RSS; p != nil {
		fmt.Fprintf(w, "\n  pid %d rss     before %.1f MiB, after %.1f MiB, peak %.1f MiB: %.2f KiB per connection\n",
			p.PID, float64(p.BeforeBytes)/(1<<20), float64(p.AfterBytes)/(1<<20), float64(p.PeakBytes)/(1<<20), p.PerConnBytes/1024)
		fmt.Fprintf(w, "  pid %d cpu     %.2fs over the run", p.PID, p.CPUSeconds)
		if p.CPUPerStateChangeUs > 0 {
			fmt.Fprintf(w, ": %.0f µs per state change, %.1f µs per frame delivered", p.CPUPerStateChangeUs, p.CPUPerFrameUs)
		}
		fmt.Fprintln(w)
	}
	if sc := res.ServerCPU; sc != nil {
		fmt.Fprintf(w, "\n  server cpu    %.2fs over %.1fs", sc.TotalSeconds, sc.WindowSeconds)
		for i, pid := range sc.PIDs {
			fmt.Fprintf(w, "; %s (%d) %.2fs", sc.Names[i], pid, sc.Seconds[i])
		}
		fmt.Fprintf(w, "\n                %.0f µs per state change, %.1f µs per frame delivered\n", sc.CPUPerStateChangeUs, sc.CPUPerFrameUs)
	}
	res.writeCases(w)
	if len(res.Errors) == 0 {
		fmt.Fprintf(w, "\n  errors        none\n")
		return
	}
	fmt.Fprintf(w, "\n  errors by kind:\n")
	for _, k := range sortedKeys(res.Errors) {
		fmt.Fprintf(w, "    %-28s %d\n", k, res.Errors[k])
	}
}
