// Command stop-typing is what a chat service does when a user's message is
// posted: it ends the user's typing indicator in the room, on every device
// (package chat, docs/protocol.md "Typing commands").
//
//	go run ./examples/go/cmd/stop-typing -room 42 -user alice
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
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/examples/go/chat"
	"github.com/ellipsis-chat/ellipsis/examples/go/natsenv"
)

func main() {
	// Not envOr: -h would print the URL's password as the default.
	natsURL := flag.String("nats", "", "NATS server URL(s), comma-separated (default $ELLIPSIS_NATS_URL, else "+nats.DefaultURL+")")
	prefix := flag.String("prefix", envOr("ELLIPSIS_SUBJECT_PREFIX", "ellipsis"), "subject prefix (ELLIPSIS_SUBJECT_PREFIX of the deployment)")
	room := flag.String("room", "", "room id (required)")
	user := flag.String("user", "", "user id whose message was posted (required)")
	flag.Parse()

	// natsenv: shared/natsconn with ELLIPSIS_NATS_CREDS, _NKEY, _TLS_* from
	// the environment; its errors show the URL without password or token.
	nc, err := natsenv.Connect(*natsURL, "example-stop-typing", 5*time.Second)
	if err != nil {
		fail(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := chat.StopTyping(ctx, nc, *prefix, *room, *user); err != nil {
		fail(err)
	}
	fmt.Printf("stop sent: user %q in room %q\n", *user, *room)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "stop-typing:", err)
	os.Exit(1)
}
