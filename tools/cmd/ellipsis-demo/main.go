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
	fs := flag.NewFlagSet("ellipsis-demo", flag.ContinueOnError)
	var (
		url      = fs.String("url", demo.DefaultURL, "the gateway's WebSocket endpoint")
		room     = fs.String("room", demo.DefaultRoom, "room the users join")
		speed    = fs.Float64("speed", 1, "replay speed factor for the recorded typing (2 = twice as fast); client timers stay real time")
		duration = fs.Duration("duration", demo.DefaultDuration, "how long the users type (0 with -messages: until done)")
		messages = fs.Int("messages", 0, "messages each user sends before stopping (0: no limit)")
		token    = fs.String("token", "", "JWTs, comma-separated, one per user in the order alice,bob,carol (ELLIPSIS_AUTH=jwt)")
		secret   = fs.String("jwt-secret", "", "mint HS256 tokens with the stack's secret (default $ELLIPSIS_JWT_SECRET)")
		data     = fs.String("keystrokes", "", "replay sessions from this keystroke CSV instead of the embedded sample (e.g. the full neuroqwerty_controls_keystrokes.csv)")
		verbose  = fs.Bool("v", false, "also print every typing frame a user sends")
	)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *secret == "" { // not the flag's default: -h would print it
		*secret = os.Getenv("ELLIPSIS_JWT_SECRET")
	}
	durationSet := false
	fs.Visit(func(f *flag.Flag) { durationSet = durationSet || f.Name == "duration" })
	opts := demo.Options{
		URL:       *url,
		Room:      *room,
		Speed:     *speed,
		Duration:  *duration,
		Messages:  *messages,
		JWTSecret: *secret,
		Verbose:   *verbose,
		Out:       os.Stdout,
	}
	if *messages > 0 && !durationSet {
		opts.Duration = 0 // bounded by -messages only
	}
	if *speed <= 0 {
		fmt.Fprintln(os.Stderr, "ellipsis-demo: -speed must be positive")
		return 2
	}
	if *token != "" {
		users := demo.DefaultUsers()
		toks := strings.Split(*token, ",")
		if len(toks) != len(users) {
			fmt.Fprintf(os.Stderr, "ellipsis-demo: -token needs %d tokens (alice,bob,carol), got %d\n", len(users), len(toks))
			return 2
		}
		opts.Tokens = map[string]string{}
		for i, u := range users {
			opts.Tokens[u.ID] = strings.TrimSpace(toks[i])
		}
	}
	if *data != "" {
		s, err := keystrokes.Load(*data)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ellipsis-demo:", err)
			return 1
		}
		opts.Sessions = s
	}

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
