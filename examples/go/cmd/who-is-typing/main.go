// Command who-is-typing asks the presence workers who is typing in a room
// (package whoistyping, docs/protocol.md "Snapshot request/reply") and
// prints one line per typist, then the total.
//
//	go run ./examples/go/cmd/who-is-typing -room 42
//
// Flags -nats and -prefix as in stop-typing.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/examples/go/natsenv"
	"github.com/ellipsis-chat/ellipsis/examples/go/whoistyping"
)

func main() {
	// Not envOr: -h would print the URL's password as the default.
	natsURL := flag.String("nats", "", "NATS server URL(s), comma-separated (default $ELLIPSIS_NATS_URL, else "+nats.DefaultURL+")")
	prefix := flag.String("prefix", envOr("ELLIPSIS_SUBJECT_PREFIX", "ellipsis"), "subject prefix (ELLIPSIS_SUBJECT_PREFIX of the deployment)")
	room := flag.String("room", "", "room id (required)")
	flag.Parse()

	// natsenv: shared/natsconn with ELLIPSIS_NATS_CREDS, _NKEY, _TLS_* from
	// the environment; its errors show the URL without password or token.
	nc, err := natsenv.Connect(*natsURL, "example-who-is-typing", 5*time.Second)
	if err != nil {
		fail(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply, err := whoistyping.Ask(ctx, nc, *prefix, *room)
	if err != nil {
		fail(err)
	}
	for _, t := range reply.Users {
		fmt.Printf("typing: %s (%s)\n", t.User, t.Name)
	}
	fmt.Printf("total: %d\n", reply.Total)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "who-is-typing:", err)
	os.Exit(1)
}
