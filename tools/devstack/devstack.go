// Package devstack runs the whole Ellipsis stack in one process for
// development (`make run`) and for tests: a NATS and a Redis (configured,
// local, or embedded; see package backends), the presence worker and the
// gateway, sharing one Prometheus registry, served on the gateway's admin
// listener only. With the demo page and auth none, it also serves the
// demo page's chat service (examples/go/chat) under /demo/chat/: a message
// posted in one tab reaches the room's other tabs and ends its author's
// typing through the platform's stop command on NATS (in its thread when
// it names one), and a message mentioning @assistant makes the chat's
// assistant think in its scope for [DefaultAssistantThink] (activity
// "thinking", its own ttl_ms) and then reply there.
//
//	st, err := devstack.Start(ctx, devstack.Options{Config: cfg, Logger: log})
//	if err != nil { ... }
//	defer st.Shutdown(ctx)
//	fmt.Println("open", st.URL())
package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/examples/go/agent"
	"github.com/ellipsis-chat/ellipsis/examples/go/chat"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/testkit/inproc"
	"github.com/ellipsis-chat/ellipsis/tools/backends"
)

// Options configures [Start].
type Options struct {
	// Config is the loaded configuration (config.Load over config.Dev()).
	// NATSURL and RedisURL are only used when set explicitly (Config.IsSet);
	// otherwise package backends chooses (embedded NATS; local or embedded
	// Redis). The worker runs without its own admin listener.
	Config config.Config
	// Logger receives the stack's logs (each service names its own
	// logger). Nil means none.
	Logger *zap.Logger
	// Registry receives both services' metrics, served on the gateway's
	// admin /metrics. Nil means a new one with the Go and process
	// collectors.
	Registry *prometheus.Registry
	// Backends tunes the choice of NATS and Redis: ConnectTimeout,
	// ProbeTimeout, DefaultRedisURL. Its Config and Logger are ignored.
	Backends backends.Options
	// AssistantThink is how long the demo chat's assistant thinks before
	// it replies (0 = DefaultAssistantThink).
	AssistantThink time.Duration
}

// DefaultAssistantThink is the demo chat assistant's think time.
const DefaultAssistantThink = 8 * time.Second

// Stack is a running dev stack.
type Stack struct {
	cfg      config.Config
	log      *zap.Logger
	reg      *prometheus.Registry
	back     *backends.Backends
	services *inproc.Stack  // the worker and the gateway
	chat     *chat.Service  // the demo page's chat service; nil without one
	chatNC   *natsconn.Conn // the chat service's NATS connection

	once sync.Once
	err  error
}

// Start resolves NATS and Redis, then starts the worker and the gateway.
// It returns once the gateway serves. On error everything started is
// stopped again; the error says which part failed (for instance the
// public listener's address in use).
func Start(ctx context.Context, opts Options) (*Stack, error) {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	cfg := opts.Config
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}

	// Bind-check the public address first: a busy :8080 is the most common
	// start failure, and it should not cost an embedded server start.
	if err := checkListen(cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("public listener ELLIPSIS_HTTP_ADDR %s: %w (is another ellipsis-dev running? choose another with -http-addr)", cfg.HTTPAddr, err)
	}

	bo := opts.Backends
	bo.Config, bo.Logger = cfg, log
	back, err := backends.Resolve(ctx, bo)
	if err != nil {
		return nil, err
	}
	s := &Stack{log: log, reg: reg, back: back}
	cfg.NATSURL, cfg.RedisURL = back.NATSURL, back.RedisURL
	if back.NATSSource == backends.Embedded {
		// The embedded nats-server asks for no credentials and speaks no TLS.
		cfg.NATSCreds, cfg.NATSNKey, cfg.NATSTLSCert, cfg.NATSTLSKey, cfg.NATSTLSCA = "", "", "", "", ""
	}
	s.cfg = cfg
	ok := false
	defer func() {
		if !ok {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = s.Shutdown(sctx)
		}
	}()

	sopts := inproc.Options{Config: cfg, Workers: 1, Gateways: 1, Logger: log, Registry: reg}
	if cfg.DemoPage && cfg.Auth == config.AuthNone {
		// The chat service trusts the user a page names: auth none only.
		if err := s.startChat(opts.AssistantThink); err != nil {
			return nil, err
		}
		sopts.DemoChat = s.chat.Handler()
	}
	// One admin listener: with a shared Registry the worker runs without
	// its own, and the gateway's serves both services' metrics.
	st, err := inproc.Start(ctx, sopts)
	if err != nil {
		return nil, err
	}
	s.services = st
	ok = true
	return s, nil
}

