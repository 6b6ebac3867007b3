package pubsub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/backoff"
)

// link is one Pub/Sub connection at a time to one server, and the
// channels assigned to it. Fields after r are under Redis.mu unless noted.
type link struct {
	r *Redis
	// addr is the master of a Cluster link; "" for the shared link.
	addr string
	// node is the Cluster master's client (nil for the shared link).
	node *redis.Client
	// check is the channel this link's connections check first
	// (refusal.go); "" for none.
	check string
	// kick (capacity 1) wakes the writer: the channels changed.
	kick chan struct{}
	// redialCh (capacity 1) makes the supervisor abandon the connection.
	redialCh chan string

	chans map[string]*channel // assigned to this link
	// sent: channels (S)SUBSCRIBEd on the current connection, with the
	// PING token that follows their command (confirm.go).
	sent map[string]sentSub
	// acked: channels whose subscribe reply was read on the current
	// connection (cleared by their unsubscribe reply).
	acked map[string]bool
	// unsubPending counts our own SUNSUBSCRIBEs whose confirmation has not
	// come back, to tell them from a master's (a slot move).
	unsubPending map[string]int
	// tokens: PING token -> what its PONG settles, for the current
	// connection; pingAsked: the writer owes a liveness PING.
	tokens    map[string]*batch
	pingAsked bool
	// batchErr is the first error reply other than a routing one (MOVED,
	// ASK, CROSSSLOT) read since the last PONG of the current connection:
	// the refusal of one of the commands the next PONG settles.
	batchErr string
	gen      uint64 // connection generation; replies of older ones are ignored
	up       bool   // the current connection answered its first PING
	down     bool   // a connection was lost or failed, none is up yet
	lastErr  string
	removed  bool // dropped from Redis.links (Cluster): the supervisor ends
	refusals      // refusal state, kept across connections (refusal.go)

	lastReply atomic.Int64 // unix ns of the last reply read, any kind; no lock
	// refusedLast: the last reply to a command read (published messages
	// are no replies) was an error reply other than a routing one
	// (serverError). A round's PING is its last command, so before the
	// first PONG it tells a refused PING from a round whose replies are
	// still coming in (pingDeadline); no lock.
	refusedLast atomic.Bool
	// awaiting is the unix ns at which the writer sent a PING token (a
	// liveness PING, or the confirmation of a batch of subscriptions) with
	// no reply of any kind read since; 0 when every request was followed
	// by a reply. Set by the writer right before the write (current
	// connection, once up: sendingToken), cleared by the reader on every
	// reply; no lock. See stalled.
	awaiting atomic.Int64
	// stall (capacity 1) tells the supervisor that awaiting was set.
	stall chan struct{}
}

// newLinkLocked makes the link of master addr (Cluster, with its client
// node and first channel) or the shared one (addr "", node nil); r.mu is
// held.
func (r *Redis) newLinkLocked(addr string, node *redis.Client, first string) *link {
	check := r.opts.CheckChannel
	if node != nil {
		check = slotCheck(check, first)
	}
	return &link{
		r: r, addr: addr, node: node, check: check,
		kick: make(chan struct{}, 1), redialCh: make(chan string, 1), stall: make(chan struct{}, 1),
		chans: map[string]*channel{}, sent: map[string]sentSub{}, acked: map[string]bool{},
		unsubPending: map[string]int{}, tokens: map[string]*batch{},
		lastErr: errNeverUp,
	}
}

// errNeverUp is the health error of a link none of whose connections
// answered its first PING yet.
const errNeverUp = "connecting: no reply to the first PING yet"

func (r *Redis) startLinkLocked(l *link) {
	r.met.RedisLinks.Set(float64(len(r.links)))
	r.countDownLocked()
	if !r.started || r.closed {
		return
	}
	r.wg.Add(1)
	go r.runLink(l)
}

// name is how health and logs call the link.
func (l *link) name() string {
	if l.addr == "" {
		return "shared"
	}
	return l.addr
}

func (l *link) kickLocked() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// upState reports whether l's current connection answered a PING, and
// l's last error.
func (l *link) upState() (bool, string) {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.up, l.lastErr
}

func (l *link) isDown() bool {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.down
}

// stalled reports whether a request sent on l's connection has had no
// reply of any kind for PingTimeout or more at now (unix ns): the same
// verdict as a missed health PING, reached as soon as any request (a
// subscription batch's confirmation) goes unanswered, so that joins fail
// fast instead of each waiting for its own deadline until the next health
// PING. It also returns the moment it becomes (or became) stalled; 0 when
// nothing is awaited.
func (l *link) stalled(now int64) (bool, int64) {
	w := l.awaiting.Load()
	if w == 0 {
		return false, 0
	}
	at := w + int64(l.r.opts.PingTimeout)
	return now >= at, at
}

