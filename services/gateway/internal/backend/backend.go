// Package backend is the gateway's side of the NATS contract with the
// presence workers (docs/protocol.md, "NATS"): it publishes typing commands and
// requests typing snapshots.
package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// ErrUnavailable is wrapped by every failure caused by NATS being
// disconnected, a request timing out or no worker answering: clients get
// error code unavailable (HTTP 503). [Reason] says which, in words a
// client can be shown.
var ErrUnavailable = errors.New("backend: unavailable")

// unavailableError is an ErrUnavailable with a reason for clients.
type unavailableError struct {
	reason string // for clients: "timed out: no presence worker answered within 2s"
	err    error  // the cause, for logs
}

func (e *unavailableError) Error() string {
	if e.err == nil {
		return "backend: unavailable: " + e.reason
	}
	return "backend: unavailable: " + e.reason + ": " + e.err.Error()
}
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }
func (e *unavailableError) Unwrap() error        { return e.err }

func unavailable(reason string, err error) error { return &unavailableError{reason, err} }

// Unavailable is an error that wraps [ErrUnavailable] and err (for logs;
// may be nil) and that [Reason] describes as reason, for callers that wait
// on a request made by someone else (the hub's shared snapshots).
func Unavailable(reason string, err error) error { return unavailable(reason, err) }

