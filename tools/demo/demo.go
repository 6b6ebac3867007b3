// Package demo runs scripted chat users against a running Ellipsis stack:
// each user connects over WebSocket, joins one room and types messages whose
// keystroke timings are replayed from real human typing (package
// keystrokes), deciding what to send with the seed's client timers (package
// typist). While they type, it prints the "who is typing" line each user
// would see, whenever it changes, and at the end how many typing frames the
// timers sent for how many keystrokes.
//
//	[ 3.2s] bob   sees: Alice is typing…
//	[ 4.0s] carol sees: Alice and Bob are typing…
//	[ 7.9s] bob   sees: (nobody)
//
// cmd/ellipsis-demo is a thin main over [Run].
package demo

import (
	"context"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/tools/keystrokes"
	"github.com/ellipsis-chat/ellipsis/tools/typist"
)

// Defaults of [Options].
const (
	DefaultURL      = "ws://localhost:8080/v1/ws"
	DefaultRoom     = "demo"
	DefaultDuration = 25 * time.Second
	// DefaultMaxKeys cuts the copied text's long lines into chat-sized
	// messages of at most 40 key presses.
	DefaultMaxKeys = 40
	// DefaultMinPause is the shortest recorded pause after a sent message.
	DefaultMinPause = 1200 * time.Millisecond
	// DefaultMaxPause caps recorded pauses between messages; above the
	// default idle_stop (3 s), so a long pause shows an idle stop.
	DefaultMaxPause = 4500 * time.Millisecond
	// DefaultSettle is how long the demo waits after the last frame before
	// closing, so the last stops reach every view.
	DefaultSettle = 700 * time.Millisecond
	// DefaultDialTimeout bounds the config request, each WebSocket
	// handshake and each join.
	DefaultDialTimeout = 5 * time.Second
	// writeWait bounds each frame write.
	writeWait = 5 * time.Second
	// viewTick is how often each view checks local expiry.
	viewTick = 50 * time.Millisecond
)

// User is one scripted user.
type User struct {
	// ID is the user id (dev auth ?user=, or the token's sub).
	ID string
	// Name is the display name others see.
	Name string
	// Session is the index in Options.Sessions whose typing this user
	// replays (modulo the number of sessions).
	Session int
	// FirstMessage is the index of the session's first message to type.
	FirstMessage int
	// StartAfter is when the user starts typing, after the demo's start.
	StartAfter time.Duration
}

// DefaultUsers are Alice, Bob and Carol, each replaying a different sample
// session (23, 15 and 51) and starting a little apart, so their typing
// overlaps.
func DefaultUsers() []User {
	return []User{
		{ID: "alice", Name: "Alice", Session: 1, StartAfter: 500 * time.Millisecond},
		{ID: "bob", Name: "Bob", Session: 0, StartAfter: 1500 * time.Millisecond},
		{ID: "carol", Name: "Carol", Session: 2, StartAfter: 3 * time.Second},
	}
}

// Options configures [Run]. Zero values mean the defaults noted.
type Options struct {
	// URL is the gateway's WebSocket endpoint. Default DefaultURL.
	URL string
	// Room is the room every user joins. Default DefaultRoom.
	Room string
	// Users are the scripted users. Default DefaultUsers().
	Users []User
	// Sessions are the recorded sessions replayed. Default
	// keystrokes.Sample().
	Sessions []keystrokes.Session
	// Split cuts sessions into messages. Default: MaxKeys DefaultMaxKeys,
	// TextOnly (a browser reacts to input events only), MaxGap the typist's
	// IdleStop (a pause long enough for an idle stop ends a message).
	Split *keystrokes.SplitOptions
	// Tokens maps user ids to JWTs (sent as Bearer). Users without one
	// connect with the dev mode's ?user=&name=.
	Tokens map[string]string
	// JWTSecret, when set, mints an HS256 token for every user without one
	// in Tokens (the stack's ELLIPSIS_JWT_SECRET).
	JWTSecret string
	// Speed divides every recorded duration: 2 replays twice as fast.
	// Client timers and the server's ttl are real time either way. Default 1.
	Speed float64
	// Duration bounds the run (the typing; closing adds Settle). Zero
	// means DefaultDuration, or no bound when Messages is set.
	Duration time.Duration
	// Messages bounds the messages each user sends. Zero means no bound.
	Messages int
	// Timers are the client timers. Zero fields come from the gateway's
	// GET /v1/config, else from the protocol defaults (refresh 4 s,
	// idle_stop 3 s).
	Timers typist.Config
	// TTL is the server's entry lifetime, for the refresh check and local
	// expiry of snapshot entries. Zero: from /v1/config or typing_start
	// events, default 5 s.
	TTL time.Duration
	// MinPause, MaxPause: bounds of the recorded pause between messages.
	// Defaults DefaultMinPause, DefaultMaxPause.
	MinPause, MaxPause time.Duration
	// Settle is the wait before closing. Default DefaultSettle.
	Settle time.Duration
	// DialTimeout bounds connecting and joining. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// Verbose also prints every typing frame a user sends.
	Verbose bool
	// Out receives the timeline. Nil means io.Discard.
	Out io.Writer
	// Logger receives debug logs. Nil means none.
	Logger *zap.Logger
}

// UserResult is one user's outcome.
type UserResult struct {
	ID, Name string
	// Sent counts keystrokes, messages and the typing frames the timers
	// sent.
	Sent typist.Stats
	// Received counts the typing events (typing_start, typing_stop, typing)
	// that reached this user.
	Received int
	// Errors counts error frames from the gateway.
	Errors int
	// Lines counts the indicator lines printed for this user.
	Lines int
}

// Result is the outcome of [Run].
type Result struct {
	Room    string
	Speed   float64
	Elapsed time.Duration
	Users   []UserResult
}

// Total sums the users' Sent stats.
func (r *Result) Total() typist.Stats {
	var t typist.Stats
	for _, u := range r.Users {
		t = t.Add(u.Sent)
	}
	return t
}

// Run connects the users, plays their scripts, prints the timeline to
// opts.Out and returns the counts. It returns an error when the stack
// cannot be reached (saying to start it), refuses a handshake or a join, or
// a connection drops; ctx ends the run early (the result so far is
// returned with ctx's error).
func Run(ctx context.Context, opts Options) (*Result, error) {
	r, err := prepare(ctx, opts)
	if err != nil {
		return nil, err
	}
	return r.run(ctx)
}