// sendingToken records, right before the writer of connection gen sends a
// PING token, that a reply is awaited from now (for stalled), and wakes
// the supervisor to watch it. It is recorded before the write so that the
// reader, which clears it on the reply, always comes after. Only once the
// connection is up: its first PING (dial and handshake included) is held
// to the health PING's bound instead.
func (l *link) sendingToken(gen uint64) {
	l.r.mu.Lock()
	current := l.gen == gen && l.up
	l.r.mu.Unlock()
	if current && l.awaiting.CompareAndSwap(0, time.Now().UnixNano()) {
		select {
		case l.stall <- struct{}{}:
		default:
		}
	}
}

// redial asks the supervisor to abandon the current connection and dial
// again at once; it never blocks.
func (l *link) redial(why string) {
	select {
	case l.redialCh <- why:
	default:
	}
}

func (r *Redis) newPubSub(l *link) *redis.PubSub {
	switch {
	case l.node != nil:
		return l.node.SSubscribe(r.ctx)
	case r.opts.Sharded:
		return r.opts.Client.SSubscribe(r.ctx)
	default:
		return r.opts.Client.Subscribe(r.ctx)
	}
}

// errLinkRemoved ends a Cluster link's supervisor.
var errLinkRemoved = errors.New("link removed")

// runLink is the supervisor of l: one connection after another, with
// jittered backoff between failed ones, until the broker closes or the
// link is removed.
func (r *Redis) runLink(l *link) {
	defer r.wg.Done()
	bo := backoff.New(reconnectMin, reconnectMax)
	failing := false // logged the failure of this outage already
	for r.ctx.Err() == nil {
		err, wasUp, redialed := r.serveConn(l)
		if r.ctx.Err() != nil || errors.Is(err, errLinkRemoved) {
			return
		}
		if errors.Is(err, redis.ErrClosed) && l.node != nil {
			r.linkClosed(l)
			return
		}
		if wasUp || redialed {
			bo.Reset()
			failing = false
		}
		if wasUp && !redialed {
			r.log.Warn("redis pubsub connection lost; reconnecting with backoff", zap.String("link", l.name()), zap.Error(err))
			failing = true
		} else if !failing && !redialed {
			r.log.Warn("redis pubsub connection failed; retrying with backoff", zap.String("link", l.name()), zap.Error(err))
			failing = true
		}
		if r.cluster != nil {
			// The master may be gone (failover): refresh the slot map so
			// the rebalance loop moves its channels once it names the new
			// master.
			r.cluster.ReloadState(r.ctx)
			r.askRebalance()
		}
		if redialed {
			continue
		}
		t := time.NewTimer(bo.Next())
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-l.redialCh:
			t.Stop()
		}
	}
}

// serveConn runs one connection of l until it fails, misses a health
// PING, or a redial is asked. It reports whether the connection was up
// (answered its first PING) and whether it ended on a redial request. The
// connection is closed in the background: go-redis may hold its PubSub
// lock for a whole dial.
func (r *Redis) serveConn(l *link) (err error, wasUp, redialed bool) {
	ps := r.newPubSub(l)
	gctx, gcancel := context.WithCancel(r.ctx)
	r.mu.Lock()
	if l.removed {
		r.mu.Unlock()
		gcancel()
		_ = ps.Close()
		return errLinkRemoved, false, false
	}
	l.gen++
	gen := l.gen
	l.awaiting.Store(0)
	clear(l.sent)
	clear(l.acked)
	clear(l.unsubPending)
	clear(l.tokens)
	l.pingAsked, l.batchErr, l.probing = false, "", ""
	r.mu.Unlock()

	done := make(chan error, 2) // the reader's and the writer's end
	r.wg.Add(2)
	go func() { defer r.wg.Done(); done <- r.readConn(gctx, l, ps, gen) }()
	go func() { defer r.wg.Done(); done <- r.writeConn(gctx, l, ps, gen) }()

	ping := time.NewTicker(r.opts.PingInterval)
	// The first PING (dial and handshake included) is due within
	// PingTimeout, like every health PING.
	asked := time.Now().UnixNano()
	deadline := time.After(r.opts.PingTimeout)
	var stallCheck <-chan time.Time // armed while a request is awaited
	for err == nil {
		select {
		case <-r.ctx.Done():
			err = r.ctx.Err()
		case err = <-done:
			if err == nil {
				err = errors.New("pubsub reader or writer ended")
			}
		case why := <-l.redialCh:
			err, redialed = errors.New(why), true
		case <-ping.C:
			if deadline == nil {
				asked = time.Now().UnixNano()
				l.kickPing()
				deadline = time.After(r.opts.PingTimeout)
			}
		case <-deadline:
			deadline = nil
			var rearm bool
			if err, rearm = r.pingDeadline(l, asked); rearm {
				asked = time.Now().UnixNano()
				deadline = time.After(r.opts.PingTimeout)
			}
		case <-l.stall:
			if stallCheck == nil {
				if _, at := l.stalled(0); at != 0 {
					stallCheck = time.After(time.Duration(at - time.Now().UnixNano()))
				}
			}
		case <-stallCheck:
			stallCheck = nil
			now := time.Now().UnixNano()
			if stalled, at := l.stalled(now); stalled {
				err = fmt.Errorf("no reply to a request within %v (ELLIPSIS_PUBSUB_PING_TIMEOUT)", r.opts.PingTimeout)
				r.met.RedisLinkTimeouts.Inc()
			} else if at != 0 {
				stallCheck = time.After(time.Duration(at - now))
			}
		}
	}
	ping.Stop()
	gcancel()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = ps.Close()
	}()
	return err, r.connEnded(l, gen, err), redialed
}

