package demo

import (
	"time"

	"github.com/ellipsis-chat/ellipsis/tools/keystrokes"
)

// stepKind is what a scripted user does at a step.
type stepKind int

const (
	// stepKey: a key press that changes the draft.
	stepKey stepKind = iota + 1
	// stepSend: the user sends the message (Return).
	stepSend
)

// step is one scripted action, at a time since the demo's start.
type step struct {
	at   time.Duration
	kind stepKind
	key  string
}

// pacing says how recorded time becomes demo time.
type pacing struct {
	// speed divides every recorded duration (2 = twice as fast).
	speed float64
	// minPause is the shortest pause after a sent message (recorded time),
	// so a user reads the room before typing on.
	minPause time.Duration
	// maxPause caps every pause between messages (recorded time), so the
	// demo stays lively; keep it above idle_stop so idle stops show.
	maxPause time.Duration
	// sendDelay is the recorded time from the last key of a message cut
	// at MaxKeys to its (synthetic) Return.
	sendDelay time.Duration
}

func (p pacing) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) / p.speed)
}

// buildScript turns a session's messages, from message index first on
// (wrapping around at the end), into a user's steps: the recorded
// keystroke timings scaled by speed, starting at start. Messages that end
// with Return, at MaxKeys or at the session's end are sent; a message that
// ends at a long pause is not (the user stopped typing: the typist's idle
// stop will show). Steps stop before until, or after maxMessages sent
// messages (0: no limit).
func buildScript(msgs []keystrokes.Message, first int, start, until time.Duration, maxMessages int, p pacing) []step {
	if len(msgs) == 0 {
		return nil
	}
	var (
		out    []step
		cursor = start
		sent   = 0
	)
	for i := 0; ; i++ {
		m := msgs[(first+i)%len(msgs)]
		from := cursor
		base := m.Start()
		for _, k := range m.Keys {
			at := cursor + p.scale(k.Press-base)
			if at >= until {
				return out
			}
			out = append(out, step{at: at, kind: stepKey, key: k.Key})
		}
		end := cursor + p.scale(m.EndAt-base)
		var pause time.Duration
		switch m.End {
		case keystrokes.EndGap:
			pause = min(m.GapAfter, p.maxPause)
		default: // sent: Return, MaxKeys cut, session end
			if m.End != keystrokes.EndSend {
				end += p.scale(p.sendDelay)
			}
			if end >= until {
				return out
			}
			out = append(out, step{at: end, kind: stepSend})
			sent++
			if maxMessages > 0 && sent >= maxMessages {
				return out
			}
			pause = max(min(m.GapAfter, p.maxPause), p.minPause)
		}
		cursor = end + p.scale(pause)
		if cursor <= from {
			cursor = from + time.Millisecond // always progress towards until
		}
	}
}
