package agent

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Answer is the whole hook of an agent asked to answer in scope: it shows
// the agent ([Agent.Show]), thinks for think (a stand-in for the work: a
// real agent runs its generation here, or calls Show itself), then calls
// reply, which posts the reply message in the scope, and then sends the
// "message posted" stop there ([Showing.Posted]), so the indicator ends
// with the reply.
//
// When ctx ends first (the process shuts down) or reply fails, reply is
// not called or its message counts as not posted: the showing is
// cancelled ([Showing.Cancel], a stop of its own conn, sent even though
// ctx is done, within the agent's Timeout) and Answer returns ctx.Err()
// itself or reply's error, joined with a failed stop's. The stops are sent on a
// context without ctx's cancellation, so they go out at shutdown too.
func (a *Agent) Answer(ctx context.Context, scope Scope, think time.Duration, reply func(ctx context.Context, scope Scope) error) error {
	s, err := a.Show(ctx, scope)
	if err != nil {
		return err
	}
	stopCtx := context.WithoutCancel(ctx)
	t := time.NewTimer(think)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		if err := s.Cancel(stopCtx); err != nil {
			return errors.Join(ctx.Err(), err)
		}
		return ctx.Err()
	}
	if err := reply(ctx, scope); err != nil {
		return errors.Join(fmt.Errorf("agent: reply in %s: %w", scope, err), s.Cancel(stopCtx))
	}
	return s.Posted(stopCtx)
}
