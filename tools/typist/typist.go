// Package typist is the seed design's client timer rules as a deterministic
// state machine: it decides when a chat client sends typing_start and
// typing_stop. It never sleeps and never reads a clock: the caller passes
// every time in, so a test can script an exact timeline and a replay can run
// it at any speed.
//
//	first keystroke              → typing_start           (Start)
//	Refresh after the last start,
//	while still typing           → typing_start again     (Refresh)
//	IdleStop without a keystroke → typing_stop            (StopIdle)
//	message sent                 → typing_stop at once    (StopSent)
//
// "Still typing" means the idle stop has not happened: a keystroke came less
// than IdleStop ago. The refresh is due by time, not only on the next
// keystroke, as in the JS client (clients/js/src/typing.js): a refresh that
// waits for the next key lets the server's entry lapse when the typist
// pauses just before it is due (defaults: start at 0, a key at 3.5 s, the
// next at 6 s; the entry would expire at 5 s and the name flicker off).
//
// Driving it: call [Typist.Keystroke] for each key press that changes the
// draft, [Typist.MessageSent] when the message is sent (the Return itself is
// not a keystroke), and [Typist.Tick] at [Typist.Deadline] so refreshes and
// the idle stop go out on time. Each call returns what to send, in order.
package typist

import (
	"errors"
	"fmt"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
)

// Defaults (docs/protocol.md, "Timing"; shared/config's table).
var (
	// DefaultRefresh is how often typing_start is re-sent while the user
	// keeps typing: 4 s.
	DefaultRefresh = config.Default().TypingRefresh
	// DefaultIdleStop is how long without a keystroke before typing_stop:
	// 3 s.
	DefaultIdleStop = config.Default().TypingIdleStop
)

// ErrRefreshNotBelowTTL is returned by [New] when the refresh interval would
// let the server's entry expire between refreshes (the indicator flickers).
var ErrRefreshNotBelowTTL = errors.New("typist: refresh must be below the server's ttl")

// Config holds the client timers.
type Config struct {
	// Refresh is the minimum time between two typing_start frames while the
	// user keeps typing. Zero means [DefaultRefresh].
	Refresh time.Duration
	// IdleStop is how long after the last keystroke typing_stop is sent.
	// Zero means [DefaultIdleStop].
	IdleStop time.Duration
}

// FromConfig takes the client timers served by the stack's configuration
// (ELLIPSIS_TYPING_REFRESH, ELLIPSIS_TYPING_IDLE_STOP).
func FromConfig(c config.Config) Config {
	return Config{Refresh: c.TypingRefresh, IdleStop: c.TypingIdleStop}
}

// Action is one frame the client should send.
type Action int

const (
	// Start: send typing_start, the first of a typing burst.
	Start Action = iota + 1
	// Refresh: send typing_start again, the burst goes on.
	Refresh
	// StopIdle: send typing_stop, no keystroke for IdleStop.
	StopIdle
	// StopSent: send typing_stop, the message was sent.
	StopSent
	// StopCancel: send typing_stop, the draft was dropped (cleared, the
	// page closes).
	StopCancel
)

func (a Action) String() string {
	switch a {
	case Start:
		return "start"
	case Refresh:
		return "refresh"
	case StopIdle:
		return "stop(idle)"
	case StopSent:
		return "stop(sent)"
	case StopCancel:
		return "stop(cancel)"
	}
	return "unknown"
}

// Frame is the wire frame type of the action: "typing_start" or
// "typing_stop".
func (a Action) Frame() string {
	if a == Start || a == Refresh {
		return "typing_start"
	}
	return "typing_stop"
}

// Stats counts what a Typist saw and decided.
type Stats struct {
	Keystrokes  int // keystrokes passed to Keystroke
	Messages    int // MessageSent calls
	Starts      int // typing_start frames that began a burst
	Refreshes   int // typing_start frames that refreshed a burst (due by time, while typing)
	IdleStops   int // typing_stop frames after IdleStop without a keystroke
	SentStops   int // typing_stop frames on MessageSent
	CancelStops int // typing_stop frames on Cancel
}

// Stops is the number of typing_stop frames.
func (s Stats) Stops() int { return s.IdleStops + s.SentStops + s.CancelStops }

// Events is the number of typing frames (starts, refreshes and stops).
func (s Stats) Events() int { return s.Starts + s.Refreshes + s.Stops() }

// Add sums two Stats.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Keystrokes:  s.Keystrokes + o.Keystrokes,
		Messages:    s.Messages + o.Messages,
		Starts:      s.Starts + o.Starts,
		Refreshes:   s.Refreshes + o.Refreshes,
		IdleStops:   s.IdleStops + o.IdleStops,
		SentStops:   s.SentStops + o.SentStops,
		CancelStops: s.CancelStops + o.CancelStops,
	}
}

