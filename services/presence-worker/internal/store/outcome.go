package store

import (
	"fmt"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Outcome is what one command did: the "outcome" label of
// ellipsis_worker_commands_total is its String. A closed set, so the
// label's values are bounded whoever publishes commands. The store's
// scripts return OutcomeStarted through OutcomeSuperseded
// (scripts/start.lua, scripts/stop.lua, by name); the store adds
// OutcomeError, the worker OutcomeInvalid (decoding) and OutcomeShed and
// OutcomeOverflow (its dispatch).
type Outcome uint8

const (
	// OutcomeNone is the zero value: no outcome (an op that
	// protocol.DecodeCommand does not admit, never counted). String "".
	OutcomeNone      Outcome = iota
	OutcomeStarted           // start made the user visible; typing_start published
	OutcomeRefreshed         // start of a visible user after the throttle window; typing_start published
	OutcomeThrottled         // start of a visible user inside the window; entry extended, nothing published
	// OutcomeCoalesced: a start or stop changed what receivers should show
	// while the user's event rate limit was spent; the
	// state is applied and the sweeper publishes the user's final state
	// when an event is allowed again.
	OutcomeCoalesced
	OutcomeStopped // stop/leave/disconnect hid the user; typing_stop published
	OutcomeNoop    // nothing visible changed
	OutcomeStale   // seq not above the connection's last applied seq; ignored
	// OutcomeLate: a start sent (Command.TsMs) more than ttl before the
	// worker applied it; dropped, it never shows anyone.
	OutcomeLate
	// OutcomeSuperseded: a start sent before the user's last stop without
	// conn (within StopGuard after it); dropped, so a message the user
	// posted is not followed by their stale "typing".
	OutcomeSuperseded
	// OutcomeTooManyThreads: a start in a thread of a user already typing
	// in ELLIPSIS_MAX_THREADS_PER_USER other threads of the room; refused,
	// nothing changed (docs/protocol.md, "Threads and activities").
	OutcomeTooManyThreads
	OutcomeInvalid  // the worker's: payload failed protocol.DecodeCommand; dropped
	OutcomeError    // Redis failed after retries (or the script failed); dropped
	OutcomeShed     // the worker's: start refused, its shard's queue past the start room
	OutcomeOverflow // the worker's: any command refused, its shard's queue full
	numOutcomes
)

// outcomeNames are the label values, in Outcome order; the scripts return
// the same words.
var outcomeNames = [numOutcomes]string{
	OutcomeNone: "", OutcomeStarted: "started", OutcomeRefreshed: "refreshed", OutcomeThrottled: "throttled",
	OutcomeCoalesced: "coalesced", OutcomeStopped: "stopped", OutcomeNoop: "noop", OutcomeStale: "stale",
	OutcomeLate: "late", OutcomeSuperseded: "superseded", OutcomeTooManyThreads: "too_many_threads", OutcomeInvalid: "invalid", OutcomeError: "error",
	OutcomeShed: "shed", OutcomeOverflow: "overflow",
}

// String is the outcome's label value ("started", ...); "" for
// OutcomeNone, "other" for a value outside the set.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "other"
}

// Outcomes lists every outcome but OutcomeNone, in order: the label
// values of ellipsis_worker_commands_total.
func Outcomes() []Outcome {
	out := make([]Outcome, 0, numOutcomes-1)
	for o := OutcomeNone + 1; o < numOutcomes; o++ {
		out = append(out, o)
	}
	return out
}

// scriptOutcome is the Outcome a start or stop script names, false for a
// word the scripts do not return.
func scriptOutcome(s string) (Outcome, bool) {
	for o := OutcomeStarted; o <= OutcomeTooManyThreads; o++ {
		if outcomeNames[o] == s {
			return o, true
		}
	}
	return OutcomeNone, false
}

// outcomeOf reads {outcome, ...} from a start or stop script reply.
func outcomeOf(v any) (Outcome, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 1 {
		return OutcomeNone, fmt.Errorf("store: unexpected script reply %T %v", v, v)
	}
	s, ok := a[0].(string)
	if !ok {
		return OutcomeNone, fmt.Errorf("store: unexpected script outcome %T %v", a[0], a[0])
	}
	if o, ok := scriptOutcome(s); ok {
		return o, nil
	}
	return OutcomeNone, fmt.Errorf("store: unknown script outcome %q", s)
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
func publishedBy(outcome Outcome) string {
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
func disconnectOutcome(outs []Outcome, err error) Outcome {
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
