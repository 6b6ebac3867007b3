// Command join-authz is a join authoriser for gateways running with
// ELLIPSIS_AUTHZ=nats (package joinauthz, docs/protocol.md "Join
// authorisation hook"). Its policy, for the example: a user may join the
// rooms listed for them in -allow, and every room that starts with
// "public-".
//
//	go run ./examples/go/cmd/join-authz -allow 'alice=42,lobby;bob=lobby'
//
// It serves until interrupted. Flags -nats and -prefix as in stop-typing.
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

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/examples/go/joinauthz"
)

func main() {
	natsURL := flag.String("nats", envOr("ELLIPSIS_NATS_URL", nats.DefaultURL), "NATS server URL(s), comma-separated")
	prefix := flag.String("prefix", envOr("ELLIPSIS_SUBJECT_PREFIX", "ellipsis"), "subject prefix (ELLIPSIS_SUBJECT_PREFIX of the deployment)")
	allowFlag := flag.String("allow", "", "user=room,room;user=room... (rooms starting with public- are open to all)")
	flag.Parse()

	members := ParseAllow(*allowFlag)
	nc, err := nats.Connect(*natsURL, nats.Name("example-join-authz"), nats.Timeout(5*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		fail(fmt.Errorf("connect to NATS %s: %w", *natsURL, err))
	}
	defer nc.Close()
	sub, err := joinauthz.Serve(nc, *prefix, func(user, room string) bool {
		return strings.HasPrefix(room, "public-") || members[user][room]
	})
	if err != nil {
		fail(err)
	}
	if err := nc.Flush(); err != nil {
		fail(err)
	}
	fmt.Printf("authorising joins on %s\n", sub.Subject)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	_ = nc.Drain()
}

// ParseAllow reads "alice=42,lobby;bob=lobby" into user → set of rooms.
func ParseAllow(s string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, part := range strings.Split(s, ";") {
		user, rooms, ok := strings.Cut(part, "=")
		if !ok || user == "" {
			continue
		}
		if out[user] == nil {
			out[user] = map[string]bool{}
		}
		for _, r := range strings.Split(rooms, ",") {
			if r != "" {
				out[user][r] = true
			}
		}
	}
	return out
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "join-authz:", err)
	os.Exit(1)
}
