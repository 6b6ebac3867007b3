package pubsub

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
)

// Defaults of [RedisOptions] zero values: the defaults of
// ELLIPSIS_PUBSUB_PING_INTERVAL and ELLIPSIS_PUBSUB_PING_TIMEOUT
// (shared/config's table; TestPackageDefaultsAreTheTable in
// services/gateway holds them equal).
const (
	DefaultPingInterval = 5 * time.Second
	DefaultPingTimeout  = 2 * time.Second
)

// Reconnect backoff of a link (full jitter, shared/backoff): while Redis
// is down every attempt is one dial, so the ceiling stays short and rooms
// are resubscribed within about a second of Redis coming back.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = time.Second
)

// RedisOptions configure a [Redis] broker.
type RedisOptions struct {
	// Client hosts the links: *redis.Client (standalone, or Sentinel's
	// failover client) or *redis.ClusterClient. The caller owns and closes
	// it, after [Redis.Close].
	Client redis.UniversalClient
	// Sharded selects sharded Pub/Sub (SSUBSCRIBE, Redis 7+) instead of
	// SUBSCRIBE; it must match the workers' ELLIPSIS_REDIS_PUBSUB. With a
	// ClusterClient it means one link per master (a shard channel can only
	// be subscribed on the master serving its hash slot).
	Sharded bool
	// WatchMaster, when set (Redis Sentinel), runs for the broker's life
	// and calls changed whenever Sentinel names a new master; the shared
	// link is then redialed (the failover client dials the current master)
	// and its channels reported restored (redisconn.Options.WatchMaster
	// says why go-redis alone is late).
	WatchMaster func(ctx context.Context, changed func(addr string))
	// PingInterval is how often every link is PINGed; PingTimeout is how
	// long a link may stay silent after a PING before it is closed and
	// redialed (a silent partition: no reset, no data); a subscription
	// batch unanswered for PingTimeout counts the same. A new connection
	// must answer its first PING within PingTimeout, dial and handshake
	// included; until one did, the link counts as down. Zero means
	// DefaultPingInterval and DefaultPingTimeout.
	PingInterval, PingTimeout time.Duration
	// CheckChannel, when set, is a channel the first round of every
	// connection SUBSCRIBEs and then UNSUBSCRIBEs, so that a server
	// refusing such channels (an ACL without their pattern) marks the link
	// refusing, down for Health, before any Subscribe (refusal.go). The
	// gateway passes a room channel no client can join. With sharded
	// Pub/Sub on Cluster, a master's link checks CheckChannel + ":" + the
	// hash tag of the first channel it was opened for, a channel of a slot
	// that master serves (slotCheck).
	CheckChannel string
	// Metrics must not be nil.
	Metrics *metrics.Metrics
	// Logger may be nil (no logs).
	Logger *zap.Logger
}

// Redis is the [Broker] on Redis Pub/Sub.
//
// # Links
//
// A link is one Pub/Sub connection with three goroutines: the supervisor
// (runLink: dials, watches health, redials with jittered backoff), the
// writer (every (UN)SUBSCRIBE and PING, so no caller ever waits on a
// go-redis lock) and the reader (Receive). Standalone and Sentinel use one
// shared link; sharded Pub/Sub on Cluster uses one link per master
// (cluster.go). A connection is never reused after an error: the link
// abandons it (closed in the background) and dials a new one, subscribing
// its channels one hash slot at a time.
//
// # Confirmation
//
// After a batch of (UN)SUBSCRIBEs the writer sends PING with a unique
// token; Redis answers in order, so its PONG settles the batch: each
// channel whose subscribe reply came before it is confirmed, one whose
// command got an error reply is refused (confirm.go, refusal.go).
// Subscribe waits for that on a per-channel outcome, bounded by the
// caller's ctx.
//
// # Health
//
// Every PingInterval the supervisor asks for a PING; when no reply of any
// kind arrived within PingTimeout the connection is declared dead, closed
// and redialed. Any other request's PING token (the confirmation of a
// batch of subscriptions) is held to the same rule at once: no reply of
// any kind within PingTimeout of it and the link is stalled (link.stalled)
// — Subscribe then fails at once and the connection is redialed — so a
// client joining many rooms of a frozen Redis does not wait for each
// join's own deadline until the next health PING. A link counts as down
// until its connection answered its first PING, and while it refuses
// subscriptions (refusal.go). Health() reports the state cached by the
// links.
//
// # Lock order
//
// One mutex, Redis.mu, guards the channel and link tables. It is never
// held across a network call or a Handler callback. go-redis's own PubSub
// lock is only ever taken by a link's own goroutines.
type Redis struct {
	opts    RedisOptions
	log     *zap.Logger
	met     *metrics.Metrics
	cluster *redis.ClusterClient // sharded Pub/Sub on Cluster: one link per master
	h       Handler
	seq     atomic.Uint64 // PING tokens
	// refusedLog limits refusal logs to one a minute per channel.
	refusedLog *ratelog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	chans       map[string]*channel
	links       map[string]*link // by link.addr ("" is the shared link)
	started     bool
	closed      bool
	rebalanceCh chan struct{} // capacity 1: asks the rebalance loop for a round now
	probeErr    string        // Cluster: the last probe's error ("" when it answered)
}

