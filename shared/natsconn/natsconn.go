// Package natsconn is the one NATS connection setup of the gateway and the
// presence worker: the nats.go options (name, timeouts, pings, reconnect
// with jitter), the handlers that count and log disconnects, reconnects,
// slow consumers and other asynchronous errors (rate-limited, via zap), the
// platform credentials ([Auth]: .creds, NKey, mutual TLS) and a connection
// status that can be read without waiting on nats.go's lock ([Conn.Connected],
// [Conn.Status]).
//
// No secret (password or token in the URL, seed, JWT, private key) ever
// appears in a log line, an error or a status this package writes: URLs go
// through [RedactURL], files are named by path and never quoted.
package natsconn

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
)

// Connection settings, the same for every service (nats.go option, default
// in parentheses, and why).
const (
	// ReconnectWait is the pause between reconnect attempts to the same
	// server (2s): 1s brings a service back sooner after a NATS restart.
	ReconnectWait = time.Second
	// ReconnectJitter and ReconnectJitterTLS are added at random to each
	// wait (100ms, 1s), so a fleet does not reconnect in lockstep.
	ReconnectJitter    = 500 * time.Millisecond
	ReconnectJitterTLS = time.Second
	// ConnectTimeout bounds one dial and handshake (2s).
	ConnectTimeout = 2 * time.Second
	// FlusherTimeout bounds one write to the NATS socket (1 minute).
	// nats.go writes while holding its connection lock, which every
	// publish, request and status check waits on: against a NATS that
	// stopped reading (a silent partition) a whole service would wait
	// that long. A write that makes no progress within it fails (a
	// partial one ends the connection, which is then redialed).
	FlusherTimeout = 2 * time.Second
	// PingInterval and MaxPingsOut: a connection that answers no PING for
	// PingInterval * MaxPingsOut is declared dead and redialed (2 minutes
	// and 2: a silent partition would go unnoticed for about 4 minutes).
	PingInterval = 5 * time.Second
	MaxPingsOut  = 2
	// statusPoll is how often the status is read for Connected and
	// Status; a reading that has waited statusStale (on nats.go's lock,
	// held by a blocked write) makes the connection count as
	// unresponsive, so readiness never waits on it.
	statusPoll  = 100 * time.Millisecond
	statusStale = time.Second
	// logEvery rate-limits each kind of log line of the handlers
	// (shared/ratelog): one per logEvery, saying how many were dropped.
	logEvery = time.Minute
)

// Kinds of problems passed to Options.OnError (the services' metric labels).
const (
	KindDisconnect   = "disconnect"    // the connection was lost (nats.go reconnects)
	KindSlowConsumer = "slow_consumer" // a subscription dropped messages
	KindAsync        = "async"         // any other asynchronous error (auth refused included)
)

// Options configure [Connect].
type Options struct {
	// URLs are the servers (ELLIPSIS_NATS_URL, split); at least one.
	URLs []string
	// Name is the connection name shown in the server's monitoring
	// ("ellipsis-gateway").
	Name string
	// Auth are the credentials besides user info in the URL.
	Auth Auth
	// Log receives the handlers' lines (nil: none).
	Log *zap.Logger
	// OnError, if not nil, is called with a Kind* for every problem (to
	// count them; the log lines about them are rate-limited).
	OnError func(kind string)
	// OnConnect, if not nil, is called (on a nats.go goroutine) after the
	// first connect and after every reconnect.
	OnConnect func(*nats.Conn)
	// Quiet, if not nil and true, makes a disconnect neither counted nor
	// logged (the service is shutting down and closed it).
	Quiet func() bool
	// NoReconnectBuffer makes publishes fail at once while disconnected
	// (nats.ReconnectBufSize(-1)) instead of being buffered (8 MiB) and
	// sent after the reconnect.
	NoReconnectBuffer bool
	// Extra options are applied last.
	Extra []nats.Option
}

// Conn is a connection made by [Connect]. NC is the nats.go connection
// (publish, subscribe, request, drain). All methods are safe for
// concurrent use.
type Conn struct {
	NC     *nats.Conn
	urls   []string // Options.URLs, to scrub from errors
	log    *zap.Logger
	rl     *ratelog.Logger // the handlers' lines, at most one per kind per logEvery
	closed chan struct{}   // closed by nats.go's ClosedHandler

	// state is the last status read by watch (nil before the first);
	// reading is the unix ns at which the reading in progress began (0:
	// none in progress).
	state   atomic.Pointer[observed]
	reading atomic.Int64
}

