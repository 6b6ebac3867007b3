// Package presence is the gateway's side of the NATS contract with the
// presence workers (docs/protocol.md, "NATS"): it publishes typing commands and
// requests typing snapshots.
package presence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// ErrUnavailable is wrapped by every failure caused by NATS being
// disconnected, a request timing out or no worker answering: clients get
// error code unavailable (HTTP 503). [Reason] says which, in words a
// client can be shown.
var ErrUnavailable = errors.New("presence: unavailable")

// unavailableError is an ErrUnavailable with a reason for clients.
type unavailableError struct {
	reason string // for clients: "timed out: no presence worker answered within 2s"
	err    error  // the cause, for logs
}

func (e *unavailableError) Error() string {
	if e.err == nil {
		return "presence: unavailable: " + e.reason
	}
	return "presence: unavailable: " + e.reason + ": " + e.err.Error()
}
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }
func (e *unavailableError) Unwrap() error        { return e.err }

func unavailable(reason string, err error) error { return &unavailableError{reason, err} }

// Reason describes a failure of [Client.Publish], [Client.Snapshot] or
// [Client.Request] for clients (error frames, HTTP bodies): "NATS not
// connected", "timed out: no presence worker answered within 2s", "no
// presence worker is running", "presence worker: ...". It never contains
// subjects or addresses.
func Reason(err error) string {
	var ue *unavailableError
	if errors.As(err, &ue) {
		return ue.reason
	}
	if err == nil {
		return ""
	}
	return "internal error"
}

// requestError classifies a failed request for [Reason].
func (c *Client) requestError(err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return unavailable("no presence worker is running", err)
	case errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrConnectionClosed):
		return unavailable("NATS not connected", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		if !c.nc.IsConnected() {
			return unavailable("NATS connection lost while waiting for a presence worker", err)
		}
		return unavailable(fmt.Sprintf("timed out: no presence worker answered within %v", c.timeout), err)
	case errors.Is(err, context.Canceled):
		return unavailable("request cancelled", err)
	case !c.nc.IsConnected():
		return unavailable("NATS not connected", err)
	}
	return unavailable("NATS request failed", err)
}

// Connection settings (nats.go options used by [Connect]).
const (
	// ClientName is the NATS connection name shown in server monitoring.
	ClientName = "ellipsis-gateway"
	// ReconnectWait is the pause between reconnect attempts to the same
	// server (nats.go default 2s); ReconnectJitter adds up to 500ms
	// (1s with TLS) so gateways do not reconnect in lockstep.
	ReconnectWait      = time.Second
	ReconnectJitter    = 500 * time.Millisecond
	ReconnectJitterTLS = time.Second
	// ConnectTimeout bounds one dial (nats.go default 2s).
	ConnectTimeout = 2 * time.Second
	// FlusherTimeout bounds one write to the NATS socket (nats.go default
	// 1 minute). nats.go writes while holding its connection lock, which
	// every publish, request and status check waits on: against a NATS
	// that stopped reading (a silent partition) the whole gateway would
	// wait that long. A write that makes no progress within it fails (a
	// partial one ends the connection, which is then redialed).
	FlusherTimeout = 2 * time.Second
	// PingInterval and MaxPingsOut: a NATS connection that answers no
	// PING for PingInterval * MaxPingsOut is declared dead and redialed
	// (nats.go defaults 2 minutes and 2: a silent partition would go
	// unnoticed for about 4 minutes).
	PingInterval = 5 * time.Second
	MaxPingsOut  = 2
	// statusPoll is how often the connection status is observed for
	// Connected and Status; a reading of it that has waited statusStale
	// (on nats.go's lock, held by a blocked write) makes the connection
	// count as unresponsive, so readiness and joins never wait on it.
	statusPoll  = 100 * time.Millisecond
	statusStale = time.Second
)

// observed is one reading of the connection status.
type observed struct {
	status nats.Status
}

// Client publishes commands and requests snapshots. All methods are safe
// for concurrent use.
type Client struct {
	nc      *nats.Conn
	names   names.Names
	timeout time.Duration
	log     *zap.Logger
	closed  chan struct{} // closed by nats.go's ClosedHandler
	// cmdBufs holds *[]byte encoding buffers of Publish: no allocation
	// per command.
	cmdBufs sync.Pool

	mu          sync.Mutex
	onReconnect func()

	// state is the last status read by watchStatus (nil before the first);
	// reading is the unix ns at which its reading in progress began (0:
	// none in progress).
	state   atomic.Pointer[observed]
	reading atomic.Int64
}

