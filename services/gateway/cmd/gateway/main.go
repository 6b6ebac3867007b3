// Command gateway runs the Ellipsis WebSocket gateway. Settings come from
// ELLIPSIS_* environment variables and the flags that mirror them
// (gateway -h lists them); package run gives both services' mains one shape.
package main

import (
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/run"
)

func main() {
	run.Main(run.Spec{
		Name:    "gateway",
		Service: config.ServiceGateway,
		New: func(cfg config.Config, log *zap.Logger) (run.Service, error) {
			return gateway.New(gateway.Options{Config: cfg, Logger: log})
		},
		// An upper bound only: Shutdown takes the lame duck plus the drain
		// window plus the NATS drain, and shortens the first two to half
		// the time left each. Kubernetes' grace period must cover preStop
		// + lame duck + drain + a margin (deploy/manifests_test.go checks
		// it).
		ShutdownTimeout: func(cfg config.Config) time.Duration {
			return 2*(cfg.LameDuck+cfg.ShutdownDrain) + 10*time.Second
		},
	})
}
