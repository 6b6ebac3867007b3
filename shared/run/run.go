// Package run is the one shape of the services' main functions: each
// cmd/<service>/main.go only calls [Main] with a [Spec] that wires the
// configuration to its package. Run handles, in order:
//
//  1. -version (alone): prints "<name> <build>" and exits 0, whatever the
//     environment holds;
//  2. the configuration: shared/config's defaults, then ELLIPSIS_*
//     variables, then the flags that mirror them (-h lists them), validated
//     for Spec.Service; any problem exits 2 with every problem listed;
//  3. the logger (ELLIPSIS_LOG_LEVEL, ELLIPSIS_LOG_FORMAT);
//  4. Spec.New (exit 2 when it refuses the configuration), then Start,
//     bounded by the first SIGINT or SIGTERM (exit 1 when it fails);
//  5. on the first SIGINT or SIGTERM, Shutdown, bounded by
//     Spec.ShutdownTimeout: the service's own graceful sequence (the
//     gateway's lame duck, /readyz 503 at once, then the drain; the
//     worker's drain). A second signal ends the process at once (the
//     signal's default action). Exit 0 on a clean shutdown, 1 otherwise.
package run

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/buildinfo"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/logging"
)

// Exit codes of [Run].
const (
	ExitOK     = 0 // clean shutdown, -version, -h
	ExitFailed = 1 // Start or Shutdown failed
	ExitConfig = 2 // bad flags or settings, or New refused them
)

// DefaultShutdownTimeout bounds Shutdown when Spec.ShutdownTimeout is nil;
// below Kubernetes' default grace period (30 s).
const DefaultShutdownTimeout = 20 * time.Second

// Service is what a main runs (*gateway.Server, *worker.Server).
type Service interface {
	// Start connects and serves, returning once serving; ctx bounds the
	// start only.
	Start(ctx context.Context) error
	// Shutdown stops gracefully within ctx.
	Shutdown(ctx context.Context) error
}

// Spec describes one binary.
type Spec struct {
	// Name is the program's name in -version and error lines
	// ("gateway", "presence-worker").
	Name string
	// Service is the config.Service the settings are validated for
	// (config.ServiceGateway, config.ServiceWorker).
	Service string
	// New builds the service from the validated configuration; it does no
	// I/O (Start does).
	New func(cfg config.Config, log *zap.Logger) (Service, error)
	// ShutdownTimeout bounds Shutdown for cfg; nil means
	// DefaultShutdownTimeout.
	ShutdownTimeout func(cfg config.Config) time.Duration
}

// Main runs spec with the process's arguments, environment and signals,
// and exits with [Run]'s code.
func Main(spec Spec) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, stop, spec, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Run is [Main] without the process: args without the program name,
// lookup for the environment, and ctx, which is cancelled by the first
// shutdown signal; stopSignals (may be nil) is called once ctx is done, so
// that a second signal takes its default action. It returns the exit code.
func Run(ctx context.Context, stopSignals func(), spec Spec, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if buildinfo.HandleFlag(spec.Name, args, stdout) {
		return ExitOK
	}
	base := config.Default()
	base.Service = spec.Service
	fs := flag.NewFlagSet(spec.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg, err := config.Load(fs, args, lookup, base)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: configuration: %v\n", spec.Name, err)
		return ExitConfig
	}
	log, err := logging.New(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", spec.Name, err)
		return ExitConfig
	}
	defer func() { _ = log.Sync() }()
	log.Info("starting", zap.String("service", spec.Name), zap.String("build", buildinfo.Get().String()))

	svc, err := spec.New(cfg, log)
	if err != nil {
		log.Error("invalid configuration", zap.Error(err))
		return ExitConfig
	}
	if err := svc.Start(ctx); err != nil {
		log.Error("start failed", zap.Error(err))
		// Start releases what it took when it fails.
		return ExitFailed
	}
	<-ctx.Done()
	if stopSignals != nil {
		stopSignals()
	}
	timeout := DefaultShutdownTimeout
	if spec.ShutdownTimeout != nil {
		timeout = spec.ShutdownTimeout(cfg)
	}
	log.Info("shutting down", zap.Duration("within", timeout))
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := svc.Shutdown(sctx); err != nil {
		log.Error("shutdown", zap.Error(err))
		return ExitFailed
	}
	return ExitOK
}
