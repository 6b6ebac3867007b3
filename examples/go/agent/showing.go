package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// ErrEnded is returned by [Showing.Posted] and [Showing.Cancel] after the
// showing has already ended.
var ErrEnded = errors.New("agent: the showing has already ended")

// Showing is one answer's indicator: the agent shown with its activity
// in one scope, under a conn of its own, from [Agent.Show] until
// [Showing.Posted] or [Showing.Cancel]. Until then it refreshes its start
// every TTL/2 (the first time after 2×[StopGuard] when that is sooner), so
// the indicator never runs out while the agent works; every Showing must
// be ended by one of the two.
type Showing struct {
	a     *Agent
	scope Scope
	conn  string

	stop      chan struct{} // closed by end: the refresh loop returns
	done      chan struct{} // closed by the refresh loop when it has returned
	cancelRef context.CancelFunc
	seq       uint64 // the last seq sent; the refresh loop's until done, then end's

	once sync.Once
	err  error
}

// Show publishes the agent's start in scope (activity, ttl_ms and a new
// conn "<ConnPrefix>:<n>"), flushes it, and refreshes it until the
// returned Showing ends. ctx bounds the first start only. Errors: an
// invalid scope (a *protocol.FieldError naming "room" or "thread"), and a
// failed publish or flush (nothing is refreshed then; a start that
// reached the server all the same ends at its ttl).
func (a *Agent) Show(ctx context.Context, scope Scope) (*Showing, error) {
	if err := scope.Validate(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	s := &Showing{
		a:     a,
		scope: scope,
		conn:  a.opts.ConnPrefix + ":" + strconv.FormatUint(a.n.Add(1), 10),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	if err := s.start(ctx); err != nil {
		return nil, fmt.Errorf("agent: show %q in %s: %w", a.opts.Activity, scope, err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancelRef = cancel
	go s.refresh(rctx)
	return s, nil
}

// Conn is the showing's conn id.
func (s *Showing) Conn() string { return s.conn }

// Scope is where the agent is shown.
func (s *Showing) Scope() Scope { return s.scope }

// start publishes the next start of the showing (seq and ts_ms: a start
// delayed past a later stop, or by more than its ttl, is dropped by the
// workers).
func (s *Showing) start(ctx context.Context) error {
	s.seq++
	o := s.a.opts
	return s.a.publish(ctx, protocol.Command{
		V: protocol.Version, Op: protocol.OpStart, Room: s.scope.Room, Thread: s.scope.Thread,
		User: o.User, Name: o.Name, Activity: o.Activity, Conn: s.conn,
		Seq: s.seq, TsMs: time.Now().UnixMilli(), TTLMs: o.TTL.Milliseconds(),
	})
}

// refresh re-sends the start until stop is closed: first after
// min(TTL/2, 2×StopGuard), then every TTL/2.
func (s *Showing) refresh(ctx context.Context) {
	defer close(s.done)
	every := s.a.opts.TTL / 2
	t := time.NewTimer(min(every, 2*StopGuard))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if err := s.start(ctx); err != nil && ctx.Err() == nil && s.a.opts.OnRefreshError != nil {
			s.a.opts.OnRefreshError(s.scope, err)
		}
		t.Reset(every)
	}
}

// Posted ends the showing because the agent's reply was posted: it stops
// the refreshes, then sends the platform's "message posted" stop in the
// scope, {"v":1,"op":"stop","room":R,"thread":T,"user":U} without conn,
// which ends the agent's typing there on every conn at once (every
// answer of this user in the scope) and drops its starts sent before
// it. ctx bounds the publish and its flush (and the agent's Timeout);
// the error is that of the publish or flush, or ErrEnded.
func (s *Showing) Posted(ctx context.Context) error { return s.end(ctx, true) }

// Cancel ends the showing without a reply (the work was given up, the
// process shuts down): it stops the refreshes, then sends a stop of the
// showing's own conn in the scope, so other answers of the agent in the
// same scope stay shown. Errors as Posted.
func (s *Showing) Cancel(ctx context.Context) error { return s.end(ctx, false) }

func (s *Showing) end(ctx context.Context, posted bool) error {
	first := false
	s.once.Do(func() {
		first = true
		close(s.stop)
		s.cancelRef()
		<-s.done
		cmd := protocol.Command{V: protocol.Version, Op: protocol.OpStop, Room: s.scope.Room, Thread: s.scope.Thread, User: s.a.opts.User}
		if !posted {
			s.seq++
			cmd.Conn, cmd.Seq, cmd.TsMs = s.conn, s.seq, time.Now().UnixMilli()
		}
		if err := s.a.publish(ctx, cmd); err != nil {
			s.err = fmt.Errorf("agent: stop in %s: %w", s.scope, err)
		}
	})
	if !first {
		return ErrEnded
	}
	return s.err
}