// pingDeadline judges l's connection PingTimeout after asked (unix ns):
// a PING was sent then, or, before the first PONG, the previous deadline
// passed then. No reply of any kind since asked fails the connection
// (a stall). Before the first PONG, an error reply read last fails it
// too: the PING itself was refused (it is the last command of its round,
// and a refused channel is followed by the rest of its round's replies).
// Other replies but no PONG yet are a first round still being answered
// (a reconnect resubscribes every channel of the link, and the PONG comes
// after all their replies): rearm asks for another PingTimeout, the link
// staying down until the PONG.
func (r *Redis) pingDeadline(l *link, asked int64) (err error, rearm bool) {
	up, why := l.upState()
	switch {
	case !up && l.refusedLast.Load():
		return fmt.Errorf("no PONG within %v (ELLIPSIS_PUBSUB_PING_TIMEOUT): %s", r.opts.PingTimeout, why), false
	case l.lastReply.Load() < asked:
		r.met.RedisLinkTimeouts.Inc()
		return fmt.Errorf("no reply to PING within %v (ELLIPSIS_PUBSUB_PING_TIMEOUT)", r.opts.PingTimeout), false
	case up:
		return nil, false
	default:
		return nil, true
	}
}

// connEnded marks l down after its connection gen ended with err and its
// channels unconfirmed (messages may be lost until they are confirmed
// again); it reports whether that connection was up.
func (r *Redis) connEnded(l *link, gen uint64, err error) (wasUp bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	wasUp = l.up
	if l.gen == gen {
		l.up, l.down, l.lastErr = false, true, err.Error()
		r.countDownLocked()
		for _, c := range l.chans {
			c.unconfirmLocked()
		}
	}
	return wasUp
}

// kickPing asks the writer for a liveness PING.
func (l *link) kickPing() {
	l.r.mu.Lock()
	l.pingAsked = true
	l.kickLocked()
	l.r.mu.Unlock()
}

// writeConn is the writer of one connection: on every kick it sends the
// difference between the channels assigned to the link and those sent on
// this connection (one command per hash slot, or per channel for those
// marked solo, and the link's probe on a health round: refusal.go), then
// a PING whose token settles them (confirm.go). The first round (with no
// channels, a bare PING) dials.
func (r *Redis) writeConn(ctx context.Context, l *link, ps *redis.PubSub, gen uint64) error {
	first := true
	for {
		if !first {
			select {
			case <-ctx.Done():
				return nil
			case <-l.kick:
			}
		}
		r.mu.Lock()
		if l.gen != gen {
			r.mu.Unlock()
			return nil
		}
		token, sub, unsub := r.planRoundLocked(l, first)
		r.mu.Unlock()
		first = false
		// Each write is bounded by go-redis's WriteTimeout (and a dial by
		// DialTimeout); a failed write ends the connection.
		for _, g := range r.groups(unsub) {
			if err := r.unsubscribe(ctx, ps, g); err != nil {
				return err
			}
		}
		for _, g := range sub {
			if err := r.subscribe(ctx, ps, g); err != nil {
				return err
			}
		}
		if token != "" {
			l.sendingToken(gen)
			if err := ps.Ping(ctx, token); err != nil {
				return err
			}
		}
	}
}

