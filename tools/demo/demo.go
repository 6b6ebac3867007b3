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
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
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

// runner is one demo run.
type runner struct {
	opts    Options
	ws      *url.URL
	timers  typist.Config
	ttl     time.Duration
	tokens  map[string]string
	scripts [][]step
	log     *zap.Logger
	out     *printer
}

func prepare(ctx context.Context, opts Options) (*runner, error) {
	opts.URL = cmp.Or(opts.URL, DefaultURL)
	opts.Room = cmp.Or(opts.Room, DefaultRoom)
	if opts.Users == nil {
		opts.Users = DefaultUsers()
	}
	opts.Speed = cmp.Or(opts.Speed, 1)
	if opts.Duration == 0 && opts.Messages == 0 {
		opts.Duration = DefaultDuration
	}
	opts.MinPause = cmp.Or(opts.MinPause, DefaultMinPause)
	opts.MaxPause = cmp.Or(opts.MaxPause, DefaultMaxPause)
	opts.Settle = cmp.Or(opts.Settle, DefaultSettle)
	opts.DialTimeout = cmp.Or(opts.DialTimeout, DefaultDialTimeout)
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}

	var errs []error
	if opts.Speed < 0 {
		errs = append(errs, fmt.Errorf("speed must be positive, got %g", opts.Speed))
	}
	if opts.Duration < 0 || opts.Messages < 0 {
		errs = append(errs, fmt.Errorf("duration and messages must not be negative, got %s and %d", opts.Duration, opts.Messages))
	}
	if err := protocol.ValidateID("room", opts.Room); err != nil {
		errs = append(errs, err)
	}
	if len(opts.Users) == 0 {
		errs = append(errs, errors.New("no users"))
	}
	seen := map[string]bool{}
	for _, u := range opts.Users {
		if err := protocol.ValidateID("user", u.ID); err != nil {
			errs = append(errs, err)
		}
		if seen[u.ID] {
			errs = append(errs, fmt.Errorf("user %q twice", u.ID))
		}
		seen[u.ID] = true
	}
	ws, err := url.Parse(opts.URL)
	if err != nil || (ws.Scheme != "ws" && ws.Scheme != "wss") || ws.Host == "" {
		errs = append(errs, fmt.Errorf("url %q is not a ws:// or wss:// URL with a host", opts.URL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}

	// The stack's timing and auth mode; also the "is it running?" check.
	sc, found, err := fetchConfig(ctx, ws, opts.DialTimeout)
	if err != nil {
		return nil, err
	}
	timers, ttl := opts.Timers, opts.TTL
	if found {
		timers.Refresh = cmp.Or(timers.Refresh, sc.Refresh())
		timers.IdleStop = cmp.Or(timers.IdleStop, sc.IdleStop())
		ttl = cmp.Or(ttl, sc.TTL())
	}
	ttl = cmp.Or(ttl, config.Default().TypingTTL)
	probe, err := typist.New(timers, ttl)
	if err != nil {
		return nil, fmt.Errorf("demo: client timers: %w", err)
	}
	timers = probe.Config()

	tokens := map[string]string{}
	for _, u := range opts.Users {
		if t := opts.Tokens[u.ID]; t != "" {
			tokens[u.ID] = t
			continue
		}
		if opts.JWTSecret != "" {
			t, err := MintHS256([]byte(opts.JWTSecret), u.ID, u.Name, time.Now(), time.Hour)
			if err != nil {
				return nil, err
			}
			tokens[u.ID] = t
		}
	}
	if found && sc.Auth == config.AuthJWT && len(tokens) < len(opts.Users) {
		return nil, fmt.Errorf("the stack at %s runs with ELLIPSIS_AUTH=jwt: pass -jwt-secret (its ELLIPSIS_JWT_SECRET) or -token, one per user", ws.Redacted())
	}

	sessions := opts.Sessions
	if sessions == nil {
		if sessions, err = keystrokes.Sample(); err != nil {
			return nil, err
		}
	}
	if len(sessions) == 0 {
		return nil, errors.New("demo: no keystroke sessions")
	}
	split := keystrokes.SplitOptions{MaxGap: timers.IdleStop, MaxKeys: DefaultMaxKeys, TextOnly: true}
	if opts.Split != nil {
		split = *opts.Split
	}
	until := opts.Duration
	until = cmp.Or(until, time.Duration(1<<63-1))
	pace := pacing{speed: opts.Speed, minPause: opts.MinPause, maxPause: opts.MaxPause, sendDelay: 300 * time.Millisecond}
	scripts := make([][]step, len(opts.Users))
	for i, u := range opts.Users {
		s := sessions[u.Session%len(sessions)]
		msgs := s.Messages(split)
		if len(msgs) == 0 {
			return nil, fmt.Errorf("demo: session %d has no messages to replay", s.ID)
		}
		scripts[i] = buildScript(msgs, u.FirstMessage, u.StartAfter, until, opts.Messages, pace)
	}

	width := 0
	for _, u := range opts.Users {
		width = max(width, len(u.ID))
	}
	return &runner{
		opts: opts, ws: ws, timers: timers, ttl: ttl, tokens: tokens, scripts: scripts, log: log,
		out: &printer{w: opts.Out, width: width},
	}, nil
}

// member is one connected user during a run.
type member struct {
	u      User
	conn   *websocket.Conn
	tp     *typist.Typist
	events chan protocol.ServerFrame // reader -> watcher; 64 frames; full: the reader waits (the watcher only updates a map)
	res    UserResult
	// readerDone is closed when the reader goroutine has returned.
	readerDone chan struct{}
}

func (r *runner) run(parent context.Context) (*Result, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()

	// Connect and join everyone before the clock starts.
	members := make([]*member, 0, len(r.opts.Users))
	closeAll := func() {
		for _, m := range members {
			m.conn.Close()
		}
	}
	for _, u := range r.opts.Users {
		c, err := dialUser(ctx, r.ws, u, r.tokens[u.ID], r.opts.DialTimeout)
		if err != nil {
			closeAll()
			return nil, err
		}
		c.SetReadLimit(64 << 10)
		tp, err := typist.New(r.timers, r.ttl)
		if err != nil { // checked in prepare
			c.Close()
			closeAll()
			return nil, fmt.Errorf("demo: %w", err)
		}
		m := &member{u: u, conn: c, tp: tp, events: make(chan protocol.ServerFrame, 64), readerDone: make(chan struct{}),
			res: UserResult{ID: u.ID, Name: u.Name}}
		members = append(members, m)
		if err := r.join(m); err != nil {
			closeAll()
			return nil, err
		}
	}

	var names []string
	for _, m := range members {
		names = append(names, m.u.Name)
	}
	fmt.Fprintf(r.opts.Out, "%s joined room %q at %s and type (speed %g×, client timers: refresh %s, idle stop %s, ttl %s).\nEach line is what one of them sees, when it changes.\n\n",
		joinNames(names), r.opts.Room, r.ws.Redacted(), r.opts.Speed, r.timers.Refresh, r.timers.IdleStop, r.ttl)
	t0 := time.Now()
	r.out.start(t0)
	var (
		closing  = make(chan struct{}) // closed when the demo closes the sockets on purpose
		watchers = make(chan struct{}) // closed to stop the watchers
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup // readers
		wwg      sync.WaitGroup // watchers
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	for _, m := range members {
		wwg.Add(1)
		go func() { defer wwg.Done(); r.watch(m, watchers) }()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(m.readerDone)
			if err := r.read(ctx, m, closing); err != nil {
				fail(err)
			}
		}()
	}
	var dwg sync.WaitGroup // drivers
	for i, m := range members {
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			if err := r.drive(ctx, m, t0, r.scripts[i]); err != nil && ctx.Err() == nil {
				fail(err)
			}
		}()
	}
	dwg.Wait()

	// Let the last stops reach every view, then close.
	if ctx.Err() == nil {
		select {
		case <-time.After(r.opts.Settle):
		case <-ctx.Done():
		}
	}
	elapsed := time.Since(t0)
	close(closing)
	for _, m := range members {
		_ = m.conn.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, "demo done"), time.Now().Add(time.Second))
	}
	for _, m := range members {
		select {
		case <-m.readerDone: // the gateway answered the close
		case <-time.After(2 * time.Second):
		}
		m.conn.Close()
	}
	wg.Wait()
	close(watchers)
	wwg.Wait()

	res := &Result{Room: r.opts.Room, Speed: r.opts.Speed, Elapsed: elapsed}
	for _, m := range members {
		m.res.Sent = m.tp.Stats()
		res.Users = append(res.Users, m.res)
	}
	if firstErr != nil {
		return res, firstErr
	}
	return res, parent.Err()
}

