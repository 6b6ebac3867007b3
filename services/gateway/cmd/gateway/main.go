// Command gateway runs the Ellipsis WebSocket gateway. Settings come from
// ELLIPSIS_* environment variables and the flags that mirror them
// (gateway -h lists them).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway"
	"github.com/ellipsis-chat/ellipsis/shared/buildinfo"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/logging"
)

func main() {
	if buildinfo.HandleFlag("gateway", os.Args[1:], os.Stdout) {
		return
	}
	base := config.Default()
	base.Service = config.ServiceGateway
	cfg, err := config.Load(flag.CommandLine, os.Args[1:], os.LookupEnv, base)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway: config:", err)
		os.Exit(2)
	}
	log, err := logging.New(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	}
	defer log.Sync()
	srv, err := gateway.New(gateway.Options{Config: cfg, Logger: log})
	if err != nil {
		log.Error("invalid configuration", zap.Error(err))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := srv.Start(ctx); err != nil {
		log.Fatal("start failed", zap.Error(err))
	}
	<-ctx.Done()
	stop()
	// An upper bound only: Shutdown takes the lame duck plus the drain
	// window plus the NATS drain, and shortens the first two to half the
	// time left each. Kubernetes' grace period must cover preStop + lame
	// duck + drain + a margin (deploy/manifests_test.go checks it).
	sctx, cancel := context.WithTimeout(context.Background(), 2*(cfg.LameDuck+cfg.ShutdownDrain)+10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("shutdown", zap.Error(err))
	}
}
