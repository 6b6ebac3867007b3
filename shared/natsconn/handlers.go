package natsconn

import (
	"errors"
	"sync"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
)

// connOptions are the nats.go options every service's connection gets
// (see the connection settings above): reconnect forever with jitter, also
// after a refused auth, and notice a silent partition by the pings.
func connOptions(name string) []nats.Option {
	return []nats.Option{
		nats.Name(name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.IgnoreAuthErrorAbort(),
		nats.ReconnectWait(ReconnectWait),
		nats.ReconnectJitter(ReconnectJitter, ReconnectJitterTLS),
		nats.Timeout(ConnectTimeout),
		nats.FlusherTimeout(FlusherTimeout),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
	}
}

// handlers are a connection's nats.go event handlers: they count problems
// (OnError), log them rate-limited per kind, and close c.closed once.
type handlers struct {
	c         *Conn
	onError   func(kind string)
	quiet     func() bool
	onConnect func(*nats.Conn)
	closeOnce sync.Once
}

// newHandlers returns the handlers of o's connection, with the defaults
// of [Options] for what o leaves nil, and the [Conn] they report to.
func newHandlers(o Options) *handlers {
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	h := &handlers{
		c:         &Conn{urls: o.URLs, log: log, rl: ratelog.New(log, logEvery), closed: make(chan struct{})},
		onError:   o.OnError,
		quiet:     o.Quiet,
		onConnect: o.OnConnect,
	}
	if h.onError == nil {
		h.onError = func(string) {}
	}
	if h.quiet == nil {
		h.quiet = func() bool { return false }
	}
	return h
}

// options are the handler options of h.
func (h *handlers) options() []nats.Option {
	return []nats.Option{
		nats.ConnectHandler(h.connected("nats connected")),
		nats.ReconnectHandler(h.connected("nats reconnected")),
		nats.DisconnectErrHandler(h.disconnected),
		nats.ClosedHandler(func(*nats.Conn) { h.closeOnce.Do(func() { close(h.c.closed) }) }),
		nats.ErrorHandler(h.asyncError),
	}
}

// connected logs a (re)connection as msg, with the server, and calls
// OnConnect.
func (h *handlers) connected(msg string) func(*nats.Conn) {
	return func(nc *nats.Conn) {
		h.c.log.Info(msg, zap.String("url", RedactURL(nc.ConnectedUrl())), zap.String("server_id", nc.ConnectedServerId()))
		if h.onConnect != nil {
			h.onConnect(nc)
		}
	}
}

// disconnected counts and logs a lost connection; err is nil when it was
// closed on purpose, and Quiet silences the shutdown's.
func (h *handlers) disconnected(_ *nats.Conn, err error) {
	if err == nil || h.quiet() {
		return
	}
	h.onError(KindDisconnect)
	h.c.rl.Warn(KindDisconnect, "nats disconnected; reconnecting (logged at most once a minute)", zap.Error(err))
}

// asyncError counts and logs an asynchronous error: a slow consumer (with
// the subscription's subject and pending count), refused credentials, or
// any other.
func (h *handlers) asyncError(_ *nats.Conn, sub *nats.Subscription, err error) {
	subject := ""
	if sub != nil {
		subject = sub.Subject
	}
	if errors.Is(err, nats.ErrSlowConsumer) {
		h.onError(KindSlowConsumer)
		pending := 0
		if sub != nil {
			pending, _, _ = sub.Pending()
		}
		h.c.rl.Warn(KindSlowConsumer, "nats slow consumer: messages dropped (logged at most once a minute)",
			zap.String("subject", subject), zap.Int("pending", pending))
		return
	}
	h.onError(KindAsync)
	if IsAuthError(err) {
		h.c.logAuth(err)
		return
	}
	h.c.rl.Warn(KindAsync, "nats async error (logged at most once a minute)", zap.String("subject", subject), zap.Error(err))
}
