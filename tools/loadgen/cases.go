package loadgen

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The cases of issue 25 (big room, stalled readers, watchers) share the
// run: they only choose roles for the connections (client.go), start
// their timers with the run, and add their figures to the Result.

// checkpoint is the frames read and the CPU time of Options.CPUPIDs at a
// moment of the run.
type checkpoint struct {
	at        time.Time
	frames    int64
	summaries int64           // read by the watchers
	cpu       []time.Duration // nil when unread (no CPUPIDs, or a process gone)
}

func (r *runner) checkpoint() checkpoint {
	cp := checkpoint{at: time.Now(), frames: r.st.c.framesIn.Load(), summaries: r.watch.summaries.Load()}
	if len(r.opts.CPUPIDs) > 0 {
		cp.cpu, _ = readCPUs(r.opts.CPUPIDs)
	}
	return cp
}

// cpuPerSecond is the CPU seconds per second of Options.CPUPIDs between
// two checkpoints (0 when either is unread).
func cpuPerSecond(a, b checkpoint) float64 {
	if a.cpu == nil || b.cpu == nil || !b.at.After(a.at) {
		return 0
	}
	var d time.Duration
	for i := range a.cpu {
		d += b.cpu[i] - a.cpu[i]
	}
	return d.Seconds() / b.at.Sub(a.at).Seconds()
}

// assignCases gives the connected clients their roles once connecting is
// over: the rooms' typists and, with StateSample, the sampled members
// (every k-th listener, each with a view, matching events too: their
// event latency and deliveries) and the count-only others.
func (r *runner) assignCases(connected []*client) {
	o := &r.opts
	r.roomTypists = make([][]*client, o.Rooms)
	var listeners []*client
	for _, c := range connected {
		if c.typing {
			r.roomTypists[c.roomIdx] = append(r.roomTypists[c.roomIdx], c)
		} else {
			listeners = append(listeners, c)
		}
	}
	if o.StateSample <= 0 {
		return
	}
	for _, c := range connected {
		c.countOnly = true
	}
	n := min(o.StateSample, len(listeners))
	for k := 0; k < n; k++ {
		c := listeners[k*len(listeners)/n]
		c.countOnly, c.sample, c.matchEvents = false, true, true
		c.view, c.tracked, c.stateOut = newView(), []int{c.roomIdx}, r.state
	}
}

// connectWatchers dials the watchers and starts their readers; a watcher
// that cannot connect is counted as an error, not fatal.
func (r *runner) connectWatchers(ctx context.Context) error {
	for _, w := range r.watchers {
		if err := w.dial(ctx); err != nil {
			r.st.fail("watch:dial")
			r.log.Debug("watcher failed", zap.String("user", w.user), zap.Error(err))
			w.ws = nil
			continue
		}
		go w.readLoop()
	}
	return ctx.Err()
}

// startCases runs at the start of the drive: the first checkpoint, the
// stall window, the watchers' start.
func (r *runner) startCases(ctx context.Context, start time.Time) {
	o := &r.opts
	r.driveStart = r.checkpoint()
	if o.StallShare > 0 {
		from := int64(start.Add(o.StallAt).Sub(r.clock.base))
		r.stall.set(from, from+int64(o.StallFor))
	}
	if len(r.watchers) == 0 {
		return
	}
	go func() {
		var s sleeper
		if !s.until(ctx, start.Add(o.WatchAt)) {
			return
		}
		r.setWatchMark(r.checkpoint())
		var wg sync.WaitGroup
		for _, w := range r.watchers {
			if w.ws == nil {
				continue
			}
			wg.Add(1)
			go func(w *watcher) {
				defer wg.Done()
				w.startWatching()
			}(w)
		}
		wg.Wait()
	}()
}

func (r *runner) setWatchMark(cp checkpoint) {
	r.caseMu.Lock()
	r.watchMark = cp
	r.caseMu.Unlock()
}

