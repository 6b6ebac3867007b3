package loadgen

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/ellipsis-chat/ellipsis/tools/keystrokes"
	"github.com/ellipsis-chat/ellipsis/tools/typist"
)

// sleeper waits until a time, reusing one timer.
type sleeper struct{ t *time.Timer }

// until waits until at; false when ctx ended first.
func (s *sleeper) until(ctx context.Context, at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err() == nil
	}
	if s.t == nil {
		s.t = time.NewTimer(d)
	} else {
		s.t.Reset(d)
	}
	select {
	case <-s.t.C:
		return true
	case <-ctx.Done():
		s.t.Stop()
		return false
	}
}

// driveRate toggles c between typing and not typing at a fixed period, so
// that the typing clients together send opts.Rate state changes per
// second: client k of n starts at t0 + k/n of a period. While a burst lasts
// longer than the client refresh interval, refreshes go out as an SDK
// client would send them. A burst still on at end is left to
// [runner.endBursts].
func (r *runner) driveRate(ctx context.Context, c *client, k, n int, t0, end time.Time) {
	period := time.Duration(float64(n) / r.opts.Rate * float64(time.Second))
	next := t0.Add(time.Duration(int64(period) * int64(k) / int64(n)))
	var (
		s         sleeper
		typing    bool
		lastStart time.Time
	)
	for {
		due, what := next, kindStart
		if typing {
			what = kindStop
			if rf := lastStart.Add(r.timers.Refresh); rf.Before(due) {
				due, what = rf, kindRefresh
			}
		}
		if !due.Before(end) || !s.until(ctx, due) {
			break
		}
		if c.send(what) != nil {
			return
		}
		switch what {
		case kindStart:
			typing, lastStart = true, time.Now()
			next = next.Add(period)
		case kindRefresh:
			lastStart = time.Now()
		case kindStop:
			typing = false
			next = next.Add(period)
		}
	}
}

// Replay pacing, as in the demo (tools/demo): chat-sized messages of at
// most 40 text keys, a recorded pause after a sent message of at least
// 1.2 s and at most 4.5 s (above idle_stop, so long pauses show idle
// stops), 300 ms from the last key of a cut line to its synthetic Return.
const (
	replayMaxKeys   = 40
	replayMinPause  = 1200 * time.Millisecond
	replayMaxPause  = 4500 * time.Millisecond
	replaySendDelay = 300 * time.Millisecond
)

// driveReplay types c through recorded sessions: session c.idx modulo the
// number loaded, from a random message on, starting at a random time in the
// first spread, with each keystroke at its recorded time (divided by
// opts.Speed), through the SDK's timer rules (package typist), which decide
// when typing_start, refreshes and typing_stop go out. A draft still open
// at end is left to [runner.endBursts].
func (r *runner) driveReplay(ctx context.Context, c *client, rng *rand.Rand, t0, end time.Time) {
	tp, err := typist.New(r.timers, r.ttl)
	if err != nil { // checked in prepare
		r.st.fail("typist")
		return
	}
	p := &replayer{ctx: ctx, c: c, tp: tp, speed: r.opts.Speed, end: end}
	msgs := r.messages[c.idx%len(r.messages)]
	i := rng.IntN(len(msgs))
	spread := min(r.opts.ReplaySpread, end.Sub(t0))
	cursor := t0
	if spread > 0 {
		cursor = t0.Add(time.Duration(rng.Int64N(int64(spread))))
	}
	for {
		next, ok := p.message(msgs[i%len(msgs)], cursor)
		if !ok {
			return
		}
		i++
		cursor = next
	}
}

// replayer is one client's replay in driveReplay: its typist, the speed
// the recorded times are divided by, and the end of the run.
type replayer struct {
	ctx   context.Context
	c     *client
	tp    *typist.Typist
	speed float64
	end   time.Time
	s     sleeper
}

// message types m from cursor on (its keystrokes, then its send or its
// gap) and returns when the next message starts; false when the run ends
// first.
func (p *replayer) message(m keystrokes.Message, cursor time.Time) (time.Time, bool) {
	base := m.Start()
	for _, k := range m.Keys {
		if !p.step(cursor.Add(p.scale(k.Press-base))) || !p.emit(p.tp.Keystroke(time.Now())) {
			return time.Time{}, false
		}
	}
	endAt := cursor.Add(p.scale(m.EndAt - base))
	var pause time.Duration
	if m.End == keystrokes.EndGap {
		pause = min(m.GapAfter, replayMaxPause) // left alone: the idle stop shows
	} else {
		if m.End != keystrokes.EndSend {
			endAt = endAt.Add(p.scale(replaySendDelay))
		}
		if !p.step(endAt) || !p.emit(p.tp.MessageSent(time.Now())) {
			return time.Time{}, false
		}
		pause = max(min(m.GapAfter, replayMaxPause), replayMinPause)
	}
	next := endAt.Add(p.scale(pause))
	if !next.After(cursor) {
		next = cursor.Add(time.Millisecond)
	}
	return next, true
}

// scale divides a recorded duration by the replay speed.
func (p *replayer) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) / p.speed)
}

// emit sends the typist's actions; false when a send fails.
func (p *replayer) emit(acts []typist.Action) bool {
	for _, a := range acts {
		k := kindStop
		switch a {
		case typist.Start:
			k = kindStart
		case typist.Refresh:
			k = kindRefresh
		}
		if p.c.send(k) != nil {
			return false
		}
	}
	return true
}

// step waits until at, ticking the typist at its deadlines meanwhile;
// false when the run ends first.
func (p *replayer) step(at time.Time) bool {
	for {
		d, ok := p.tp.Deadline()
		if !ok || !d.Before(at) {
			break
		}
		if !d.Before(p.end) || !p.s.until(p.ctx, d) {
			return false
		}
		if !p.emit(p.tp.Tick(time.Now())) {
			return false
		}
	}
	return at.Before(p.end) && p.s.until(p.ctx, at)
}