// startChat connects the demo chat service to NATS with the services'
// connection setup and credentials (package natsconn: ELLIPSIS_NATS_URL,
// _CREDS, _NKEY, _TLS_*). Like the services, it returns at once and keeps
// reconnecting in the background. Its assistant (chat.EnableAssistant)
// thinks for think (0 = DefaultAssistantThink) with a ttl_ms of
// agent.DefaultTTL, or ELLIPSIS_SERVICE_MAX_TTL when that is lower.
func (s *Stack) startChat(think time.Duration) error {
	clog := s.log.Named("demo-chat")
	conn, err := natsconn.Connect(natsconn.Options{
		URLs: s.cfg.NATSServers(),
		Name: "ellipsis-dev-chat",
		Auth: s.cfg.NATSAuth(),
		Log:  clog,
	})
	if err != nil {
		return fmt.Errorf("demo chat service: %w", err) // names the setting, never a secret
	}
	s.chatNC = conn
	s.chat = chat.NewService(conn.NC, s.cfg.SubjectPrefix)
	s.chat.OnStopError = func(room, user string, err error) {
		clog.Warn("stop typing after a message failed", zap.String("room", room), zap.String("user", user), zap.Error(err))
	}
	if think == 0 {
		think = DefaultAssistantThink
	}
	err = s.chat.EnableAssistant(chat.AssistantOptions{
		Agent: agent.Options{TTL: min(agent.DefaultTTL, s.cfg.ServiceMaxTTL), MaxTTL: s.cfg.ServiceMaxTTL},
		Think: think,
		OnError: func(scope agent.Scope, err error) {
			clog.Warn("the assistant's answer failed", zap.String("room", scope.Room), zap.String("thread", scope.Thread), zap.Error(err))
		},
	})
	if err != nil {
		return fmt.Errorf("demo chat service: %w", err)
	}
	return nil
}

// checkListen binds and releases addr, to report a busy address before
// anything starts. The gateway binds it again right after; a race with
// another process is still reported, by the gateway's Start.
func checkListen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ln.Close()
}

// Config is the configuration the services run with (NATSURL and RedisURL
// as resolved).
func (s *Stack) Config() config.Config { return s.cfg }

// Backends says which NATS and Redis are in use and where they come from.
func (s *Stack) Backends() *backends.Backends { return s.back }

// Registry is the shared metrics registry.
func (s *Stack) Registry() *prometheus.Registry { return s.reg }

// HTTPAddr is the gateway's bound public address (host:port).
func (s *Stack) HTTPAddr() string { return s.services.Gateways[0].HTTPAddr() }

// AdminAddr is the gateway's bound admin address, "" when disabled.
func (s *Stack) AdminAddr() string { return s.services.Gateways[0].AdminAddr() }

// URL is the demo page's URL, e.g. "http://localhost:8080/".
func (s *Stack) URL() string { return "http://" + BrowserHost(s.HTTPAddr()) + "/" }

// WebSocketURL is the WebSocket endpoint, e.g. "ws://localhost:8080/v1/ws".
func (s *Stack) WebSocketURL() string { return "ws://" + BrowserHost(s.HTTPAddr()) + "/v1/ws" }

// BrowserHost turns a bound listen address into a host:port a browser on
// this machine can open: an unspecified or empty host becomes "localhost",
// IPv6 literals get brackets. ":8080" and "0.0.0.0:8080" give
// "localhost:8080"; "127.0.0.1:8080" stays.
func BrowserHost(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// Shutdown stops the gateway first (its clients see their typists stop, its
// disconnect commands reach the worker), then the worker, then the embedded
// servers. It returns the first errors joined; ctx bounds the services'
// graceful parts. Safe to call more than once (later calls return the first
// result).
func (s *Stack) Shutdown(ctx context.Context) error {
	s.once.Do(func() {
		var errs []error
		if s.chat != nil {
			s.chat.Close() // ends the page's message streams, which the gateway's HTTP shutdown would wait for
		}
		if s.services != nil {
			if err := s.services.Shutdown(ctx); err != nil { // the gateway, then the worker
				errs = append(errs, err)
			}
		}
		if s.chatNC != nil {
			s.chatNC.NC.Close()
		}
		if s.back != nil {
			s.back.Close()
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}
