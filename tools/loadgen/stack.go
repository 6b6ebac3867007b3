package loadgen

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/tools/backends"
	"github.com/ellipsis-chat/ellipsis/tools/devstack"
)

// startStack starts the in-process stack for Options.Stack and points
// o.URLs at it. The stack gets unique key and subject prefixes (the run
// id), loopback listeners on free ports, no demo page, and room for all
// the connections (MaxConns, MaxConnsPerUser is per user and each load
// user has one connection). It returns the stack and a description of its
// backends.
func startStack(ctx context.Context, o *Options, log *zap.Logger) (*devstack.Stack, string, error) {
	cfg := config.Dev()
	if o.StackConfig != nil {
		cfg = *o.StackConfig
	}
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.KeyPrefix = o.RunID + ":"
	cfg.SubjectPrefix = o.RunID
	cfg.DemoPage = false
	cfg.MaxConns = max(cfg.MaxConns, o.Conns+64)
	if o.JWTSecret == "" {
		cfg.Auth = config.AuthNone
	}
	st, err := devstack.Start(ctx, devstack.Options{Config: cfg, Logger: log})
	if err != nil {
		return nil, "", fmt.Errorf("loadgen: start the in-process stack: %w", err)
	}
	o.URLs = []string{st.WebSocketURL()}
	b := st.Backends()
	desc := fmt.Sprintf("gateway+worker in this process, NATS %s (%s), Redis %s (%s), store %s, key prefix %q",
		natsconn.RedactURLs(b.NATSURL), b.NATSSource, backends.Redact(b.RedisURL), b.RedisSource, cfg.Store, cfg.KeyPrefix)
	return st, desc, nil
}