// channel is one subscribed (wanted) channel; under Redis.mu.
type channel struct {
	name string
	refs int
	// link is where it is subscribed; nil while it waits for a link
	// (Cluster: the slot map lookup, or a slot moving).
	link *link
	// from is the master that dropped it (slot moved): the rebalance loop
	// waits until the slot map names another one.
	from      string
	orphan    bool
	confirmed bool
	ready     *outcome // the pending confirmation; done once confirmed
	// lost: it was confirmed, then messages may have been lost; reported
	// to HandleRestored when confirmed again.
	lost bool
	// solo: (S)SUBSCRIBE it in a command of its own (confirm.go).
	solo bool
	// refused: its last (S)SUBSCRIBE was refused; sent again when a
	// Subscribe or a health round asks (planRoundLocked).
	refused bool
}

// outcome is one confirmation of a channel, awaited by its Subscribes:
// done is closed once the server confirmed (err nil) or refused it; err is
// written before.
type outcome struct {
	done chan struct{}
	err  error
}

func newOutcome() *outcome { return &outcome{done: make(chan struct{})} }

// confirmLocked marks c confirmed and releases its waiters; r.mu is held.
func (c *channel) confirmLocked() {
	c.confirmed, c.solo, c.refused = true, false, false
	close(c.ready.done)
}

// unconfirmLocked marks a confirmed c as no longer confirmed, its messages
// possibly lost; r.mu is held.
func (c *channel) unconfirmLocked() {
	if c.confirmed {
		c.confirmed, c.lost = false, true
		c.ready = newOutcome()
	}
}

// refuseLocked fails c's waiters with err; later Subscribes wait for
// another attempt. r.mu is held.
func (c *channel) refuseLocked(err error) {
	c.refused = true
	c.ready.err = err
	close(c.ready.done)
	c.ready = newOutcome()
}

var _ Broker = (*Redis)(nil)

// NewRedis returns a broker on opts.Client; no I/O until [Redis.Start].
func NewRedis(opts RedisOptions) *Redis {
	if opts.PingInterval <= 0 {
		opts.PingInterval = DefaultPingInterval
	}
	if opts.PingTimeout <= 0 {
		opts.PingTimeout = DefaultPingTimeout
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Redis{
		opts: opts, log: log, met: opts.Metrics, ctx: ctx, cancel: cancel,
		refusedLog: ratelog.New(log, time.Minute),
		chans:      map[string]*channel{}, links: map[string]*link{},
		rebalanceCh: make(chan struct{}, 1),
	}
	if cc, ok := opts.Client.(*redis.ClusterClient); ok && opts.Sharded {
		r.cluster = cc
		r.probeErr = errNeverUp
	} else {
		r.links[""] = r.newLinkLocked("", nil, "")
	}
	return r
}

// Start implements [Broker]: it starts the links, the Cluster rebalance
// loop and the Sentinel master watch.
func (r *Redis) Start(h Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.closed {
		return
	}
	r.h, r.started = h, true
	for _, l := range r.links {
		r.startLinkLocked(l)
	}
	if r.cluster != nil {
		r.wg.Add(1)
		go r.rebalanceLoop()
	}
	if r.opts.WatchMaster != nil {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.opts.WatchMaster(r.ctx, r.masterChanged)
		}()
	}
}

// masterChanged (Sentinel) redials the shared link: go-redis's failover
// client dials the master Sentinel names now.
func (r *Redis) masterChanged(addr string) {
	r.mu.Lock()
	l := r.links[""]
	r.mu.Unlock()
	if l == nil {
		return
	}
	r.log.Info("redis master changed (Sentinel); pubsub reconnecting there, resyncing rooms", zap.String("master", addr))
	l.redial("master changed to " + addr)
}

// Close implements [Broker].
func (r *Redis) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}