// Connect dials NATS (urls as in ELLIPSIS_NATS_URL) and returns at once,
// even when no server is reachable yet. Options, and why:
//
//   - Name("ellipsis-gateway"): visible in the NATS monitoring endpoints.
//   - RetryOnFailedConnect(true), MaxReconnects(-1): the gateway starts and
//     keeps serving (answering unavailable) while NATS is down, and
//     reconnects forever in the background; readiness reports NATS down.
//   - ReconnectWait(1s) + ReconnectJitter(500ms, 1s TLS): spread reconnects.
//   - ReconnectBufSize(-1): nats.go buffers no publishes while
//     disconnected, so a publish fails at once and a command answered
//     unavailable is never sent later.
//   - Timeout(2s): dial timeout.
//   - FlusherTimeout(2s), PingInterval(5s), MaxPingsOutstanding(2): a NATS
//     that stops reading holds nats.go's connection lock for at most 2 s
//     per write, and a silent partition is noticed (and redialed) within
//     about 10 to 15 s; Connected and Status read a status cached every
//     100 ms, so /readyz and joins never wait on that lock.
//   - Disconnect/Reconnect/Closed/Error handlers log; the reconnect (and
//     first connect) handler calls the function set by [Client.OnReconnect]
//     so the hub can resync its rooms.
//   - Subscriptions (the request/reply inbox) keep nats.go's pending limits
//     (65536 messages, 64 MiB); beyond them NATS drops messages and reports
//     a slow consumer.
//
// snapshotTimeout bounds every snapshot request (ELLIPSIS_SNAPSHOT_TIMEOUT).
// onError, if not nil, is called with metrics.NATSDisconnect,
// NATSSlowConsumer or NATSAsync for every problem (to count them; the logs
// about them are rate-limited).
func Connect(urls []string, n names.Names, snapshotTimeout time.Duration, log *zap.Logger, onError func(kind string)) (*Client, error) {
	c := &Client{names: n, timeout: snapshotTimeout, log: log, closed: make(chan struct{})}
	if onError == nil {
		onError = func(string) {}
	}
	errLog := rate.Sometimes{First: 3, Interval: time.Minute}
	disconnectLog := rate.Sometimes{First: 3, Interval: time.Minute}
	nc, err := nats.Connect(strings.Join(urls, ","),
		nats.Name(ClientName),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.ReconnectJitter(ReconnectJitter, ReconnectJitterTLS),
		nats.ReconnectBufSize(-1),
		nats.Timeout(ConnectTimeout),
		nats.FlusherTimeout(FlusherTimeout),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Info("nats connected", zap.String("url", nc.ConnectedUrlRedacted()))
			c.reconnected()
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed on purpose
				onError(metrics.NATSDisconnect)
				disconnectLog.Do(func() {
					log.Warn("nats disconnected; reconnecting (logged at most once a minute after 3)", zap.Error(err))
				})
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", zap.String("url", nc.ConnectedUrlRedacted()))
			c.reconnected()
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(c.closed) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			kind := metrics.NATSAsync
			if errors.Is(err, nats.ErrSlowConsumer) {
				kind = metrics.NATSSlowConsumer
			}
			onError(kind)
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			errLog.Do(func() {
				log.Warn("nats async error (logged at most once a minute after 3)", zap.String("kind", kind), zap.String("subject", subject), zap.Error(err))
			})
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("presence: nats connect: %w", err)
	}
	c.nc = nc
	go c.watchStatus() // ends when the connection is closed (Close)
	return c, nil
}

// OnReconnect sets f to be called (on a nats.go goroutine) after every
// (re)connect.
func (c *Client) OnReconnect(f func()) {
	c.mu.Lock()
	c.onReconnect = f
	c.mu.Unlock()
}

