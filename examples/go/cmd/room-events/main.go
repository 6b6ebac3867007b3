// Command room-events prints the typing events of one room, or of every
// room, from NATS (package roomevents, docs/protocol.md "Room events on
// NATS"; the workers need ELLIPSIS_NATS_EVENTS=true).
//
//	go run ./examples/go/cmd/room-events -room 42
//	go run ./examples/go/cmd/room-events          # every room
//
// It prints one JSON line per event until interrupted. Flags -nats and
// -prefix as in stop-typing.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/examples/go/roomevents"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

func main() {
	natsURL := flag.String("nats", envOr("ELLIPSIS_NATS_URL", nats.DefaultURL), "NATS server URL(s), comma-separated")
	prefix := flag.String("prefix", envOr("ELLIPSIS_SUBJECT_PREFIX", "ellipsis"), "subject prefix (ELLIPSIS_SUBJECT_PREFIX of the deployment)")
	room := flag.String("room", "", "room id; empty = every room")
	flag.Parse()

	nc, err := nats.Connect(*natsURL, nats.Name("example-room-events"), nats.Timeout(5*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		fail(fmt.Errorf("connect to NATS %s: %w", *natsURL, err))
	}
	defer nc.Close()
	subject := roomevents.AllRoomsSubject(*prefix)
	if *room != "" {
		subject = roomevents.RoomSubject(*prefix, *room)
	}
	enc := json.NewEncoder(os.Stdout)
	_, err = roomevents.Follow(nc, subject, func(ev protocol.RoomEvent) { _ = enc.Encode(ev) },
		func(data []byte, err error) { fmt.Fprintf(os.Stderr, "room-events: skipped an event: %v\n", err) })
	if err != nil {
		fail(err)
	}
	if err := nc.Flush(); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "following %s\n", subject)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "room-events:", err)
	os.Exit(1)
}
