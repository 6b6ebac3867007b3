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

	"github.com/ellipsis-chat/ellipsis/examples/go/natsenv"
	"github.com/ellipsis-chat/ellipsis/examples/go/roomevents"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

func main() {
	var dep natsenv.Deployment
	dep.AddFlags(flag.CommandLine)
	room := flag.String("room", "", "room id; empty = every room")
	flag.Parse()

	// natsenv: shared/natsconn with ELLIPSIS_NATS_CREDS, _NKEY, _TLS_* from
	// the environment; its errors show the URL without password or token.
	nc, err := dep.Connect("example-room-events")
	if err != nil {
		natsenv.Fail("room-events", err)
	}
	defer nc.Close()
	subject := roomevents.AllRoomsSubject(dep.Prefix)
	if *room != "" {
		subject = roomevents.RoomSubject(dep.Prefix, *room)
	}
	enc := json.NewEncoder(os.Stdout)
	_, err = roomevents.Follow(nc, subject, func(ev protocol.RoomEvent) { _ = enc.Encode(ev) },
		func(data []byte, err error) { fmt.Fprintf(os.Stderr, "room-events: skipped an event: %v\n", err) })
	if err != nil {
		natsenv.Fail("room-events", err)
	}
	if err := nc.Flush(); err != nil {
		natsenv.Fail("room-events", err)
	}
	fmt.Fprintf(os.Stderr, "following %s\n", subject)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
}
