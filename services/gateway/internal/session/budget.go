package session

import (
	"fmt"
	"math"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Snapshot budget (docs/protocol.md, "Snapshots: budget and sharing"): a
// snapshot is a request to the workers (a script over the room's typists,
// or a SCAN of the keyspace with store keys), so the frames that ask for
// one take a token of the user's snapshot bucket (BudgetConfig.SnapshotRate
// tokens/s, SnapshotBurst; shared by all the user's connections on this
// gateway, budgets.go) once they passed the inbound limit: every sync,
// every join of a room the connection already joined, and every join of a
// new room that finds none of the user's free joins. The free joins are a
// bucket of BudgetConfig.FreeJoins (ELLIPSIS_MAX_ROOMS_PER_CONN) refilled
// FreeJoins per FreeJoinRefill, so a client joins all its rooms at once,
// and again after a reconnect a minute later, while a loop of joins and
// leaves, or of reconnects, pays. A join that does not commit (forbidden,
// unavailable, the connection closing) gives its free join back; a charged
// join keeps its token spent (it asked the authoriser or the workers). A
// frame without a token is answered rate_limited with its room and id, and
// no snapshot is asked; the connection stays (the inbound limit bounds how
// fast such frames come).

// holdFreeJoin holds one of the user's free joins for a join of a room
// not joined; see userBudget.holdFree.
func (c *Conn) holdFreeJoin() bool { return c.budget.holdFree(time.Now()) }

// takeSnapshot takes one token of the user's snapshot bucket for f (a
// sync or a paying join). Without one it answers f rate_limited (room and
// id echoed), counts it and returns false.
func (c *Conn) takeSnapshot(f protocol.ClientFrame) bool {
	now := time.Now()
	b := c.budget.snaps
	if b.AllowN(now, 1) {
		return true
	}
	tokens := b.TokensAt(now)
	bc := c.deps.Budgets.cfg
	c.met.Snapshot(metrics.SnapshotRateLimited)
	retryMs := int64(math.Ceil((1 - tokens) / bc.SnapshotRate * 1000))
	c.sendError(protocol.CodeRateLimited, fmt.Sprintf(
		"too many snapshots: sync, a join of a room already joined and joins past the user's %d free joins (refilled %d a minute) take one of %g per second, burst %d, shared by the user's connections on this gateway; retry in %d ms",
		bc.FreeJoins, bc.FreeJoins, bc.SnapshotRate, bc.SnapshotBurst, retryMs), f.Room, f.ID)
	return false
}