// Typist is one draft's timer state. Not safe for concurrent use; one
// goroutine owns it. Times must not go backwards: an earlier time than one
// already seen is taken as that latest time.
type Typist struct {
	cfg       Config
	typing    bool
	lastKey   time.Time // last keystroke of the current burst
	lastStart time.Time // last typing_start (start or refresh) sent
	now       time.Time // latest time seen
	stats     Stats
}

// New returns an idle Typist. ttl is the server's entry lifetime (ttl_ms of
// typing_start events, ELLIPSIS_TYPING_TTL); New refuses a Refresh that is
// not below it ([ErrRefreshNotBelowTTL]) and non-positive durations. A zero
// ttl skips that check (the ttl is not known yet).
func New(cfg Config, ttl time.Duration) (*Typist, error) {
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.IdleStop == 0 {
		cfg.IdleStop = DefaultIdleStop
	}
	var errs []error
	if cfg.Refresh < 0 {
		errs = append(errs, fmt.Errorf("typist: refresh must be positive, got %s", cfg.Refresh))
	}
	if cfg.IdleStop < 0 {
		errs = append(errs, fmt.Errorf("typist: idle stop must be positive, got %s", cfg.IdleStop))
	}
	if ttl < 0 {
		errs = append(errs, fmt.Errorf("typist: ttl must not be negative, got %s", ttl))
	}
	if ttl > 0 && cfg.Refresh >= ttl {
		errs = append(errs, fmt.Errorf("%w: refresh %s, ttl %s", ErrRefreshNotBelowTTL, cfg.Refresh, ttl))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Typist{cfg: cfg}, nil
}

// Config returns the timers in use, defaults filled in.
func (p *Typist) Config() Config { return p.cfg }

// Typing reports whether a typing burst is on: a typing_start was sent and
// no typing_stop since.
func (p *Typist) Typing() bool { return p.typing }

// Stats returns the counters so far.
func (p *Typist) Stats() Stats { return p.stats }

// Deadline is when [Typist.Tick] must be called next: the earlier of the
// idle stop (last keystroke plus IdleStop) and the refresh (last
// typing_start plus Refresh). ok is false when no burst is on (nothing is
// due).
func (p *Typist) Deadline() (t time.Time, ok bool) {
	if !p.typing {
		return time.Time{}, false
	}
	idle := p.lastKey.Add(p.cfg.IdleStop)
	if refresh := p.lastStart.Add(p.cfg.Refresh); refresh.Before(idle) {
		return refresh, true
	}
	return idle, true
}

func (p *Typist) clamp(t time.Time) time.Time {
	if t.Before(p.now) {
		return p.now
	}
	p.now = t
	return t
}

// Tick sends what is due at t (deadlines included): [StopIdle] when
// IdleStop has passed since the last keystroke, else [Refresh] when Refresh
// has passed since the last typing_start, else nothing. When both are due,
// the burst stops (no refresh first). A late Tick sends one refresh, not
// one per missed interval.
func (p *Typist) Tick(t time.Time) []Action {
	t = p.clamp(t)
	if !p.typing {
		return nil
	}
	if t.Sub(p.lastKey) >= p.cfg.IdleStop {
		p.typing = false
		p.stats.IdleStops++
		return []Action{StopIdle}
	}
	if t.Sub(p.lastStart) >= p.cfg.Refresh {
		p.lastStart = t
		p.stats.Refreshes++
		return []Action{Refresh}
	}
	return nil
}

// Keystroke records a key press that changed the draft at t. It returns
// [Start] on the first keystroke of a burst. It first does what a Tick at t
// would, so a caller that missed a deadline still sends the [StopIdle]
// before the new Start, or the [Refresh] that is due.
func (p *Typist) Keystroke(t time.Time) []Action {
	out := p.Tick(t)
	t = p.now
	p.stats.Keystrokes++
	if !p.typing {
		p.typing = true
		p.lastStart = t
		p.stats.Starts++
		out = append(out, Start)
	}
	p.lastKey = t
	return out
}

// MessageSent records that the draft was sent at t: typing_stop at once
// ([StopSent]) if a burst is on. If the idle stop was already due, that one
// is returned instead.
func (p *Typist) MessageSent(t time.Time) []Action {
	p.stats.Messages++
	return p.end(t, StopSent, &p.stats.SentStops)
}

// Cancel records that the draft was dropped at t (cleared, the page
// closes): typing_stop at once ([StopCancel]) if a burst is on, like
// [Typist.MessageSent] without a message.
func (p *Typist) Cancel(t time.Time) []Action {
	return p.end(t, StopCancel, &p.stats.CancelStops)
}

func (p *Typist) end(t time.Time, a Action, count *int) []Action {
	if out := p.Tick(t); out != nil {
		return out
	}
	if !p.typing {
		return nil
	}
	p.typing = false
	*count++
	return []Action{a}
}
