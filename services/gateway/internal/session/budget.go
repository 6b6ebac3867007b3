package session

import (
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Snapshot budget (docs/protocol.md, "Limits"): a snapshot is a request
// to the workers (a script over the room's typists, or a SCAN of the
// keyspace with store keys), so the frames that ask for one take a token
// of the connection's snapshot bucket (Config.SnapshotRate tokens/s,
// Config.SnapshotBurst) once they passed the inbound limit: every sync,
// every join of a room the connection already joined, and every join of a
// new room after the connection's first Config.MaxRooms of them. The
// first MaxRooms joins are free, so a client joins its rooms at once
// however many it has; a loop of joins and leaves pays from its
// (MaxRooms+1)th join on. A frame without a token is answered
// rate_limited with its room and id, and no snapshot is asked; the
// connection stays (the inbound limit bounds how fast such frames come).

// snapshotBudget is a connection's snapshot bucket and its count of joins
// of new rooms; under Conn.mu. The bucket is made at the first frame that
// needs it, so a connection that only joins pays nothing.
type snapshotBudget struct {
	bucket   *rate.Limiter
	newJoins int // joins of rooms not joined, reserved so far
}

// freeJoinLocked counts one join of a room not joined and reports whether
// it is among the connection's first MaxRooms (free); c.mu is held.
func (c *Conn) freeJoinLocked() bool {
	c.budget.newJoins++
	return c.budget.newJoins <= c.cfg.MaxRooms
}

// takeSnapshot takes one token of the snapshot bucket for f (a sync or a
// paying join). Without one it answers f rate_limited (room and id
// echoed), counts it and returns false.
func (c *Conn) takeSnapshot(f protocol.ClientFrame) bool {
	now := time.Now()
	c.mu.Lock()
	b := c.budget.bucket
	if b == nil {
		b = rate.NewLimiter(rate.Limit(c.cfg.SnapshotRate), c.cfg.SnapshotBurst)
		c.budget.bucket = b
	}
	ok := b.AllowN(now, 1)
	tokens := b.TokensAt(now)
	c.mu.Unlock()
	if ok {
		return true
	}
	c.met.Snapshot(metrics.SnapshotRateLimited)
	retryMs := int64(math.Ceil((1 - tokens) / c.cfg.SnapshotRate * 1000))
	c.sendError(protocol.CodeRateLimited, fmt.Sprintf(
		"too many snapshots: sync, a join of a room already joined and joins past the connection's first %d take one of %g per second, burst %d; retry in %d ms",
		c.cfg.MaxRooms, c.cfg.SnapshotRate, c.cfg.SnapshotBurst, retryMs), f.Room, f.ID)
	return false
}
