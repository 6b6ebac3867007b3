// Command presence-worker runs the Ellipsis presence worker (package worker).
// Settings come from ELLIPSIS_* variables and mirroring flags (-h lists them).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	worker "github.com/ellipsis-chat/ellipsis/services/presence-worker"
	"github.com/ellipsis-chat/ellipsis/shared/buildinfo"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/logging"
)

func main() { os.Exit(run()) }

func run() int {
	if buildinfo.HandleFlag("presence-worker", os.Args[1:], os.Stdout) {
		return 0
	}
	base := config.Default()
	base.Service = config.ServiceWorker // gateway-only settings (auth, origins) are not checked
	cfg, err := config.Load(flag.CommandLine, os.Args[1:], os.LookupEnv, base)
	if err != nil {
		fmt.Fprintln(os.Stderr, "presence-worker: configuration:", err)
		return 2
	}
	log, err := logging.New(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "presence-worker:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := worker.New(worker.Options{Config: cfg, Logger: log})
	if err == nil {
		err = srv.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "presence-worker:", err)
		return 1
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // < k8s grace period
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "presence-worker: shutdown:", err)
		return 1
	}
	return 0
}
