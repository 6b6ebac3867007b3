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

	"github.com/ellipsis-chat/ellipsis/examples/go/joinauthz"
	"github.com/ellipsis-chat/ellipsis/examples/go/natsenv"
)

func main() {
	var dep natsenv.Deployment
	dep.AddFlags(flag.CommandLine)
	allowFlag := flag.String("allow", "", "user=room,room;user=room... (rooms starting with public- are open to all)")
	flag.Parse()

	members := ParseAllow(*allowFlag)
	// natsenv: shared/natsconn with ELLIPSIS_NATS_CREDS, _NKEY, _TLS_* from
	// the environment; its errors show the URL without password or token.
	nc, err := dep.Connect("example-join-authz")
	if err != nil {
		natsenv.Fail("join-authz", err)
	}
	defer nc.Close()
	sub, err := joinauthz.Serve(nc, dep.Prefix, func(user, room string) bool {
		return strings.HasPrefix(room, "public-") || members[user][room]
	})
	if err != nil {
		natsenv.Fail("join-authz", err)
	}
	if err := nc.Flush(); err != nil {
		natsenv.Fail("join-authz", err)
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