// observed is one reading of the connection status.
type observed struct {
	status     nats.Status
	lastErr    string // nats.go's last error while not connected; never holds a secret
	maxPayload int64  // the server's max_payload (bytes) while connected; 0: not read
}

// Connect checks o.Auth ([Auth.Check], every file parsed) and dials NATS,
// returning at once even when no server is reachable yet:
//
//   - RetryOnFailedConnect(true), MaxReconnects(-1),
//     IgnoreAuthErrorAbort(): a service starts and keeps serving
//     (readiness reports NATS down) while NATS is down or refuses its
//     credentials, and keeps retrying in the background, so a rotated
//     credential or a restored server brings it back.
//   - ReconnectWait, ReconnectJitter, ConnectTimeout, FlusherTimeout,
//     PingInterval, MaxPingsOut: see their docs; a silent partition is
//     noticed (and redialed) within about 10 to 15 s.
//   - Disconnect / Reconnect / Connect / Error handlers count (OnError) and
//     log, rate-limited per kind; an auth error says which settings carry
//     credentials.
//   - Subscriptions keep nats.go's pending limits unless the caller sets
//     its own; beyond them NATS drops messages and the ErrorHandler reports
//     a slow consumer (KindSlowConsumer, logged with subject and pending).
//
// Errors (bad credentials files, an invalid option) name the setting and
// never hold a secret.
func Connect(o Options) (*Conn, error) {
	if len(o.URLs) == 0 {
		return nil, fmt.Errorf("natsconn: %s: no server URL", EnvURL)
	}
	if err := o.Auth.Check(o.URLs); err != nil {
		return nil, err
	}
	authOpts, err := o.Auth.options()
	if err != nil {
		return nil, err
	}
	h := newHandlers(o)
	opts := append(connOptions(o.Name), h.options()...)
	if o.NoReconnectBuffer {
		opts = append(opts, nats.ReconnectBufSize(-1))
	}
	opts = append(opts, authOpts...)
	opts = append(opts, o.Extra...)
	nc, err := nats.Connect(strings.Join(o.URLs, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("natsconn: connect to %s: %w", RedactURLs(strings.Join(o.URLs, ",")), scrub(err, o.URLs))
	}
	h.c.NC = nc
	go h.c.watch() // ends when the connection is closed
	return h.c, nil
}

// logAuth logs (rate-limited) that the server refused the credentials.
func (c *Conn) logAuth(err error) {
	c.rl.Error("auth", "nats refused the credentials; retrying (logged at most once a minute): check "+
		EnvURL+" (user, password, token), "+EnvCreds+", "+EnvNKey+", "+EnvTLSCert, zap.Error(err))
}

// IsAuthError reports whether err is the server refusing the credentials.
func IsAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}

// scrubbedError is an error whose message had the URLs' user info removed.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// userInfo matches the scheme and user info of a URL written anywhere in
// a message ("nats://alice:s3cret@"), for scrub.
var userInfo = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@"']*@`)

