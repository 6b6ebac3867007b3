package pubsub

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
)

// Cluster slot moves (sharded Pub/Sub on Redis Cluster).
//
// When a slot moves to another master (resharding, or a failover that
// promotes a replica), Redis 7 ends the shard-channel subscriptions of that
// slot with a server-sent "sunsubscribe" (dropped). The channel becomes an
// orphan, and the rebalance loop subscribes it on the link of the master
// the slot map names (waiting up to moveWait for the map to show the
// move); once confirmed there it is reported restored (its room resynced).
// Every rebalanceInterval the loop also reloads the slot map and checks
// every channel against it, which catches a master that died and whose
// replica took over. A MOVED or ASK reply counts as a move of that slot; a
// CROSSSLOT reply makes the link resubscribe one slot at a time.
const (
	rebalanceInterval = 2 * time.Second
	moveWait          = 3 * time.Second
	moveRetry         = 100 * time.Millisecond
	// reloadSettle is how long a round waits after asking go-redis to
	// reload the slot map (CLUSTER SLOTS, in the background).
	reloadSettle = 250 * time.Millisecond
)

func (r *Redis) askRebalance() {
	select {
	case r.rebalanceCh <- struct{}{}:
	default:
	}
}

// placeOrphan looks up the master of a new channel's slot (outside any
// lock, bounded by ctx) and puts the channel on that master's link.
func (r *Redis) placeOrphan(ctx context.Context, name string) error {
	node, err := r.cluster.MasterForKey(ctx, name)
	if err != nil {
		r.askRebalance() // it stays an orphan; the loop places it later
		return fmt.Errorf("%w: slot map: %v", ErrUnavailable, err)
	}
	addr := node.Options().Addr
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.chans[name]
	if c == nil || !c.orphan || c.from != "" || r.closed {
		return nil // placed meanwhile, left, or moving (the loop places it)
	}
	l := r.links[addr]
	if l == nil {
		l = r.newLinkLocked(addr, node, name)
		r.links[addr] = l
		r.startLinkLocked(l)
		r.log.Info("redis cluster pubsub link opened", zap.String("master", addr))
	}
	r.assignLocked(c, l)
	return nil
}

// rebalanceLoop moves channels to the link of their slot's master: at once
// when a master dropped some, and every rebalanceInterval.
func (r *Redis) rebalanceLoop() {
	defer r.wg.Done()
	r.probeCluster() // Health is down until the Cluster first answered
	t := time.NewTicker(rebalanceInterval)
	defer t.Stop()
	var waitingSince time.Time
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.rebalanceCh:
		case <-t.C:
			r.probeCluster()
			// go-redis reloads the slot map only every minute on its own,
			// or on MOVED replies, which a Pub/Sub-only client rarely gets.
			r.cluster.ReloadState(r.ctx)
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(reloadSettle):
			}
		}
		moved, pending := r.rebalance(!waitingSince.IsZero() && time.Since(waitingSince) > moveWait)
		if moved > 0 {
			r.log.Info("room channels moved to their slots' new masters; resyncing once confirmed", zap.Int("channels", moved))
		}
		if pending == 0 {
			waitingSince = time.Time{}
			continue
		}
		if waitingSince.IsZero() {
			waitingSince = time.Now()
		}
		r.cluster.ReloadState(r.ctx)
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(moveRetry):
			r.askRebalance()
		}
	}
}

// probeCluster PINGs the Cluster (a node go-redis picks), bounded by
// PingTimeout, and caches the outcome for Health: with no room joined
// there is no link whose health would tell whether Redis is reachable.
// It runs at Start and every rebalanceInterval; until the first answer,
// Health is down (errNeverUp).
func (r *Redis) probeCluster() {
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.PingTimeout)
	err := r.cluster.Ping(ctx).Err()
	cancel()
	r.mu.Lock()
	r.probeErr = ""
	if err != nil {
		r.probeErr = err.Error()
	}
	r.mu.Unlock()
}