// planRoundLocked is one round of the writer: the (S)SUBSCRIBE commands
// to send (each a group of channels), the channels to UNSUBSCRIBE, and the
// PING token that follows them ("" when there is nothing to send). It
// marks the channels sent; r.mu is held.
func (r *Redis) planRoundLocked(l *link, first bool) (token string, sub [][]string, unsub []string) {
	seq := r.seq.Add(1)
	liveness := l.pingAsked
	l.pingAsked = false
	// A refused channel is sent again when a Subscribe asks, and on a
	// connection's first round and health rounds while the link is not
	// refusing (then the probe tells, refusal.go, and a probe that a
	// member holds goes as a channel of its own): never on every join's
	// round, which would resend every refused room each time.
	retryRefused := (first || liveness) && l.refusing == ""
	probeRound := first || liveness
	var grouped []string
	var confirm []*channel
	for name, c := range l.chans {
		if _, ok := l.sent[name]; !ok {
			if c.refused && !retryRefused && !(probeRound && name == l.probe) {
				continue
			}
			if c.solo {
				sub = append(sub, []string{name})
			} else {
				grouped = append(grouped, name)
			}
		}
		if !c.confirmed {
			confirm = append(confirm, c)
		}
	}
	for name := range l.sent {
		if l.chans[name] == nil && name != l.probing {
			unsub = append(unsub, name)
			delete(l.sent, name)
			if r.opts.Sharded {
				l.unsubPending[name]++
			}
		}
	}
	probe := l.probeLocked(l.check, first, liveness)
	if probe != "" {
		sub = append(sub, []string{probe})
		l.probing = probe
	}
	sub = append(sub, r.groups(grouped)...)
	for _, g := range sub {
		for _, name := range g {
			l.sent[name] = sentSub{seq: seq, grouped: len(g) > 1}
		}
	}
	if first || liveness || len(sub)+len(unsub)+len(confirm) > 0 {
		token = "ellipsis-ready:" + strconv.FormatUint(seq, 10)
		l.tokens[token] = &batch{seq: seq, chans: confirm, probe: probe}
	}
	return token, sub, unsub
}

func (r *Redis) subscribe(ctx context.Context, ps *redis.PubSub, g []string) error {
	if r.opts.Sharded {
		return ps.SSubscribe(ctx, g...)
	}
	return ps.Subscribe(ctx, g...)
}

func (r *Redis) unsubscribe(ctx context.Context, ps *redis.PubSub, g []string) error {
	if r.opts.Sharded {
		return ps.SUnsubscribe(ctx, g...)
	}
	return ps.Unsubscribe(ctx, g...)
}

// readConn is the reader of one connection; it returns the connection's
// error (an error reply does not end it).
func (r *Redis) readConn(ctx context.Context, l *link, ps *redis.PubSub, gen uint64) error {
	for {
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			var reply redis.Error
			if errors.As(err, &reply) {
				l.lastReply.Store(time.Now().UnixNano())
				l.awaiting.Store(0)
				l.refusedLast.Store(false) // serverError sets it for a refusal
				r.serverError(l, gen, reply.Error())
				continue
			}
			return err
		}
		l.lastReply.Store(time.Now().UnixNano())
		l.awaiting.Store(0)
		switch m := msg.(type) {
		case *redis.Message:
			r.h.HandleMessage(m.Channel, m.Payload)
		case *redis.Pong:
			l.refusedLast.Store(false)
			r.pong(l, gen, m.Payload)
		case *redis.Subscription:
			l.refusedLast.Store(false)
			r.subscription(l, gen, m.Kind, m.Channel)
		}
	}
}

// subscription records a (un)subscribe reply of connection gen: a
// subscribe acknowledges the channel for its PONG (confirm.go); a
// server-sent sunsubscribe may be a slot move (dropped).
func (r *Redis) subscription(l *link, gen uint64, kind, name string) {
	r.mu.Lock()
	if l.gen == gen {
		switch kind {
		case "subscribe", "ssubscribe":
			l.acked[name] = true
		case "unsubscribe", "sunsubscribe":
			delete(l.acked, name)
		}
	}
	r.mu.Unlock()
	if kind == "sunsubscribe" {
		r.dropped(l, name)
	}
}

// pong handles the reply to a PING token: the link is up, the channels the
// token settles are confirmed (waiters released) or refused (waiters
// failed, confirm.go), and channels that had been lost are reported
// restored.
func (r *Redis) pong(l *link, gen uint64, token string) {
	r.mu.Lock()
	b, ok := l.tokens[token]
	if !ok || l.gen != gen {
		r.mu.Unlock()
		return
	}
	delete(l.tokens, token)
	wasDown := l.down
	l.up, l.down, l.lastErr = true, false, ""
	st := r.settleLocked(l, b)
	r.countDownLocked()
	restored := restoredLocked(st.confirmed)
	r.mu.Unlock()
	if wasDown {
		r.log.Info("redis pubsub connection restored", zap.String("link", l.name()))
	}
	r.reportSettled(l, st)
	if len(restored) > 0 {
		r.log.Info("redis pubsub channels restored; resyncing rooms", zap.String("link", l.name()), zap.Int("channels", len(restored)))
		r.h.HandleRestored(restored)
	}
}