// scrub returns err with every URL of urls in its message redacted by
// [RedactURL], whole URLs only (a short token is not replaced inside
// other words), also when a URL without a scheme shows with the nats://
// nats.go adds; then the user info of any other scheme://user@ in the
// message is replaced too. errors.Is keeps working.
func scrub(err error, urls []string) error {
	msg := err.Error()
	for _, u := range urls {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if !strings.Contains(u, "://") {
			msg = strings.ReplaceAll(msg, "nats://"+u, RedactURL("nats://"+u))
		}
		msg = strings.ReplaceAll(msg, u, RedactURL(u))
	}
	msg = userInfo.ReplaceAllStringFunc(msg, func(m string) string {
		return m[:strings.Index(m, "://")+3] + "xxxxx@"
	})
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

// watch reads the status every statusPoll until the connection is closed,
// for Connected and Status. A read may wait on nats.go's lock (up to
// FlusherTimeout); the callers of Connected and Status never do.
//
// It also logs (rate-limited) each new last error while not connected:
// nats.go reports no asynchronous error before the first connect, so a
// service that never connected (wrong credentials, a TLS handshake
// refused) would otherwise say nothing about why.
func (c *Conn) watch() {
	t := time.NewTicker(statusPoll)
	defer t.Stop()
	var lastLogged error
	for {
		c.reading.Store(time.Now().UnixNano())
		o := &observed{status: c.NC.Status()}
		var lastErr error
		if o.status == nats.CONNECTED {
			o.maxPayload = c.NC.MaxPayload()
		}
		if o.status != nats.CONNECTED && o.status != nats.CLOSED {
			if lastErr = c.NC.LastError(); lastErr != nil {
				lastErr = scrub(lastErr, c.urls)
				o.lastErr = lastErr.Error()
			}
		}
		c.state.Store(o)
		c.reading.Store(0)
		if lastErr != nil && (lastLogged == nil || lastErr.Error() != lastLogged.Error()) {
			lastLogged = lastErr
			if IsAuthError(lastErr) || strings.Contains(strings.ToLower(lastErr.Error()), "authorization violation") {
				c.logAuth(lastErr)
			} else {
				c.rl.Warn("connect", "nats not connected; retrying (logged at most once a minute)", zap.String("status", o.status.String()), zap.Error(lastErr))
			}
		}
		select {
		case <-c.closed:
			c.state.Store(&observed{status: nats.CLOSED})
			return
		case <-t.C:
		}
	}
}

// observe returns the last reading and whether it is fresh; no I/O, no
// nats.go lock.
func (c *Conn) observe() (*observed, bool) {
	fresh := true
	if r := c.reading.Load(); r != 0 && time.Now().UnixNano()-r > int64(statusStale) {
		fresh = false
	}
	o := c.state.Load()
	if o == nil {
		return &observed{status: nats.CONNECTING}, fresh
	}
	return o, fresh
}

// Connected reports whether NATS is connected, as observed at most
// statusPoll (100ms) ago; false while a reading of the status has waited
// statusStale (1s: a write to NATS is blocked). It never waits.
func (c *Conn) Connected() bool {
	o, fresh := c.observe()
	return fresh && o.status == nats.CONNECTED
}

// MaxPayload is the server's max_payload in bytes (from its INFO), as
// observed at most statusPoll (100ms) ago while connected; 0 when the
// latest reading was not of a connected status (connecting, reconnecting,
// closed). It never waits: nats.go's own
// MaxPayload takes the connection's lock, which its flusher holds across
// socket writes, so a per-publish call there waits behind a slow write.
func (c *Conn) MaxPayload() int64 {
	if o := c.state.Load(); o != nil && o.maxPayload > 0 {
		return o.maxPayload
	}
	return 0
}

// Status describes the connection for readiness: "CONNECTED",
// "RECONNECTING", "RECONNECTING: nats: authorization violation" (the last
// error while not connected), ..., or "UNRESPONSIVE (a write to NATS is
// blocked)". It never waits and never holds a secret.
func (c *Conn) Status() string {
	o, fresh := c.observe()
	if !fresh {
		return "UNRESPONSIVE (a write to NATS is blocked)"
	}
	if o.lastErr != "" {
		return o.status.String() + ": " + o.lastErr
	}
	return o.status.String()
}

// Closed is closed once the connection is closed for good (Close, or the
// end of a Drain).
func (c *Conn) Closed() <-chan struct{} { return c.closed }

// Probe makes one connection with a's credentials (checked first, as by
// Connect), without retries, and closes it: for tools that check a NATS
// before using it. timeout bounds each server's dial and handshake. Its
// errors name the setting or say what failed, never a secret.
func Probe(urls []string, a Auth, name string, timeout time.Duration) error {
	if len(urls) == 0 {
		return fmt.Errorf("natsconn: %s: no server URL", EnvURL)
	}
	if err := a.Check(urls); err != nil {
		return err
	}
	opts, err := a.options()
	if err != nil {
		return err
	}
	opts = append(opts, nats.Name(name), nats.Timeout(timeout), nats.NoReconnect(), nats.RetryOnFailedConnect(false))
	nc, err := nats.Connect(strings.Join(urls, ","), opts...)
	if err != nil {
		return scrub(err, urls)
	}
	nc.Close()
	return nil
}
