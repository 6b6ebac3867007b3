// Command stop-typing is what a chat service does when a user's message is
// posted: it ends the user's typing indicator in the room, on every device
// (package chat, docs/protocol.md "Typing commands").
//
//	go run ./examples/go/cmd/stop-typing -room 42 -user alice
//	go run ./examples/go/cmd/stop-typing -room 42 -thread t-9 -user alice   # a message posted in a thread
//
// Flags -nats (default $ELLIPSIS_NATS_URL, else nats://127.0.0.1:4222) and
// -prefix (default $ELLIPSIS_SUBJECT_PREFIX, else "ellipsis") choose the
// deployment; its NATS credentials are the services' settings, from the
// environment (package natsenv).
package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/ellipsis-chat/ellipsis/examples/go/chat"
	"github.com/ellipsis-chat/ellipsis/examples/go/natsenv"
)

func main() {
	var dep natsenv.Deployment
	dep.AddFlags(flag.CommandLine)
	room := flag.String("room", "", "room id (required)")
	thread := flag.String("thread", "", "thread of the room the message was posted in (default: the room itself)")
	user := flag.String("user", "", "user id whose message was posted (required)")
	flag.Parse()

	// natsenv: shared/natsconn with ELLIPSIS_NATS_CREDS, _NKEY, _TLS_* from
	// the environment; its errors show the URL without password or token.
	nc, err := dep.Connect("example-stop-typing")
	if err != nil {
		natsenv.Fail("stop-typing", err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := chat.StopTypingIn(ctx, nc, dep.Prefix, *room, *thread, *user); err != nil {
		natsenv.Fail("stop-typing", err)
	}
	if *thread != "" {
		fmt.Printf("stop sent: user %q in thread %q of room %q\n", *user, *thread, *room)
		return
	}
	fmt.Printf("stop sent: user %q in room %q\n", *user, *room)
}