// rebalance moves every channel whose slot's master differs from its
// link's, and places the orphans once the slot map names another master
// than the one that dropped them (or whatever it names when force is set).
// The slot lookups run outside r.mu (go-redis answers from its cached map,
// bounded by ctx when it has none). It returns how many channels moved and
// how many orphans still wait.
func (r *Redis) rebalance(force bool) (moved, pending int) {
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	type entry struct {
		name, at, from string
		orphan         bool
	}
	r.mu.Lock()
	entries := make([]entry, 0, len(r.chans))
	for name, c := range r.chans {
		e := entry{name: name, from: c.from, orphan: c.orphan}
		if c.link != nil {
			e.at = c.link.addr
		}
		entries = append(entries, e)
	}
	r.mu.Unlock()
	dest := map[string]string{}         // channel -> master to move to
	nodes := map[string]*redis.Client{} // master -> its client
	for _, e := range entries {
		node, err := r.cluster.MasterForKey(ctx, e.name)
		if err != nil {
			if e.orphan {
				pending++
			}
			continue
		}
		addr := node.Options().Addr
		switch {
		case e.orphan && addr == e.from && !force:
			pending++
		case e.orphan || addr != e.at:
			dest[e.name] = addr
			nodes[addr] = node
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, pending
	}
	for name, addr := range dest {
		c := r.chans[name]
		if c == nil {
			continue
		}
		l := r.links[addr]
		if l == nil {
			l = r.newLinkLocked(addr, nodes[addr], name)
			r.links[addr] = l
			r.startLinkLocked(l)
			r.log.Info("redis cluster pubsub link opened", zap.String("master", addr))
		}
		if c.link == l {
			continue
		}
		if c.link != nil {
			r.unassignLocked(c, c.link.addr)
		}
		r.assignLocked(c, l)
		moved++
	}
	r.met.RedisChannelMoves.Add(float64(moved))
	r.closeIdleLinksLocked()
	return moved, pending
}

// closeIdleLinksLocked removes the Cluster links that are down and hold no
// channel (their master died or left, and its channels moved); r.mu is held.
func (r *Redis) closeIdleLinksLocked() {
	for addr, l := range r.links {
		if addr != "" && l.down && len(l.chans) == 0 {
			r.removeLinkLocked(l)
			r.log.Info("redis cluster pubsub link closed (master down, no channels left)", zap.String("master", addr))
		}
	}
}

// removeLinkLocked drops l from the table and stops its supervisor; r.mu
// is held.
func (r *Redis) removeLinkLocked(l *link) {
	if r.links[l.addr] == l {
		delete(r.links, l.addr)
	}
	l.removed = true
	l.redial("link removed")
	r.met.RedisLinks.Set(float64(len(r.links)))
	r.countDownLocked()
}

// dropped handles a server-sent sunsubscribe of name on l: our own
// SUNSUBSCRIBE's confirmation, or (Cluster) the master no longer serves
// its slot, and the channel becomes an orphan for the rebalance loop.
func (r *Redis) dropped(l *link, name string) {
	r.mu.Lock()
	if n := l.unsubPending[name]; n > 0 {
		if n == 1 {
			delete(l.unsubPending, name)
		} else {
			l.unsubPending[name] = n - 1
		}
		r.mu.Unlock()
		return
	}
	c := r.chans[name]
	if c == nil || c.link != l || r.cluster == nil {
		r.mu.Unlock()
		return
	}
	r.unassignLocked(c, l.addr)
	r.mu.Unlock()
	r.log.Info("redis master dropped a room channel (slot moved); resubscribing on the new master", zap.String("channel", name), zap.String("master", l.addr))
	r.cluster.ReloadState(r.ctx)
	r.askRebalance()
}

// linkClosed handles a Cluster link whose node client go-redis closed (the
// node left the slot map): its channels become orphans for the rebalance
// loop.
func (r *Redis) linkClosed(l *link) {
	r.mu.Lock()
	n := len(l.chans)
	for _, c := range l.chans {
		r.unassignLocked(c, "")
	}
	r.removeLinkLocked(l)
	r.mu.Unlock()
	r.log.Warn("redis cluster pubsub link closed (its master left the slot map); moving its channels", zap.String("master", l.addr), zap.Int("channels", n))
	r.askRebalance()
}

// serverError handles an error reply on connection gen of l (the
// connection is fine):
//
//   - MOVED / ASK (Cluster): an SSUBSCRIBE went to a master that no longer
//     serves the slot: the link's channels of that slot become orphans.
//   - CROSSSLOT: an SSUBSCRIBE spanned slots; the link subscribes its
//     channels again one slot at a time.
//   - anything else (NOPERM: an ACL refusing a channel) is the refusal of
//     one of the commands the next PONG settles (confirm.go); it is
//     logged with the channels it refused. Before the connection answered
//     any PING, it is also the link's health error, and read last it
//     fails the connection at its deadline as a refused PING
//     (pingDeadline).
func (r *Redis) serverError(l *link, gen uint64, reply string) {
	switch f := strings.Fields(reply); {
	case r.cluster != nil && len(f) >= 2 && (f[0] == "MOVED" || f[0] == "ASK"):
		slot, err := strconv.Atoi(f[1])
		if err != nil {
			break
		}
		r.mu.Lock()
		n := 0
		for name, c := range l.chans {
			if names.Slot(name) == slot {
				r.unassignLocked(c, l.addr)
				n++
			}
		}
		r.mu.Unlock()
		if n > 0 {
			r.log.Info("redis master does not serve a subscribed slot; resubscribing on its new master", zap.String("master", l.addr), zap.Int("slot", slot), zap.Int("channels", n))
		}
		r.cluster.ReloadState(r.ctx)
		r.askRebalance()
		return
	case len(f) >= 1 && f[0] == "CROSSSLOT":
		r.mu.Lock()
		clear(l.sent)
		for _, c := range l.chans {
			c.unconfirmLocked()
		}
		l.kickLocked()
		r.mu.Unlock()
		r.log.Info("resubscribing a redis pubsub link one slot at a time after a CROSSSLOT reply", zap.String("link", l.name()))
		return
	}
	r.mu.Lock()
	if l.gen == gen {
		l.refusedLast.Store(true)
		if l.batchErr == "" {
			l.batchErr = reply
		}
		if !l.up {
			l.lastErr = "error reply: " + reply
		}
	}
	r.mu.Unlock()
}
