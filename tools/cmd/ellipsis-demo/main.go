// Command ellipsis-demo runs three scripted users, Alice, Bob and Carol,
// against a running Ellipsis stack (`make run`): they join one room and type
// messages with keystroke timings replayed from real human typing, and the
// demo prints the "who is typing" line each of them sees whenever it
// changes, then how many typing frames the client timers sent for how many
// keystrokes.
//
//	go run ./tools/cmd/ellipsis-demo [-url ws://localhost:8080/v1/ws] [-room demo] [-speed 1] [-duration 25s] [-messages 0]
//
// With ELLIPSIS_AUTH=jwt on the stack, pass -jwt-secret (default
// $ELLIPSIS_JWT_SECRET) to mint a token per user, or -token with one token
// per user, comma-separated, in the order alice,bob,carol.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/buildinfo"
	"github.com/ellipsis-chat/ellipsis/tools/demo"
	"github.com/ellipsis-chat/ellipsis/tools/keystrokes"
)

func main() { os.Exit(run()) }

func run() int {
	if buildinfo.HandleFlag("ellipsis-demo", os.Args[1:], os.Stdout) {
		return 0
	}
	f, err := parseFlags(os.Args[1:])
	if err == flag.ErrHelp {
		return 0
	} else if err != nil {
		return 2
	}
	opts, err := f.options()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ellipsis-demo:", err)
		return 2
	}
	if *f.data != "" {
		if opts.Sessions, err = keystrokes.Load(*f.data); err != nil {
			fmt.Fprintln(os.Stderr, "ellipsis-demo:", err)
			return 1
		}
	}
	return play(opts)
}

// flags are the command line.
type flags struct {
	url, room, token, secret, data *string
	speed                          *float64
	duration                       *time.Duration
	durationSet                    bool
	messages                       *int
	verbose                        *bool
}

// parseFlags parses args; the error is flag.ErrHelp for -h. An empty
// -jwt-secret takes $ELLIPSIS_JWT_SECRET (not as the flag's default: -h
// would print it).
func parseFlags(args []string) (*flags, error) {
	fs := flag.NewFlagSet("ellipsis-demo", flag.ContinueOnError)
	f := &flags{
		url:      fs.String("url", demo.DefaultURL, "the gateway's WebSocket endpoint"),
		room:     fs.String("room", demo.DefaultRoom, "room the users join"),
		speed:    fs.Float64("speed", 1, "replay speed factor for the recorded typing (2 = twice as fast); client timers stay real time"),
		duration: fs.Duration("duration", demo.DefaultDuration, "how long the users type (0 with -messages: until done)"),
		messages: fs.Int("messages", 0, "messages each user sends before stopping (0: no limit)"),
		token:    fs.String("token", "", "JWTs, comma-separated, one per user in the order alice,bob,carol (ELLIPSIS_AUTH=jwt)"),
		secret:   fs.String("jwt-secret", "", "mint HS256 tokens with the stack's secret (default $ELLIPSIS_JWT_SECRET)"),
		data:     fs.String("keystrokes", "", "replay sessions from this keystroke CSV instead of the embedded sample (e.g. the full neuroqwerty_controls_keystrokes.csv)"),
		verbose:  fs.Bool("v", false, "also print every typing frame a user sends"),
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *f.secret == "" {
		*f.secret = os.Getenv("ELLIPSIS_JWT_SECRET")
	}
	fs.Visit(func(fl *flag.Flag) { f.durationSet = f.durationSet || fl.Name == "duration" })
	return f, nil
}

// options turns the flags into demo.Options: -messages without -duration
// is bounded by the messages only; -speed must be positive; -token holds
// one token per default user.
func (f *flags) options() (demo.Options, error) {
	opts := demo.Options{
		URL:       *f.url,
		Room:      *f.room,
		Speed:     *f.speed,
		Duration:  *f.duration,
		Messages:  *f.messages,
		JWTSecret: *f.secret,
		Verbose:   *f.verbose,
		Out:       os.Stdout,
	}
	if *f.messages > 0 && !f.durationSet {
		opts.Duration = 0
	}
	if *f.speed <= 0 {
		return opts, errors.New("-speed must be positive")
	}
	if *f.token != "" {
		users := demo.DefaultUsers()
		toks := strings.Split(*f.token, ",")
		if len(toks) != len(users) {
			return opts, fmt.Errorf("-token needs %d tokens (alice,bob,carol), got %d", len(users), len(toks))
		}
		opts.Tokens = map[string]string{}
		for i, u := range users {
			opts.Tokens[u.ID] = strings.TrimSpace(toks[i])
		}
	}
	return opts, nil
}

// play runs the demo until done or interrupted, prints the summary, and
// returns the exit code: 1 on failure, 130 when interrupted.
func play(opts demo.Options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, err := demo.Run(ctx, opts)
	if res != nil {
		if werr := res.WriteSummary(os.Stdout); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		if ctx.Err() != nil && res != nil {
			fmt.Fprintf(os.Stderr, "ellipsis-demo: interrupted after %.1f s\n", time.Since(start).Seconds())
			return 130
		}
		fmt.Fprintln(os.Stderr, "ellipsis-demo:", err)
		return 1
	}
	return 0
}