// Reason describes a failure of [NATS.Publish], [NATS.Snapshot] or
// [NATS.Request] for clients (error frames, HTTP bodies): "NATS not
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
func (c *NATS) requestError(err error) error {
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

// ClientName is the NATS connection name shown in server monitoring. The
// other connection settings are package natsconn's, shared with the
// presence worker.
const ClientName = "ellipsis-gateway"

// NATS publishes commands and requests snapshots. All methods are safe
// for concurrent use.
type NATS struct {
	conn    *natsconn.Conn
	nc      *nats.Conn // conn.NC
	names   names.Names
	timeout time.Duration
	// cmdBufs holds *[]byte encoding buffers of Publish: no allocation
	// per command.
	cmdBufs sync.Pool

	mu          sync.Mutex
	onReconnect func()

	// batches gathers commands into batches when EnableBatching set a
	// window (batch.go); nil: each command is published at once.
	batches *batcher
}

// Connect dials NATS (urls as in ELLIPSIS_NATS_URL, auth the credential
// settings) with [natsconn.Connect] and returns at once, even when no server
// is reachable yet; it fails only on bad settings (a credentials file
// missing or malformed: the error names the setting). On top of
// natsconn's options (reconnect forever with jitter, 2 s dial and write
// timeouts, PING every 5 s, handlers that count and log), the gateway sets:
//
//   - Name("ellipsis-gateway"): visible in the NATS monitoring endpoints.
//   - ReconnectBufSize(-1): nats.go buffers no publishes while
//     disconnected, so a publish fails at once and a command answered
//     unavailable is never sent later.
//   - OnConnect: the (re)connect handler calls the function set by
//     [NATS.OnReconnect] so the hub can resync its rooms.
//   - Subscriptions (the request/reply inbox) keep nats.go's pending limits
//     (65536 messages, 64 MiB); beyond them NATS drops messages and reports
//     a slow consumer.
//
// Connected and Status read a status cached every 100 ms
// ([natsconn.Conn.Connected]), so /readyz and joins never wait on nats.go's
// lock. snapshotTimeout bounds every snapshot request
// (ELLIPSIS_SNAPSHOT_TIMEOUT). onError, if not nil, is called with
// metrics.NATSDisconnect, NATSSlowConsumer or NATSAsync for every problem
// (to count them; the logs about them are rate-limited).
func Connect(urls []string, auth natsconn.Auth, n names.Names, snapshotTimeout time.Duration, log *zap.Logger, onError func(kind string)) (*NATS, error) {
	c := &NATS{names: n, timeout: snapshotTimeout}
	conn, err := natsconn.Connect(natsconn.Options{
		URLs:              urls,
		Name:              ClientName,
		Auth:              auth,
		Log:               log,
		OnError:           onError, // natsconn's kinds are metrics.NATS*
		OnConnect:         func(*nats.Conn) { c.reconnected() },
		NoReconnectBuffer: true,
	})
	if err != nil {
		return nil, fmt.Errorf("backend: %w", err)
	}
	c.conn, c.nc = conn, conn.NC
	return c, nil
}

// OnReconnect sets f to be called (on a nats.go goroutine) after every
// (re)connect.
func (c *NATS) OnReconnect(f func()) {
	c.mu.Lock()
	c.onReconnect = f
	c.mu.Unlock()
}

func (c *NATS) reconnected() {
	c.mu.Lock()
	f := c.onReconnect
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

// Connected reports whether NATS is connected, as observed at most 100 ms
// ago; false while a reading of the status has waited 1 s (a write to NATS
// is blocked). It never waits.
func (c *NATS) Connected() bool { return c.conn.Connected() }

// Status describes the connection for readiness ("CONNECTED",
// "RECONNECTING", "RECONNECTING: nats: authorization violation", ..., or
// "UNRESPONSIVE (a write to NATS is blocked)"). It never waits and never
// holds a secret.
func (c *NATS) Status() string { return c.conn.Status() }

// EnableBatching makes Publish gather the commands of a window (>0,
// ELLIPSIS_BATCH_WINDOW) into batches (docs/protocol.md, "Command
// batches"): the first command of a batch waits at most window, a batch
// holds at most MaxBatchCommands commands and min(max_payload,
// MaxBatchBytes) bytes, and Close sends the pending batch before draining.
// m counts the batches. Call it once, after Connect and before the first
// Publish; a window of 0 leaves Publish sending each command at once.
func (c *NATS) EnableBatching(window time.Duration, m BatchMetrics) {
	if window <= 0 {
		return
	}
	c.batches = newBatcher(window, c.maxPayload, c.publishData, m)
}

// maxPayload is the server's max_payload in bytes, as natsconn observed it
// at most 100 ms ago, or NATS's default (1 MiB) while not connected.
// The batcher asks for it on every command, so it must not wait on
// nats.go's lock (natsconn.Conn.MaxPayload). A server reached by a
// reconnect with a smaller max_payload than the last one can refuse the
// batches of those 100 ms (counted as failed); batches are at most
// MaxBatchBytes (64 KiB), far under any max_payload in use.
func (c *NATS) maxPayload() int {
	if n := c.conn.MaxPayload(); n > 0 {
		return int(n)
	}
	return 1 << 20
}

// publishData sends one payload on the command subject (a command or a
// batch); with ReconnectBufSize(-1) it fails (never buffers) once nats.go
// has noticed the connection is gone.
func (c *NATS) publishData(data []byte) error {
	return c.nc.Publish(c.names.CommandSubject(), data)
}

// Publish sends cmd on the command subject, or, with batching enabled
// (EnableBatching), adds it to the batch being filled, which goes out
// within the window. It fails with an error wrapping [ErrUnavailable] when
// NATS is not connected, and, batching, when [batchQueue] full batches are
// waiting for a blocked NATS write; nothing is buffered for later. A batch
// that NATS refuses later is counted (BatchMetrics.BatchFailed) and its
// commands are lost, as a command published just before a disconnect is.
func (c *NATS) Publish(cmd *protocol.Command) error {
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
		return fmt.Errorf("backend: encode command: %w", err)
	}
	*bp = data
	if c.batches != nil {
		added, stopped := c.batches.add(data) // copies data
		if added {
			return nil
		}
		if !stopped {
			return unavailable("NATS write blocked", nil)
		}
		// Closing: the pending batch went out; this one goes alone.
	}
	// nats.go copies data into its write buffer before Publish returns,
	// so the buffer is reused.
	if err := c.publishData(data); err != nil {
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
func (c *NATS) Snapshot(ctx context.Context, room string) (protocol.Snapshot, error) {
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
		return protocol.Snapshot{}, fmt.Errorf("backend: snapshot reply: %w", err)
	}
	return reply.Snapshot(), nil
}

// Request sends a request on subject and returns the reply payload, waiting
// at most the snapshot timeout (or ctx). Errors wrap [ErrUnavailable].
func (c *NATS) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	data, err := c.request(ctx, subject, data, c.timeout)
	if err != nil {
		return nil, c.requestError(fmt.Errorf("request %s: %w", subject, err))
	}
	return data, nil
}

// request makes one request, waiting at most timeout (or ctx); errors are
// nats.go's (ErrConnectionReconnecting when not connected), for
// requestError to classify.
func (c *NATS) request(ctx context.Context, subject string, data []byte, timeout time.Duration) ([]byte, error) {
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

// Flush waits until everything published so far reached the server, at
// most timeout. With batching, the batch still filling is closed and
// sent first, after the batches before it; a sender blocked past timeout
// is ErrUnavailable (reason "NATS write blocked").
func (c *NATS) Flush(timeout time.Duration) error {
	if !c.nc.IsConnected() {
		return unavailable("NATS not connected", nil)
	}
	began := time.Now()
	if c.batches != nil && !c.batches.flush(began.Add(timeout)) {
		return unavailable("NATS write blocked", nats.ErrTimeout)
	}
	return c.nc.FlushTimeout(max(time.Millisecond, timeout-time.Since(began)))
}

// Close sends the pending batch (with batching), drains the connection
// (pending publishes are flushed) and waits
// until it is closed or ctx ends, then closes it hard. Safe to call twice.
func (c *NATS) Close(ctx context.Context) error {
	if c.batches != nil {
		c.batches.stop(ctx.Done()) // the pending batch goes out before the drain
	}
	if err := c.nc.Drain(); err != nil {
		// Not connected (or already closed): nothing to drain.
		c.nc.Close()
	}
	select {
	case <-c.conn.Closed():
		return nil
	case <-ctx.Done():
		c.nc.Close()
		return fmt.Errorf("backend: nats drain: %w", ctx.Err())
	}
}
