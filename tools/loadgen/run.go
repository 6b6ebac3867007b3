package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"
)

// run connects every client, drives typing for Duration, settles, fills
// res, and closes everything.
func (r *runner) run(parent context.Context, res *Result) error {
	o := &r.opts
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	r.clock = newClock()
	rssBefore, err := r.rssBeforeConnecting()
	if err != nil {
		return err
	}
	prog := startProgress(r, o.Progress) // from the first dial on
	defer prog.stop()
	connected, err := r.connect(ctx, prog.progress, res)
	defer r.closeAll(connected)
	if err != nil {
		return err
	}
	if o.Warmup > 0 {
		prog.setPhase("warmup")
		select {
		case <-time.After(o.Warmup):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	mark, err := r.markCPU()
	if err != nil {
		return err
	}
	r.drive(ctx, prog.progress, connected)
	r.driveEnd = r.checkpoint()
	prog.setPhase("settle")
	settled := r.settle(ctx)
	srvAfter, srvErr := readCPUs(o.CPUPIDs)
	window := time.Since(mark.at)
	if o.BeforeClose != nil {
		o.BeforeClose()
	}
	r.closing.Store(true)
	prog.setPhase("done")
	prog.stop()

	r.fillResult(res, settled)
	r.fillCases(res, connected)
	if err := r.fillServerCPU(res, mark, srvAfter, srvErr, window); err != nil {
		return err
	}
	if err := r.fillRSS(res, rssBefore, mark); err != nil {
		return err
	}
	return parent.Err()
}

// rssBeforeConnecting reads Options.RSSPID's resident memory (0 without
// it) and starts the peak there.
func (r *runner) rssBeforeConnecting() (int64, error) {
	if r.opts.RSSPID <= 0 {
		return 0, nil
	}
	v, err := readRSS(r.opts.RSSPID)
	if err != nil {
		return 0, fmt.Errorf("loadgen: -rss-pid: %w", err)
	}
	r.rssPeak.Store(v)
	return v, nil
}

// progressRun is the progress loop's goroutine; stop ends it and waits for
// it, once or more.
type progressRun struct {
	*progress
	once sync.Once
	quit chan struct{}
	done chan struct{}
}

func startProgress(r *runner, out io.Writer) *progressRun {
	p := &progressRun{progress: newProgress(r, out), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.loop(p.quit)
	}()
	return p
}

func (p *progressRun) stop() {
	p.once.Do(func() { close(p.quit) })
	<-p.done
}

// connect dials and joins every client, DialConcurrency at a time, counts
// each joined client's receivers per send (the room's other joined
// members) and starts the readers. It returns the joined clients, with an
// error when ctx ended or none joined.
func (r *runner) connect(ctx context.Context, prog *progress, res *Result) ([]*client, error) {
	t0 := time.Now()
	prog.setPhase("connect")
	connected := r.connectAll(ctx)
	res.ConnectSeconds = time.Since(t0).Seconds()
	res.Connected = int64(len(connected))
	if ctx.Err() != nil {
		return connected, ctx.Err()
	}
	if len(connected) == 0 {
		return connected, fmt.Errorf("loadgen: no connection could be opened (errors: %v)", r.st.errors())
	}
	r.assignCases(connected)
	members := make([]int64, r.opts.Rooms) // receivers matching events
	for _, c := range connected {
		if c.matchEvents {
			members[c.roomIdx]++
		}
	}
	for _, c := range connected {
		c.others = members[c.roomIdx]
		if c.matchEvents {
			c.others--
		}
	}
	res.MembersPerRoom = float64(len(connected)) / float64(r.opts.Rooms)
	for _, c := range connected {
		go c.readLoop()
	}
	if err := r.connectWatchers(ctx); err != nil {
		return connected, err
	}
	return connected, nil
}

// drive runs the typing clients' drivers (rate or replay) for Duration
// and returns when all are done; in idle mode it waits Duration.
func (r *runner) drive(ctx context.Context, prog *progress, connected []*client) {
	o := &r.opts
	prog.setPhase("run")
	start := time.Now()
	end := start.Add(o.Duration)
	prog.startRun(start)
	r.startCases(ctx, start)
	if o.Mode == ModeIdle {
		var s sleeper
		s.until(ctx, end)
		return
	}
	typers := 0
	for _, c := range connected {
		if c.typing {
			typers++
		}
	}
	var wg sync.WaitGroup
	k := 0
	for _, c := range connected {
		if !c.typing {
			continue
		}
		wg.Add(1)
		switch o.Mode {
		case ModeRate:
			go func(c *client, k int) {
				defer wg.Done()
				r.driveRate(ctx, c, k, typers, start, end)
			}(c, k)
		case ModeReplay:
			rng := rand.New(rand.NewPCG(o.Seed, uint64(c.idx)))
			go func(c *client) {
				defer wg.Done()
				r.driveReplay(ctx, c, rng, start, end)
			}(c)
		}
		k++
	}
	wg.Wait()
}

// settle keeps reading after the last send: at least Settle, then until
// every expected delivery arrived or nothing was read for settleQuiet, and
// at most SettleMax. It returns how long it waited.
func (r *runner) settle(ctx context.Context) time.Duration {
	const settleQuiet, poll = 500 * time.Millisecond, 50 * time.Millisecond
	o := &r.opts
	c := &r.st.c
	start := time.Now()
	minEnd, maxEnd := start.Add(o.Settle), start.Add(max(o.Settle, o.SettleMax))
	last, lastChange := c.framesIn.Load(), start
	var s sleeper
	for s.until(ctx, time.Now().Add(poll)) {
		now := time.Now()
		if f := c.framesIn.Load(); f != last {
			last, lastChange = f, now
		}
		if !now.Before(maxEnd) {
			break
		}
		if now.Before(minEnd) {
			continue
		}
		complete := c.matchedState.Load() >= c.expectState.Load() && c.matchedRefr.Load() >= c.expectRefresh.Load() && r.allExact()
		if complete || now.Sub(lastChange) >= settleQuiet {
			break
		}
	}
	return time.Since(start)
}

// connectAll dials and joins every client, DialConcurrency at a time,
// and returns those that joined (in index order).
func (r *runner) connectAll(ctx context.Context) []*client {
	o := &r.opts
	jobs := make(chan *client) // unbuffered: a dialer takes the next client when free
	var wg sync.WaitGroup
	ok := make([]bool, len(r.clients))
	for w := 0; w < min(o.DialConcurrency, len(r.clients)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range jobs {
				if err := c.dial(ctx); err != nil {
					var ke *kindError
					if errors.As(err, &ke) {
						r.st.fail(ke.kind)
					} else {
						r.st.fail("dial:other")
					}
					r.log.Debug("connection failed", zap.String("user", c.user), zap.Error(err))
					continue
				}
				ok[c.idx] = true
				r.st.c.connected.Add(1)
				r.st.c.open.Add(1)
			}
		}()
	}
feed:
	for _, c := range r.clients {
		select {
		case jobs <- c:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	var out []*client
	for i, c := range r.clients {
		if ok[i] {
			out = append(out, c)
		}
	}
	return out
}

// closeAll stops the bursts still on, closes every connection (normal
// closure) and waits for the readers, bounded.
func (r *runner) closeAll(cs []*client) {
	r.closing.Store(true)
	for _, w := range r.watchers {
		if w.ws != nil {
			cs = append(cs, w.client)
		}
	}
	sem := make(chan struct{}, 256) // closes in flight; full: wait
	var wg sync.WaitGroup
	for _, c := range cs {
		sem <- struct{}{}
		wg.Add(1)
		go func(c *client) {
			defer func() { <-sem; wg.Done() }()
			c.endBurst()
			c.close()
		}(c)
	}
	wg.Wait()
	deadline := time.After(5 * time.Second)
	for _, c := range cs {
		select {
		case <-c.readerDone:
		case <-deadline:
			return
		}
	}
}