func (c *Client) reconnected() {
	c.mu.Lock()
	f := c.onReconnect
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

// watchStatus reads the connection status every statusPoll until the
// connection is closed, for Connected and Status. A read may wait on
// nats.go's connection lock (up to FlusherTimeout); the callers never do.
func (c *Client) watchStatus() {
	t := time.NewTicker(statusPoll)
	defer t.Stop()
	for {
		c.reading.Store(time.Now().UnixNano())
		c.state.Store(&observed{status: c.nc.Status()})
		c.reading.Store(0)
		select {
		case <-c.closed:
			c.state.Store(&observed{status: nats.CLOSED})
			return
		case <-t.C:
		}
	}
}

// observe returns the last status read and whether it is fresh (no
// reading has been waiting for statusStale); no I/O, no nats.go lock.
func (c *Client) observe() (nats.Status, bool) {
	fresh := true
	if r := c.reading.Load(); r != 0 && time.Now().UnixNano()-r > int64(statusStale) {
		fresh = false
	}
	o := c.state.Load()
	if o == nil {
		return nats.CONNECTING, fresh
	}
	return o.status, fresh
}

// Connected reports whether NATS is connected, as observed at most
// statusPoll ago; false while a reading of the status has waited
// statusStale (a write to NATS is blocked). It never waits.
func (c *Client) Connected() bool {
	st, fresh := c.observe()
	return fresh && st == nats.CONNECTED
}

// Status describes the connection for readiness ("CONNECTED",
// "RECONNECTING", ..., or "UNRESPONSIVE" while a write to NATS is
// blocked). It never waits.
func (c *Client) Status() string {
	st, fresh := c.observe()
	if !fresh {
		return "UNRESPONSIVE (a write to NATS is blocked)"
	}
	return st.String()
}

// Publish sends cmd on the command subject. It fails with an error wrapping
// [ErrUnavailable] when NATS is not connected; nothing is buffered for later.
func (c *Client) Publish(cmd *protocol.Command) error {
	if !c.Connected() {
		return unavailable("NATS not connected", nil)
	}
	bp, _ := c.cmdBufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 0, 256) // a command is about 160 bytes
		bp = &b
	}
	defer c.cmdBufs.Put(bp)
	data, err := protocol.AppendCommand((*bp)[:0], cmd)
	if err != nil {
		return fmt.Errorf("presence: encode command: %w", err)
	}
	*bp = data
	// With ReconnectBufSize(-1) this fails (never buffers) once nats.go
	// has noticed the connection is gone. nats.go copies data into its
	// write buffer before Publish returns, so the buffer is reused.
	if err := c.nc.Publish(c.names.CommandSubject(), data); err != nil {
		return unavailable("NATS not connected", err)
	}
	return nil
}

// Snapshot asks the workers who is typing in room. It waits at most the
// snapshot timeout (or ctx). Errors wrap [ErrUnavailable] (not connected,
// timeout, no responders, a worker's error reply) except for a malformed
// reply.
//
// A request the queue group routed to a worker that just died (killed, not
// yet noticed by the NATS server) is lost, so the first try waits half the
// timeout and a second try, which the group routes to a live worker, gets
// the rest: a worker crash costs a joining client half the timeout, not an
// error. Snapshots are reads; asking twice is harmless.
func (c *Client) Snapshot(ctx context.Context, room string) (protocol.Snapshot, error) {
	req, _ := json.Marshal(protocol.SnapshotRequest{V: protocol.Version, Room: room})
	subject := c.names.SnapshotSubject()
	began := time.Now()
	data, err := c.request(ctx, subject, req, c.timeout/2)
	if err != nil && c.nc.IsConnected() && ctx.Err() == nil &&
		(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
		data, err = c.request(ctx, subject, req, c.timeout-time.Since(began))
	}
	if err != nil {
		return protocol.Snapshot{}, c.requestError(fmt.Errorf("request %s: %w", subject, err))
	}
	reply, err := protocol.DecodeSnapshotReply(data)
	if err != nil {
		var re *protocol.ReplyError
		if errors.As(err, &re) {
			return protocol.Snapshot{}, unavailable("presence worker: "+re.Message, re)
		}
		return protocol.Snapshot{}, fmt.Errorf("presence: snapshot reply: %w", err)
	}
	return reply.Snapshot(), nil
}

// Request sends a request on subject and returns the reply payload, waiting
// at most the snapshot timeout (or ctx). Errors wrap [ErrUnavailable].
func (c *Client) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	data, err := c.request(ctx, subject, data, c.timeout)
	if err != nil {
		return nil, c.requestError(fmt.Errorf("request %s: %w", subject, err))
	}
	return data, nil
}

// request makes one request, waiting at most timeout (or ctx); errors are
// nats.go's (ErrConnectionReconnecting when not connected), for
// requestError to classify.
func (c *Client) request(ctx context.Context, subject string, data []byte, timeout time.Duration) ([]byte, error) {
	if !c.Connected() {
		return nil, nats.ErrConnectionReconnecting
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, err
	}
	return msg.Data, nil
}

// Flush waits until everything published so far reached the server, at most
// timeout.
func (c *Client) Flush(timeout time.Duration) error {
	if !c.nc.IsConnected() {
		return unavailable("NATS not connected", nil)
	}
	return c.nc.FlushTimeout(timeout)
}

// Close drains the connection (pending publishes are flushed) and waits
// until it is closed or ctx ends, then closes it hard. Safe to call twice.
func (c *Client) Close(ctx context.Context) error {
	if err := c.nc.Drain(); err != nil {
		// Not connected (or already closed): nothing to drain.
		c.nc.Close()
	}
	select {
	case <-c.closed:
		return nil
	case <-ctx.Done():
		c.nc.Close()
		return fmt.Errorf("presence: nats drain: %w", ctx.Err())
	}
}
