// Command join-authz is a join authoriser for gateways running with
// ELLIPSIS_AUTHZ=nats (package joinauthz, docs/protocol.md "Join
// authorisation hook"). Its policy, for the example: a user may join the
// rooms listed for them in -allow, and every room that starts with
// "public-"; -hide lists, per user, whose typing that user does not get
// in any room they join (the reply's hide_typing_from, docs/protocol.md
// "Per-viewer filters").
//
//	go run ./examples/go/cmd/join-authz -allow 'alice=42,lobby;bob=lobby'
//	go run ./examples/go/cmd/join-authz -allow 'alice=42' -hide 'alice=bob,carol'
//
// The second allows alice into 42 and public-* rooms, hiding bob's and
// carol's typing from her there. -hide is checked at start with the
// gateway's rules (each id 1..256 bytes of UTF-8 without control
// characters, at most 1,000 per user); a bad one exits 2 naming the user
// and the rule. Ids holding "=", "," or ";" cannot be written in these
// flags. It serves until interrupted. Flags -nats and -prefix as in
// stop-typing.
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
	hideFlag := flag.String("hide", "", "user=hidden,hidden;user=hidden...: whose typing each user does not get in the rooms they join (at most 1000 per user)")
	flag.Parse()

	members := ParseAllow(*allowFlag)
	hide, err := ParseHide(*hideFlag)
	if err != nil {
		fmt.Fprintf(os.Stderr, "join-authz: %v\n", err)
		os.Exit(2)
	}
	// natsenv: shared/natsconn with ELLIPSIS_NATS_CREDS, _NKEY, _TLS_* from
	// the environment; its errors show the URL without password or token.
	nc, err := dep.Connect("example-join-authz")
	if err != nil {
		natsenv.Fail("join-authz", err)
	}
	defer nc.Close()
	sub, err := joinauthz.Serve(nc, dep.Prefix, Policy(members, hide))
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

// Policy is the command's policy: user may join the rooms members lists
// for them and every room starting with "public-"; an allow hides the
// typing of hide[user].
func Policy(members map[string]map[string]bool, hide map[string][]string) joinauthz.Policy {
	return func(user, room string) joinauthz.Decision {
		if strings.HasPrefix(room, "public-") || members[user][room] {
			return joinauthz.Allow(hide[user]...)
		}
		return joinauthz.Deny
	}
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
