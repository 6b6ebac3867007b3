// Command ellipsis-dev runs the whole Ellipsis stack in one process for
// development (`make run`): the gateway and the presence worker, an embedded
// nats-server, and Redis: ELLIPSIS_REDIS_URL if set, else a local Redis on
// 127.0.0.1:6379 if one answers, else an embedded Redis-compatible server.
// Auth is "none" (?user=&name=) and logs are console lines unless the
// environment or flags say otherwise; every ELLIPSIS_* variable and its
// flag apply (go run ./tools/cmd/ellipsis-dev -help lists them):
//
//	make run
//	ELLIPSIS_AUTH=jwt ELLIPSIS_JWT_SECRET=devsecret make run
//	ELLIPSIS_NATS_URL=nats://127.0.0.1:4222 ELLIPSIS_HTTP_ADDR=:8081 make run
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/buildinfo"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/logging"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/tools/backends"
	"github.com/ellipsis-chat/ellipsis/tools/devstack"
)

// shutdownTimeout bounds the graceful stop; the gateway drains its clients
// over ELLIPSIS_SHUTDOWN_DRAIN (5 s) inside it.
const shutdownTimeout = 30 * time.Second

func main() { os.Exit(run()) }

func run() int {
	if buildinfo.HandleFlag("ellipsis-dev", os.Args[1:], os.Stdout) {
		return 0
	}
	cfg, err := config.Load(flag.CommandLine, os.Args[1:], os.LookupEnv, config.Dev())
	if err != nil {
		fmt.Fprintf(os.Stderr, "ellipsis-dev: configuration:\n%v\n", err)
		return 2
	}
	log, err := logging.New(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ellipsis-dev:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	st, err := devstack.Start(ctx, devstack.Options{Config: cfg, Logger: log})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "ellipsis-dev: interrupted during start")
			return 130
		}
		fmt.Fprintf(os.Stderr, "ellipsis-dev: cannot start: %v\n", err)
		return 1
	}

	b := st.Backends()
	fmt.Printf(`
  Ellipsis dev stack is up.

    Demo page:   %s
    WebSocket:   %s   (auth %s%s)
    Admin:       %s
    NATS:        %s (%s)
    Redis:       %s (%s)

%s
  Ctrl-C stops the stack.

`, st.URL(), st.WebSocketURL(), cfg.Auth, authHint(cfg.Auth), adminLine(st.AdminAddr()),
		natsconn.RedactURLs(b.NATSURL), b.NATSSource, backends.Redact(b.RedisURL), b.RedisSource, openHint(cfg.Auth, st.URL()))

	<-ctx.Done()
	stop() // a second Ctrl-C kills the process at once
	log.Info("signal received, shutting down (Ctrl-C again to force)")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := st.Shutdown(sctx); err != nil {
		fmt.Fprintf(os.Stderr, "ellipsis-dev: shutdown: %v\n", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

func adminLine(addr string) string {
	if addr == "" {
		return "(disabled: ELLIPSIS_ADMIN_ADDR is empty)"
	}
	return "http://" + devstack.BrowserHost(addr) + "/healthz  /readyz  /metrics"
}

// openHint tells how to see the indicator in two tabs: with auth none any
// name will do; with jwt each tab needs a token (README, "Quick start").
func openHint(mode, url string) string {
	if mode == config.AuthNone {
		return fmt.Sprintf(`  Open %s in two browser tabs (or two browsers), enter a different name
  in each, join the same room, and type in one: the other shows
  "… is typing". Send the message: it appears in every tab, and the
  indicator clears through the platform's stop (examples/go/chat).
  The thread pane types in a thread; a message with @assistant gets an agent's reply.
  Or run the scripted users: make demo
`, url)
	}
	return fmt.Sprintf(`  Auth is jwt: each tab needs its own token. Mint one per user with
    go run ./tools/cmd/ellipsis-token -sub alice -name Alice   (HS256: -secret-file or $ELLIPSIS_JWT_SECRET; JWKS: -key)
  open %s?room=lobby&token=<the token> in two tabs, one token each,
  and type in one: the other shows "… is typing". Or run the scripted users:
  make demo (HS256: with ELLIPSIS_JWT_SECRET set)
`, url)
}

func authHint(mode string) string {
	if mode == config.AuthNone {
		return ": ?user=alice&name=Alice"
	}
	return ": Authorization: Bearer <JWT>, or Sec-WebSocket-Protocol: ellipsis.v1, ellipsis.bearer.<JWT> (browsers)"
}
