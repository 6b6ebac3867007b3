package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// NATS settings. The connection options (reconnect with jitter, timeouts,
// pings, handlers) are package natsconn's, shared with the gateway.
const (
	// natsClientName is the connection name seen in NATS monitoring (and
	// the Redis CLIENT SETNAME when the URL sets none).
	natsClientName = "ellipsis-presence-worker"

	// cmdPendingMsgs and cmdPendingBytes bound the commands nats.go holds
	// for the command subscription while onCommand decodes and dispatches
	// (which never waits for a shard: see dispatch). Beyond either,
	// NATS drops messages for this subscription and reports a slow consumer
	// (counted in ellipsis_worker_nats_errors_total{kind="slow_consumer"});
	// a dropped stop is healed by expiry (ttl), a dropped start by the next
	// refresh.
	cmdPendingMsgs  = 65536
	cmdPendingBytes = 64 << 20
	// snapshotSubs is how many queue subscriptions answer snapshots on one
	// connection; each has its own delivery goroutine, so this many
	// snapshots are read from Redis at once, and nc.Drain still waits for
	// every one of them to be answered.
	snapshotSubs = 4
	// snapPendingMsgs and snapPendingBytes bound each snapshot
	// subscription's queue (slow consumer beyond). A snapshot waits at most
	// SnapshotTimeout on the gateway's side, so a long queue is useless.
	snapPendingMsgs  = 4096
	snapPendingBytes = 4 << 20
	// startFlushTimeout bounds Start's wait for the server to confirm the
	// subscriptions when Start's ctx has no deadline.
	startFlushTimeout = 5 * time.Second
)

// connectNATS connects, queue-subscribes the command and snapshot subjects
// and, when connected, waits until the server has the subscriptions, so a
// command published after Start returns reaches this worker's group.
func (s *Server) connectNATS(ctx context.Context) error {
	log := s.log.Named("nats")
	conn, err := natsconn.Connect(natsconn.Options{
		URLs:    s.cfg.NATSServers(),
		Name:    natsClientName,
		Auth:    s.cfg.NATSAuth(),
		Log:     log,
		OnError: s.m.nats.Error,
		Quiet:   s.stopping.Load, // our own Shutdown closed the connection
	})
	if err != nil {
		return fmt.Errorf("worker: NATS: %w", err)
	}
	nc := conn.NC
	s.nc, s.natsConn = nc, conn
	s.m.watchNATS(conn.Connected)
	if !nc.IsConnected() {
		log.Warn("NATS not reachable yet, reconnecting in the background", zap.String("servers", natsconn.RedactURLs(s.cfg.NATSURL)))
	}

	sub, err := nc.QueueSubscribe(s.names.CommandSubject(), names.QueueGroup, s.onCommand)
	if err != nil {
		return fmt.Errorf("worker: subscribe %s: %w", s.names.CommandSubject(), err)
	}
	if err := sub.SetPendingLimits(cmdPendingMsgs, cmdPendingBytes); err != nil {
		return fmt.Errorf("worker: pending limits: %w", err)
	}
	s.subs = append(s.subs, sub)
	for range snapshotSubs {
		sub, err := nc.QueueSubscribe(s.names.SnapshotSubject(), names.QueueGroup, s.onSnapshot)
		if err != nil {
			return fmt.Errorf("worker: subscribe %s: %w", s.names.SnapshotSubject(), err)
		}
		if err := sub.SetPendingLimits(snapPendingMsgs, snapPendingBytes); err != nil {
			return fmt.Errorf("worker: pending limits: %w", err)
		}
		s.subs = append(s.subs, sub)
	}
	if nc.IsConnected() {
		fctx := ctx
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			fctx, cancel = context.WithTimeout(ctx, startFlushTimeout)
			defer cancel()
		}
		if err := nc.FlushWithContext(fctx); err != nil {
			return fmt.Errorf("worker: NATS flush: %w", err)
		}
	}
	return nil
}

// onCommand decodes one payload of the command subject, a command or a
// batch of them (docs/protocol.md, "Command batches"), and hands each
// valid command to its shard, in the payload's order. It runs on the
// subscription's delivery goroutine and never waits for a shard: a command
// its shard has no room for is dropped and counted (see dispatch), so one
// slow shard never holds up the others' commands. An invalid element of a
// batch is dropped and counted on its own (dropInvalid), the batch's
// other commands are applied; a batch refused whole (malformed, wrong
// "v", "cmds" empty or too long) counts once.
func (s *Server) onCommand(msg *nats.Msg) {
	cmds, errs, err := protocol.DecodeCommands(msg.Data)
	if err != nil {
		s.dropInvalid(msg, err)
		return
	}
	for i, cmd := range cmds {
		err := errs[i]
		if err == nil {
			err = s.checkCommand(cmd)
		}
		if err != nil {
			s.dropInvalid(msg, err)
			continue
		}
		s.dispatch(cmd)
	}
}

// checkCommand checks what DecodeCommand cannot, the worker's settings
// (docs/protocol.md, "Threads and activities"): an activity of the
// standard set or ELLIPSIS_ACTIVITIES, and a ttl_ms of at most
// ELLIPSIS_SERVICE_MAX_TTL. A gateway never sends ttl_ms: its commands are
// built from its own WebSocket frames, which carry none, so a client's
// start keeps the standard ttl; only a platform service (a publisher the
// NATS account lets onto the command subject) gives one.
func (s *Server) checkCommand(cmd protocol.Command) error {
	if cmd.Activity != "" && !s.activities[cmd.Activity] {
		return &protocol.FieldError{Field: "activity", Reason: fmt.Sprintf("unknown activity %q (want one of %s)", cmd.Activity, strings.Join(s.activityList, ", "))}
	}
	if maxMs := s.cfg.ServiceMaxTTL.Milliseconds(); cmd.TTLMs > maxMs {
		return &protocol.FieldError{Field: "ttl_ms", Reason: fmt.Sprintf("must be 1..%d ms (ELLIPSIS_SERVICE_MAX_TTL), got %d", maxMs, cmd.TTLMs)}
	}
	return nil
}