// allExact reports whether every tracked connection (members and
// watchers) shows the exact final state: what the settle waits for.
func (r *runner) allExact() bool {
	for _, c := range r.clients {
		if c.view != nil && c.ws != nil && !c.exact() {
			return false
		}
	}
	for _, w := range r.watchers {
		if w.ws != nil && w.from.Load() != 0 && !w.exact() {
			return false
		}
	}
	return true
}

// fillCases adds the cases' figures to res once reading is over.
func (r *runner) fillCases(res *Result, connected []*client) {
	o := &r.opts
	if res.Connected > 0 && o.Duration > 0 {
		res.FramesPerMemberPerSec = float64(r.driveEnd.frames-r.driveStart.frames) / float64(res.Connected) / o.Duration.Seconds()
	}
	res.ServerCPUPerSec = cpuPerSecond(r.driveStart, r.driveEnd)
	if o.StateSample > 0 {
		sr := r.state.result()
		sr.ExactFinal, sr.Tracked = exactCount(connected, nil)
		sr.Sampled = sr.Tracked
		sr.setExpected(connected)
		res.State = &sr
	}
	if o.StallShare > 0 {
		sr := r.state.result()
		sr.ExactFinal, sr.Tracked = exactCount(connected, nil)
		res.State = &sr
		s := &StallResult{AtSeconds: o.StallAt.Seconds(), ForSeconds: o.StallFor.Seconds(), RcvBuf: o.StallRcvBuf}
		s.ExactStalled, s.Stalled = exactCount(connected, func(c *client) bool { return c.stall })
		s.ExactHealthy, s.Healthy = exactCount(connected, func(c *client) bool { return !c.stall })
		s.ClosedStalled, s.ClosedHealthy, s.Rejoined = r.stall.closedStalled.Load(), r.stall.closedHealthy.Load(), r.stall.rejoined.Load()
		s.HealthyBefore, s.HealthyDuring, s.HealthyAfter = r.stall.latencies()
		res.Stall = s
	}
	if o.Watchers > 0 {
		res.Watch = r.watchResult()
	}
}

// watchResult sums up the watchers.
func (r *runner) watchResult() *WatchResult {
	o := &r.opts
	ws := r.watch
	wr := &WatchResult{Watchers: o.Watchers, WatchRooms: o.WatchRooms, AtSeconds: o.WatchAt.Seconds(),
		Accepted: ws.accepted.Load(), Summaries: ws.summaries.Load(), Refused: map[string]int64{}}
	ws.mu.Lock()
	for k, v := range ws.refused {
		wr.Refused[k] = v
	}
	ws.mu.Unlock()
	r.caseMu.Lock()
	mark := r.watchMark
	r.caseMu.Unlock()
	var watching float64 // watcher-seconds of watching
	var cs []*client
	for _, w := range r.watchers {
		if from := w.from.Load(); w.ws != nil && from != 0 {
			end := int64(r.driveEnd.at.Sub(r.clock.base))
			watching += time.Duration(end - from).Seconds()
			cs = append(cs, w.client)
		}
	}
	if watching > 0 {
		wr.SummariesPerWatcherPerSec = float64(r.driveEnd.summaries) / watching
	}
	if !mark.at.IsZero() {
		wr.ServerCPUBefore = cpuPerSecond(r.driveStart, mark)
		wr.ServerCPUAfter = cpuPerSecond(mark, r.driveEnd)
	}
	wr.State = ws.state.result()
	wr.State.ExactFinal, wr.State.Tracked = exactCount(cs, nil)
	wr.State.Sampled = wr.State.Tracked
	wr.State.setExpected(cs)
	return wr
}

// result summarises the delay to the state (Tracked, ExactFinal, Sampled
// are the caller's).
func (s *stateStats) result() StateResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StateResult{Delay: summarize(s.delay), Superseded: s.superseded, PartialSnapshots: s.partial}
}
