// Command who-is-typing asks the presence workers who is typing in a room
// (package whoistyping, docs/protocol.md "Snapshot request/reply") and
// prints one line per typist ("<activity>: <user> (<name>)"), then the
// total, of the room itself and then of each thread with a typist.
//
//	go run ./examples/go/cmd/who-is-typing -room 42
//
// Flags -nats and -prefix as in stop-typing.
package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/ellipsis-chat/ellipsis/examples/go/natsenv"
	"github.com/ellipsis-chat/ellipsis/examples/go/whoistyping"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

func main() {
	var dep natsenv.Deployment
	dep.AddFlags(flag.CommandLine)
	room := flag.String("room", "", "room id (required)")
	flag.Parse()

	// natsenv: shared/natsconn with ELLIPSIS_NATS_CREDS, _NKEY, _TLS_* from
	// the environment; its errors show the URL without password or token.
	nc, err := dep.Connect("example-who-is-typing")
	if err != nil {
		natsenv.Fail("who-is-typing", err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply, err := whoistyping.Ask(ctx, nc, dep.Prefix, *room)
	if err != nil {
		natsenv.Fail("who-is-typing", err)
	}
	for _, t := range reply.Users {
		fmt.Printf("%s: %s (%s)\n", activity(reply.Activities, t.User), t.User, t.Name)
	}
	fmt.Printf("total: %d\n", reply.Total)
	for _, th := range reply.Threads {
		for _, t := range th.Users {
			fmt.Printf("%s in thread %q: %s (%s)\n", activity(th.Activities, t.User), th.Thread, t.User, t.Name)
		}
		fmt.Printf("total in thread %q: %d\n", th.Thread, th.Total)
	}
}

// activity is user's activity in a scope's Activities ("typing" when not
// listed).
func activity(acts map[string]string, user string) string {
	if a, ok := acts[user]; ok {
		return a
	}
	return protocol.ActivityTyping
}
