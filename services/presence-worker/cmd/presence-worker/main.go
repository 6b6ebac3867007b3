// Command presence-worker runs the Ellipsis presence worker (package worker).
// Settings come from ELLIPSIS_* variables and mirroring flags (-h lists
// them); package run gives both services' mains one shape.
package main

import (
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/worker"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/run"
)

func main() {
	run.Main(run.Spec{
		Name:    "presence-worker",
		Service: config.ServiceWorker, // gateway-only settings (auth, origins) are not checked
		New: func(cfg config.Config, log *zap.Logger) (run.Service, error) {
			return worker.New(worker.Options{Config: cfg, Logger: log})
		},
		// nil ShutdownTimeout: run.DefaultShutdownTimeout (20 s), below
		// Kubernetes' grace period.
	})
}
