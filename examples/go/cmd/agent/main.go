// Command agent is a platform service that thinks before it answers
// (package agent, docs/protocol.md "Typing commands" and "Threads and
// activities"): asked to answer in a room, and optionally a thread of it,
// it shows the user "assistant" as thinking there (its own conn and
// ttl_ms, refreshed every ttl/2), thinks for -think, posts its reply and
// sends the message-posted stop in the same scope. SIGINT or SIGTERM
// during the think ends it with a stop of its own conn (no reply).
//
//	go run ./examples/go/cmd/agent -room 42 -thread t-9
//	go run ./examples/go/cmd/agent -room 42 -chat http://localhost:8080/demo/chat   # the dev stack's chat
//
// Without -chat the reply is printed; with it, it is posted to that chat
// service (examples/go/chat: POST <chat>/rooms/{room}/messages). Flags
// -nats and -prefix as in stop-typing.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ellipsis-chat/ellipsis/examples/go/agent"
	"github.com/ellipsis-chat/ellipsis/examples/go/natsenv"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dep natsenv.Deployment
	dep.AddFlags(fs)
	var scope agent.Scope
	var opts agent.Options
	fs.StringVar(&scope.Room, "room", "", "room id to answer in (required)")
	fs.StringVar(&scope.Thread, "thread", "", "thread id of the room to answer in (default: the room itself)")
	think := fs.Duration("think", 20*time.Second, "how long the agent thinks before it replies")
	fs.DurationVar(&opts.TTL, "ttl", agent.DefaultTTL, "ttl_ms of its starts (refreshed every ttl/2); at most -max-ttl")
	fs.DurationVar(&opts.MaxTTL, "max-ttl", agent.DefaultMaxTTL, "the deployment's ELLIPSIS_SERVICE_MAX_TTL")
	fs.StringVar(&opts.User, "user", agent.DefaultUser, "the agent's user id")
	fs.StringVar(&opts.Name, "name", agent.DefaultName, "the agent's display name")
	text := fs.String("reply", "Here is what I came up with.", "the reply's text")
	chatURL := fs.String("chat", "", "chat service base URL to post the reply to (default: print it)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// natsenv: shared/natsconn with ELLIPSIS_NATS_CREDS, _NKEY, _TLS_* from
	// the environment; its errors show the URL without password or token.
	nc, err := dep.Connect("example-agent")
	if err != nil {
		fmt.Fprintf(stderr, "agent: %v\n", err)
		return 1
	}
	defer nc.Close()
	opts.Prefix = dep.Prefix
	opts.OnRefreshError = func(s agent.Scope, err error) { fmt.Fprintf(stderr, "agent: refresh in %s: %v\n", s, err) }
	a, err := agent.New(nc, opts)
	if err != nil {
		fmt.Fprintf(stderr, "agent: %v\n", err)
		return 2
	}
	post := func(ctx context.Context, s agent.Scope) error {
		if *chatURL != "" {
			if err := postReply(ctx, *chatURL, s, a.User(), a.Name(), *text); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "reply in %s: %s\n", s, *text)
		return nil
	}
	fmt.Fprintf(stdout, "thinking in %s for %s\n", scope, *think)
	err = a.Answer(ctx, scope, *think, post)
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "stop sent in %s\n", scope)
		return 0
	case err == context.Canceled: // and the stop was sent
		fmt.Fprintf(stdout, "interrupted: stop of its conn sent in %s\n", scope)
		return 130
	default:
		fmt.Fprintf(stderr, "agent: %v\n", err)
		return 1
	}
}
