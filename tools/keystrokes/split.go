package keystrokes

import (
	"strings"
	"time"
)

// DefaultMaxGap is the pause that ends a message when [SplitOptions.MaxGap]
// is zero: the client's default idle_stop (3 s), so every message is one
// typing burst as the seed's client timers see it.
const DefaultMaxGap = 3 * time.Second

// End says why a message ended.
type End int

const (
	// EndSend: the typist pressed Return (or keypad Enter): the message is
	// sent. The Return itself is not in [Message.Keys]; its press time is
	// [Message.EndAt].
	EndSend End = iota + 1
	// EndGap: the next key press came more than MaxGap later; the draft was
	// left alone (reading, thinking), not sent.
	EndGap
	// EndMaxKeys: the message reached MaxKeys key presses; a chat-sized cut
	// of a long line, which the replay treats as sent.
	EndMaxKeys
	// EndSession: the session's (or the window's) last key press.
	EndSession
)

func (e End) String() string {
	switch e {
	case EndSend:
		return "send"
	case EndGap:
		return "gap"
	case EndMaxKeys:
		return "max_keys"
	case EndSession:
		return "session_end"
	}
	return "unknown"
}

// SplitOptions says where [Session.Messages] cuts a session.
type SplitOptions struct {
	// MaxGap: a pause between two key presses longer than this ends a
	// message (EndGap). Zero means [DefaultMaxGap]; negative disables gap
	// splitting.
	MaxGap time.Duration
	// MaxKeys: a message ends (EndMaxKeys) once it holds this many key
	// presses. Zero means no limit. The source text is a copied folk tale
	// whose lines are long; chat messages are short.
	MaxKeys int
	// TextOnly drops key presses that do not change the text of an input
	// field (see [IsText]): a browser client reacting to input events never
	// sees them. They neither count towards MaxKeys nor end a gap.
	TextOnly bool
}

// Message is a run of key presses that ends with a send, a long pause, a
// length cut or the session's end. Times stay on the session's clock.
type Message struct {
	// Session is the id of the session the message was cut from.
	Session int
	// Keys are the key presses, the final Return excluded. Never empty.
	Keys []Keystroke
	// End is why the message ended.
	End End
	// EndAt is the press time of the Return for EndSend, else of the last
	// key in Keys.
	EndAt time.Duration
	// GapAfter is the time from EndAt to the next message's first key
	// press; zero for the last message.
	GapAfter time.Duration
}

// Start is the press time of the message's first key.
func (m Message) Start() time.Duration { return m.Keys[0].Press }

// Duration is the time from the first key press to EndAt.
func (m Message) Duration() time.Duration { return m.EndAt - m.Keys[0].Press }

// IsSend reports whether key sends a message: Return, or Enter on the
// keypad (P_Enter in this data set, KP_Enter in X11).
func IsSend(key string) bool {
	switch key {
	case "Return", "P_Enter", "KP_Enter":
		return true
	}
	return false
}

// nonText are keys that never change an input field's text.
var nonText = map[string]bool{
	"Shift_L": true, "Shift_R": true, "Control_L": true, "Control_R": true,
	"Alt_L": true, "Alt_R": true, "Super_L": true, "Super_R": true,
	"Meta_L": true, "Meta_R": true, "ISO_Level3_Shift": true, "Mode_switch": true,
	"Caps_Lock": true, "Num_Lock": true, "Scroll_Lock": true, "Menu": true,
	"Escape": true, "Insert": true, "Tab": true, "Print": true, "Pause": true,
	"Left": true, "Right": true, "Up": true, "Down": true,
	"Home": true, "End": true, "Prior": true, "Next": true, "Page_Up": true, "Page_Down": true,
}

// IsText reports whether a key press changes the text of an input field:
// characters, space, punctuation names ("comma"), BackSpace and Delete.
// Modifiers, navigation, keypad navigation ("P_Left") and dead or unnamed
// key codes ("[65105]") are not text; send keys ([IsSend]) are not either.
func IsText(key string) bool {
	if key == "" || nonText[key] || IsSend(key) || strings.HasPrefix(key, "[") {
		return false
	}
	if strings.HasPrefix(key, "P_") || strings.HasPrefix(key, "KP_") {
		// Keypad digits and operators type text; keypad navigation does not.
		switch strings.TrimPrefix(strings.TrimPrefix(key, "KP_"), "P_") {
		case "Add", "Subtract", "Multiply", "Divide", "Decimal", "Separator",
			"0", "1", "2", "3", "4", "5", "6", "7", "8", "9":
			return true
		}
		return false
	}
	if len(key) > 1 && key[0] == 'F' && key[1] >= '0' && key[1] <= '9' {
		return false // F1..F12
	}
	return true
}

// Messages cuts the session into messages (see [SplitOptions]). A send key
// with no key press before it in its message (an empty line) makes no
// message. Key presses after the last send form a final EndSession (or
// EndGap / EndMaxKeys) message.
func (s Session) Messages(opts SplitOptions) []Message {
	maxGap := opts.MaxGap
	if maxGap == 0 {
		maxGap = DefaultMaxGap
	}
	var (
		out  []Message
		cur  []Keystroke
		last time.Duration // press time of the previous key seen (sends included)
		have bool
		cut  bool // the last message was just cut at MaxKeys, no key since
	)
	flush := func(end End, at time.Duration) {
		if len(cur) == 0 {
			return
		}
		out = append(out, Message{Session: s.ID, Keys: cur, End: end, EndAt: at})
		cur = nil
	}
	for _, k := range s.Keys {
		if IsSend(k.Key) {
			if cut {
				// The cut line was sent right away: it is a sent message.
				out[len(out)-1].End, out[len(out)-1].EndAt = EndSend, k.Press
			}
			flush(EndSend, k.Press)
			last, have, cut = k.Press, true, false
			continue
		}
		if opts.TextOnly && !IsText(k.Key) {
			continue
		}
		if have && maxGap > 0 && k.Press-last > maxGap && len(cur) > 0 {
			flush(EndGap, cur[len(cur)-1].Press)
		}
		cur = append(cur, k)
		last, have, cut = k.Press, true, false
		if opts.MaxKeys > 0 && len(cur) >= opts.MaxKeys {
			flush(EndMaxKeys, k.Press)
			cut = true
		}
	}
	flush(EndSession, last)
	for i := 0; i+1 < len(out); i++ {
		out[i].GapAfter = out[i+1].Start() - out[i].EndAt
	}
	return out
}