// join sends join and waits for joined (applying its snapshot), failing on
// an error frame or after DialTimeout.
func (r *runner) join(m *member) error {
	if err := r.send(m, map[string]string{"type": "join", "room": r.opts.Room, "id": "join"}); err != nil {
		return err
	}
	_ = m.conn.SetReadDeadline(time.Now().Add(r.opts.DialTimeout))
	defer m.conn.SetReadDeadline(time.Time{})
	for {
		_, data, err := m.conn.ReadMessage()
		if err != nil {
			return fmt.Errorf("%s: no answer to join %q: %w", m.u.ID, r.opts.Room, err)
		}
		var ev protocol.ServerFrame
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("%s: unreadable frame from the gateway: %w", m.u.ID, err)
		}
		switch {
		case ev.Type == "joined" && ev.ID == "join":
			m.events <- ev // buffered and empty: the watcher applies it once started
			return nil
		case ev.Type == "error" && ev.ID == "join":
			return fmt.Errorf("%s: join %q refused: %s: %s", m.u.ID, r.opts.Room, ev.Code, ev.Message)
		}
	}
}

// send writes one JSON frame. Only the member's driver writes after join.
func (r *runner) send(m *member, v any) error {
	_ = m.conn.SetWriteDeadline(time.Now().Add(writeWait))
	if err := m.conn.WriteJSON(v); err != nil {
		return fmt.Errorf("%s: send %v: %w", m.u.ID, v, err)
	}
	return nil
}

