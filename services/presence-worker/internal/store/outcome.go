package store

import (
	"fmt"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Command outcomes, the "outcome" label of ellipsis_worker_commands_total:
// a closed set, so the label's values are bounded. The store's scripts
// return the first eight (scripts/start.lua, scripts/stop.lua); the worker
// adds invalid and error.
const (
	OutcomeStarted   = "started"   // start made the user visible; typing_start published
	OutcomeRefreshed = "refreshed" // start of a visible user after the throttle window; typing_start published
	OutcomeThrottled = "throttled" // start of a visible user inside the window; entry extended, nothing published
	// OutcomeCoalesced: a start or stop changed what receivers should show
	// while the user's event rate limit was spent; the
	// state is applied and the sweeper publishes the user's final state
	// when an event is allowed again.
	OutcomeCoalesced = "coalesced"
	OutcomeStopped   = "stopped" // stop/leave/disconnect hid the user; typing_stop published
	OutcomeNoop      = "noop"    // nothing visible changed
	OutcomeStale     = "stale"   // seq not above the connection's last applied seq; ignored
	// OutcomeLate: a start sent (Command.TsMs) more than ttl before the
	// worker applied it; dropped, it never shows anyone.
	OutcomeLate = "late"
	// OutcomeSuperseded: a start sent before the user's last stop without
	// conn (within StopGuard after it); dropped, so a message the user
	// posted is not followed by their stale "typing".
	OutcomeSuperseded = "superseded"
	OutcomeInvalid    = "invalid" // payload failed protocol.DecodeCommand; dropped
	OutcomeError      = "error"   // Redis failed after retries (or the script failed); dropped
)

// outcomeOf reads {outcome, ...} from a start or stop script reply.
func outcomeOf(v any) (string, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 1 {
		return "", fmt.Errorf("worker: unexpected script reply %T %v", v, v)
	}
	s, ok := a[0].(string)
	if !ok {
		return "", fmt.Errorf("worker: unexpected script outcome %T %v", a[0], a[0])
	}
	switch s {
	case OutcomeStarted, OutcomeRefreshed, OutcomeThrottled, OutcomeCoalesced, OutcomeStopped,
		OutcomeNoop, OutcomeStale, OutcomeLate, OutcomeSuperseded:
		return s, nil
	}
	return "", fmt.Errorf("worker: unknown script outcome %q", s)
}

// replyDue reads due_ms from a start or stop script reply {outcome, now,
// due}: when the room must be due in its sweep bucket, 0 for no change.
func replyDue(v any) int64 {
	a, ok := v.([]any)
	if !ok || len(a) < 3 {
		return 0
	}
	d, _ := a[2].(int64)
	return d
}

// publishedBy is the event type an outcome published, "" for none.
func publishedBy(outcome string) string {
	switch outcome {
	case OutcomeStarted, OutcomeRefreshed:
		return protocol.TypeTypingStart
	case OutcomeStopped:
		return protocol.TypeTypingStop
	}
	return ""
}

// disconnectOutcome sums a disconnect's room outcomes into the one it is
// counted with in ellipsis_worker_commands_total: stopped if any room
// published a stop, error if any room failed, stale if every room was
// stale, coalesced if any room deferred its stop, noop otherwise.
func disconnectOutcome(outs []string, err error) string {
	if err != nil {
		return OutcomeError
	}
	stale, coalesced := len(outs) > 0, false
	for _, o := range outs {
		if o == OutcomeStopped {
			return OutcomeStopped
		}
		stale = stale && o == OutcomeStale
		coalesced = coalesced || o == OutcomeCoalesced
	}
	switch {
	case stale:
		return OutcomeStale
	case coalesced:
		return OutcomeCoalesced
	}
	return OutcomeNoop
}
