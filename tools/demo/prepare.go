package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/tools/keystrokes"
	"github.com/ellipsis-chat/ellipsis/tools/typist"
)

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

// prepare fills opts' defaults, checks them, asks the stack for its
// timing and auth mode (also the "is it running?" check), and builds each
// user's token and script.
func prepare(ctx context.Context, opts Options) (*runner, error) {
	opts = withDefaults(opts)
	ws, err := checkOptions(opts)
	if err != nil {
		return nil, err
	}
	sc, found, err := fetchConfig(ctx, ws, opts.DialTimeout)
	if err != nil {
		return nil, err
	}
	timers, ttl, err := clientTiming(opts, sc)
	if err != nil {
		return nil, err
	}
	tokens, err := userTokens(opts)
	if err != nil {
		return nil, err
	}
	if found && sc.Auth == config.AuthJWT && len(tokens) < len(opts.Users) {
		return nil, fmt.Errorf("the stack at %s runs with ELLIPSIS_AUTH=jwt: pass -jwt-secret (its ELLIPSIS_JWT_SECRET) or -token, one per user", ws.Redacted())
	}
	scripts, err := buildScripts(opts, timers)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
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

// withDefaults gives opts' zero fields their defaults (see [Options]).
func withDefaults(opts Options) Options {
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
	return opts
}

// checkOptions checks the speed, bounds, room, users and URL, and returns
// the parsed URL; the error lists every problem found.
func checkOptions(opts Options) (*url.URL, error) {
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
	return ws, nil
}

// clientTiming is the client timers and the ttl: opts' own, else the
// stack's GET /v1/config (sc, zero when the stack has none), else the
// protocol defaults.
func clientTiming(opts Options, sc protocol.ClientConfig) (typist.Config, time.Duration, error) {
	timers := opts.Timers
	timers.Refresh = cmp.Or(timers.Refresh, sc.Refresh())
	timers.IdleStop = cmp.Or(timers.IdleStop, sc.IdleStop())
	ttl := cmp.Or(opts.TTL, sc.TTL(), config.Default().TypingTTL)
	probe, err := typist.New(timers, ttl)
	if err != nil {
		return typist.Config{}, 0, fmt.Errorf("demo: client timers: %w", err)
	}
	return probe.Config(), ttl, nil
}

// userTokens is each user's JWT: from opts.Tokens, else minted with
// opts.JWTSecret when set; users without one connect with ?user=&name=.
func userTokens(opts Options) (map[string]string, error) {
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
	return tokens, nil
}

// buildScripts cuts each user's session into messages and paces them into
// a script (script.go).
func buildScripts(opts Options, timers typist.Config) ([][]step, error) {
	sessions := opts.Sessions
	if sessions == nil {
		var err error
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
	until := cmp.Or(opts.Duration, time.Duration(1<<63-1))
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
	return scripts, nil
}