// Subscribe implements [Broker].
func (r *Redis) Subscribe(ctx context.Context, name string) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	c := r.chans[name]
	if c == nil {
		c = &channel{name: name, ready: newOutcome()}
		r.chans[name] = c
	}
	c.refs++
	if c.refs == 1 {
		r.met.RedisSubscriptions.Inc()
		if r.cluster == nil {
			r.assignLocked(c, r.links[""])
		} else if c.link == nil {
			c.orphan = true
		}
	}
	if c.confirmed {
		r.mu.Unlock()
		return nil
	}
	l, ready := c.link, c.ready
	if l != nil {
		if _, sent := l.sent[name]; !sent {
			c.refused = false // refused (or not sent yet): try again
			l.kickLocked()
		}
	}
	r.mu.Unlock()
	if l != nil && l.isDown() {
		return fmt.Errorf("%w: redis pubsub link %s down", ErrUnavailable, l.name())
	}
	if l == nil && r.cluster != nil {
		if err := r.placeOrphan(ctx, name); err != nil {
			return err
		}
	}
	// A link with a request unanswered for PingTimeout is as good as down
	// (link.stalled): fail at once, or as soon as it gets there.
	var stall <-chan time.Time
	if l != nil {
		now := time.Now().UnixNano()
		stalled, at := l.stalled(now)
		if stalled {
			return fmt.Errorf("%w: redis pubsub link %s unresponsive (no reply within %v)", ErrUnavailable, l.name(), r.opts.PingTimeout)
		}
		if at != 0 {
			t := time.NewTimer(time.Duration(at - now))
			defer t.Stop()
			stall = t.C
		}
	}
	for {
		select {
		case <-ready.done:
			return ready.err
		case <-r.ctx.Done():
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("%w: subscription not confirmed in time", ErrUnavailable)
		case <-stall:
			stall = nil
			now := time.Now().UnixNano()
			if stalled, at := l.stalled(now); stalled {
				return fmt.Errorf("%w: redis pubsub link %s unresponsive (no reply within %v)", ErrUnavailable, l.name(), r.opts.PingTimeout)
			} else if at != 0 {
				t := time.NewTimer(time.Duration(at - now))
				defer t.Stop()
				stall = t.C
			}
		}
	}
}

// Unsubscribe implements [Broker].
func (r *Redis) Unsubscribe(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.chans[name]
	if c == nil {
		return
	}
	if c.refs--; c.refs > 0 {
		return
	}
	delete(r.chans, name)
	r.met.RedisSubscriptions.Dec()
	if c.link != nil {
		delete(c.link.chans, name)
		c.link.kickLocked()
	}
	c.link = nil
}

// assignLocked puts c on link l (not yet subscribed there) and wakes l's
// writer; r.mu is held.
func (r *Redis) assignLocked(c *channel, l *link) {
	c.link, c.orphan, c.from = l, false, ""
	c.unconfirmLocked()
	l.chans[c.name] = c
	l.kickLocked()
}

// unassignLocked takes c off its link without an UNSUBSCRIBE (the master
// dropped it or no longer serves its slot); r.mu is held.
func (r *Redis) unassignLocked(c *channel, from string) {
	if c.link != nil {
		delete(c.link.chans, c.name)
		delete(c.link.sent, c.name)
	}
	c.link, c.orphan, c.from = nil, true, from
	c.unconfirmLocked()
}

// Health implements [Broker].
func (r *Redis) Health() Health {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := Health{OK: true, Links: len(r.links)}
	if r.probeErr != "" {
		h.OK = false
		h.Down = map[string]string{"cluster": r.probeErr}
	}
	for _, l := range r.links {
		if l.downLocked() {
			if h.Down == nil {
				h.Down = map[string]string{}
			}
			h.OK = false
			h.Down[l.name()] = l.healthErrLocked()
		}
	}
	return h
}

// downLocked reports whether l counts as down for [Redis.Health] and the
// redis_pubsub_links_down gauge: its current connection has not answered
// a PING yet (the first one, or the first since one was lost or failed),
// or it is refusing subscriptions (refusal.go). r.mu is held.
func (l *link) downLocked() bool { return !l.up || l.refusing != "" }

// healthErrLocked is why a down l is down, for [Redis.Health]; r.mu is
// held.
func (l *link) healthErrLocked() string {
	if l.up && l.refusing != "" {
		return "refusing room channel subscriptions: " + l.refusing
	}
	return l.lastErr
}

// countDownLocked sets the redis_pubsub_links_down gauge from the links'
// state; r.mu is held.
func (r *Redis) countDownLocked() {
	n := 0
	for _, l := range r.links {
		if l.downLocked() {
			n++
		}
	}
	r.met.RedisLinksDown.Set(float64(n))
}

// restoredLocked collects the lost channels among cs that are confirmed
// now, clearing their flag; r.mu is held.
func restoredLocked(cs []*channel) []string {
	var out []string
	for _, c := range cs {
		if c.confirmed && c.lost {
			c.lost = false
			out = append(out, c.name)
		}
	}
	sort.Strings(out)
	return out
}

// groups splits channels into what one (UN)SUBSCRIBE may carry: all of
// them for classic Pub/Sub, one group per hash slot for sharded (Redis
// answers CROSSSLOT to an SSUBSCRIBE across slots).
func (r *Redis) groups(channels []string) [][]string {
	if len(channels) == 0 {
		return nil
	}
	if !r.opts.Sharded {
		return [][]string{channels}
	}
	bySlot := map[int][]string{}
	var order []int
	for _, c := range channels {
		slot := names.Slot(c)
		if bySlot[slot] == nil {
			order = append(order, slot)
		}
		bySlot[slot] = append(bySlot[slot], c)
	}
	out := make([][]string, 0, len(order))
	for _, slot := range order {
		out = append(out, bySlot[slot])
	}
	return out
}