// dropInvalid counts and (rate-limited) logs a payload that failed
// validation. It never replies: commands are fire-and-forget.
func (s *Server) dropInvalid(msg *nats.Msg, err error) {
	field := "json"
	var fe *protocol.FieldError
	if errors.As(err, &fe) {
		field = fieldLabel(fe.Field) // rooms[17] -> rooms; a fixed set
	}
	s.m.invalidPayloads.WithLabelValues(field).Inc()
	s.m.command("unknown", store.OutcomeInvalid)
	s.rl.Warn("invalid-command", "dropping invalid command",
		zap.String("subject", msg.Subject), zap.String("field", field), zap.Int("bytes", len(msg.Data)), zap.Error(err))
}

// onSnapshot answers one snapshot request (request/reply). A reply lists
// at most cfg.SnapshotMax typists, and never more bytes than the NATS
// server's max_payload (see encodeSnapshotReply), with total counting
// every visible typist. Errors are replied as
// {"v":1,"error":{"code":...,"message":...}} with code bad_request
// (invalid request), unavailable (Redis down) or internal.
func (s *Server) onSnapshot(msg *nats.Msg) {
	var reply protocol.SnapshotReply
	var snap protocol.Snapshot
	req, err := protocol.DecodeSnapshotRequest(msg.Data)
	if err != nil {
		reply = protocol.SnapshotReply{V: protocol.Version, Error: &protocol.ReplyError{Code: protocol.CodeBadRequest, Message: err.Error()}}
	} else {
		ctx, cancel := context.WithTimeout(s.runCtx, s.cfg.SnapshotTimeout)
		snap, err = s.st.Snapshot(ctx, req.Room, s.cfg.SnapshotMax)
		cancel()
		if err != nil {
			code := protocol.CodeInternal
			var se *store.SnapshotError
			if errors.As(err, &se) {
				code = se.Code
			}
			s.rl.Error("snapshot-"+code, "snapshot failed", zap.String("room", req.Room), zap.String("code", code), zap.Error(err))
			msg := "typing state unavailable, retry"
			if code == protocol.CodeInternal {
				msg = "internal error"
			}
			reply = protocol.SnapshotReply{V: protocol.Version, Error: &protocol.ReplyError{Code: code, Message: msg}}
		}
	}
	var data []byte
	if reply.Error == nil {
		var listed int
		data, listed, err = encodeSnapshotReply(req.Room, snap, maxReplyBytes(s.nc))
		switch {
		case err != nil:
			s.rl.Error("snapshot-encode", "snapshot reply does not fit", zap.String("room", req.Room), zap.Error(err))
			reply = protocol.SnapshotReply{V: protocol.Version, Error: &protocol.ReplyError{Code: protocol.CodeInternal, Message: "internal error"}}
		case listed < len(snap.Users):
			s.m.snapshotsCut.WithLabelValues("payload").Inc()
		case snap.Cut():
			s.m.snapshotsCut.WithLabelValues("max").Inc()
		}
	}
	outcome := "ok"
	if reply.Error != nil {
		outcome = reply.Error.Code
	}
	s.m.snapshots.WithLabelValues(snapshotLabel(outcome)).Inc()
	if msg.Reply == "" {
		return // a publish, not a request: nobody to answer
	}
	if reply.Error != nil {
		if data, err = json.Marshal(reply); err != nil {
			s.log.Error("encoding snapshot reply", zap.Error(err))
			return
		}
	}
	if err := msg.Respond(data); err != nil {
		s.m.nats.Error(natsReplyError)
		s.rl.Warn("nats-reply", "snapshot reply failed", zap.Error(err))
	}
}

// drainSubs stops taking commands and snapshot requests (Shutdown, step 2):
// it drains every subscription (the server stops sending to it, the
// messages nats.go already holds are still handed to onCommand and
// onSnapshot) and waits until each is closed, which nats.go does once its
// last handler returned. The connection stays open for the room events
// and replies still to publish. It returns early, with ctx's error, when
// ctx ends, and at once when the connection is closed. Not connected
// (reconnecting), there is no server to drain from: it closes the
// connection, as nc.Drain would.
func (s *Server) drainSubs(ctx context.Context) error {
	if !s.nc.IsConnected() {
		s.log.Warn("NATS not connected at shutdown, closing", zap.String("status", s.natsConn.Status()))
		s.nc.Close()
		return nil
	}
	closed := make([]<-chan nats.SubStatus, 0, len(s.subs))
	for _, sub := range s.subs {
		ch := sub.StatusChanged(nats.SubscriptionClosed) // before Drain: never misses the close
		if err := sub.Drain(); err != nil {
			s.log.Warn("NATS subscription drain failed", zap.String("subject", sub.Subject), zap.Error(err))
			continue
		}
		closed = append(closed, ch)
	}
	for _, ch := range closed {
	wait:
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					break wait // closed with the subscription
				}
			case <-s.natsConn.Closed():
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}
