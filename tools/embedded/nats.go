// Package embedded runs the dev stack's backends inside the process: a
// nats-server and a Redis-compatible server (miniredis) whose clock follows
// the wall clock, so TTLs expire and TIME advances as on a real Redis.
// Both listen on 127.0.0.1 with a random free port; the machine's own NATS
// and Redis may hold the default ports.
package embedded

import (
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
)

// DefaultNATSReadyTimeout bounds how long StartNATS waits for the server to
// accept connections when NATSOptions.ReadyTimeout is zero.
const DefaultNATSReadyTimeout = 5 * time.Second

// NATSOptions configures [StartNATS].
type NATSOptions struct {
	// Host to listen on. Empty means "127.0.0.1".
	Host string
	// Port to listen on. Zero means a random free port.
	Port int
	// ReadyTimeout bounds the wait for the server to accept connections.
	// Zero means DefaultNATSReadyTimeout.
	ReadyTimeout time.Duration
	// Logger receives the server's warnings and errors (notices at debug
	// level). Nil means no logs.
	Logger *zap.Logger
}

// NATS is a running embedded nats-server.
type NATS struct {
	srv  *server.Server
	once sync.Once
}

// StartNATS starts a nats-server in this process (no JetStream, no
// clustering, no monitoring port) and returns once it accepts connections.
func StartNATS(opts NATSOptions) (*NATS, error) {
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	ready := opts.ReadyTimeout
	if ready == 0 {
		ready = DefaultNATSReadyTimeout
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "ellipsis-dev",
		Host:       host,
		Port:       port,
		NoSigs:     true, // the process owns its signals
		NoLog:      opts.Logger == nil,
		MaxPayload: 1 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if opts.Logger != nil {
		srv.SetLoggerV2(natsLogger{opts.Logger}, false, false, false)
	}
	srv.Start() // returns at once; the server runs its own goroutines until Shutdown
	if !srv.ReadyForConnections(ready) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats: not ready for connections on %s:%d within %s", host, port, ready)
	}
	return &NATS{srv: srv}, nil
}

// URL is the client URL, e.g. "nats://127.0.0.1:41234".
func (n *NATS) URL() string { return n.srv.ClientURL() }

// Shutdown stops the server and waits until it has stopped. Safe to call
// more than once.
func (n *NATS) Shutdown() {
	n.once.Do(func() {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	})
}

// natsLogger adapts zap to the nats-server Logger interface.
type natsLogger struct{ l *zap.Logger }

func (z natsLogger) Noticef(format string, v ...any) { z.l.Debug(fmt.Sprintf(format, v...)) }
func (z natsLogger) Warnf(format string, v ...any)   { z.l.Warn(fmt.Sprintf(format, v...)) }
func (z natsLogger) Fatalf(format string, v ...any)  { z.l.Error(fmt.Sprintf(format, v...)) }
func (z natsLogger) Errorf(format string, v ...any)  { z.l.Error(fmt.Sprintf(format, v...)) }
func (z natsLogger) Debugf(format string, v ...any)  { z.l.Debug(fmt.Sprintf(format, v...)) }
func (z natsLogger) Tracef(format string, v ...any)  {}

var _ server.Logger = natsLogger{}