// read is the member's reader goroutine: frames go to the watcher, error
// frames are printed. It returns nil once the demo closes the socket on
// purpose, or an error when the connection drops before.
func (r *runner) read(ctx context.Context, m *member, closing <-chan struct{}) error {
	for {
		_, data, err := m.conn.ReadMessage()
		if err != nil {
			select {
			case <-closing:
				return nil
			default:
			}
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%s: connection to the stack lost: %w", m.u.ID, err)
		}
		var ev protocol.ServerFrame
		if err := json.Unmarshal(data, &ev); err != nil {
			r.log.Debug("unreadable frame", zap.String("user_id", m.u.ID), zap.Error(err))
			continue
		}
		select {
		case m.events <- ev:
		case <-ctx.Done():
			return nil
		}
	}
}

// watch owns the member's view: it applies frames, expires entries locally
// and prints the line whenever it changes, until stop is closed.
func (r *runner) watch(m *member, stop <-chan struct{}) {
	v := newView(m.u.ID, r.opts.Room, r.ttl)
	last := Nobody
	tick := time.NewTicker(viewTick)
	defer tick.Stop()
	for {
		select {
		case ev := <-m.events:
			switch ev.Type {
			case "typing_start", "typing_stop", "typing":
				m.res.Received++
			case "error":
				m.res.Errors++
				r.out.errorFrame(m.u.ID, ev, time.Now())
			}
			v.apply(ev, time.Now())
		case now := <-tick.C:
			v.expire(now)
		case <-stop:
			return
		}
		if line := v.line(); line != last {
			last = line
			m.res.Lines++
			r.out.sees(m.u.ID, line, time.Now())
		}
	}
}

// drive is the member's driver goroutine: it plays the script, feeds the
// typist, sends its frames, ticks it at its deadlines (refreshes, idle
// stops), and at the end cancels a draft still being typed.
func (r *runner) drive(ctx context.Context, m *member, t0 time.Time, steps []step) error {
	for _, st := range steps {
		if err := r.waitUntil(ctx, m, t0.Add(st.at)); err != nil {
			return err
		}
		now := time.Now()
		var acts []typist.Action
		switch st.kind {
		case stepKey:
			acts = m.tp.Keystroke(now)
		case stepSend:
			acts = m.tp.MessageSent(now)
		}
		if err := r.act(m, acts, now); err != nil {
			return err
		}
	}
	if r.opts.Duration > 0 {
		if err := r.waitUntil(ctx, m, t0.Add(r.opts.Duration)); err != nil {
			return err
		}
	}
	now := time.Now()
	return r.act(m, m.tp.Cancel(now), now)
}

// waitUntil sleeps until at, sending the typist's refreshes and idle stop
// on the way when they fall due.
func (r *runner) waitUntil(ctx context.Context, m *member, at time.Time) error {
	for {
		next, due := at, false
		if d, ok := m.tp.Deadline(); ok && d.Before(at) {
			next, due = d, true
		}
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		if !due {
			return nil
		}
		now := time.Now()
		if err := r.act(m, m.tp.Tick(now), now); err != nil {
			return err
		}
	}
}

func (r *runner) act(m *member, acts []typist.Action, now time.Time) error {
	for _, a := range acts {
		if err := r.send(m, map[string]string{"type": a.Frame(), "room": r.opts.Room}); err != nil {
			return err
		}
		if r.opts.Verbose {
			r.out.sent(m.u.ID, a, now)
		}
	}
	return nil
}

// joinNames lists names in English: "Alice", "Alice and Bob", "Alice, Bob
// and Carol".
func joinNames(names []string) string {
	switch len(names) {
	case 0:
		return "nobody"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// printer writes timeline lines; safe for concurrent use.
type printer struct {
	mu    sync.Mutex
	w     io.Writer
	width int
	t0    time.Time
}

func (p *printer) start(t0 time.Time) {
	p.mu.Lock()
	p.t0 = t0
	p.mu.Unlock()
}

func (p *printer) printf(at time.Time, format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%4.1fs] "+format+"\n", append([]any{at.Sub(p.t0).Seconds()}, a...)...)
}

func (p *printer) sees(user, line string, at time.Time) {
	p.printf(at, "%s sees: %s", label(user, p.width), line)
}

func (p *printer) sent(user string, a typist.Action, at time.Time) {
	p.printf(at, "%s sends %s (%s)", label(user, p.width), a.Frame(), a)
}

func (p *printer) errorFrame(user string, ev protocol.ServerFrame, at time.Time) {
	p.printf(at, "%s error: %s: %s", label(user, p.width), ev.Code, ev.Message)
}
