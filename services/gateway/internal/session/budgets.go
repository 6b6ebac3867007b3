package session

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"
)

// FreeJoinRefill is the period in which a user's free joins refill
// completely: BudgetConfig.FreeJoins tokens per minute (docs/protocol.md,
// "Snapshots: budget and sharing"), so a client that reconnects a minute
// later rejoins all its rooms for free.
const FreeJoinRefill = time.Minute

// BudgetConfig sizes the snapshot budgets of a gateway's WebSocket users.
type BudgetConfig struct {
	FreeJoins     int     // burst of a user's free joins, refilled FreeJoins per FreeJoinRefill (ELLIPSIS_MAX_ROOMS_PER_CONN)
	SnapshotRate  float64 // snapshots/s of a user's snapshot bucket (ELLIPSIS_SNAPSHOT_RATE)
	SnapshotBurst int     // burst of a user's snapshot bucket, snapshots (ELLIPSIS_SNAPSHOT_BURST)
	Users         int     // users with no open connection whose budget is kept (ELLIPSIS_SNAPSHOT_USERS)
	// Watches is the burst of a user's watch budget, refilled Watches per
	// WatchRefill: each newly watched room takes one (ELLIPSIS_MAX_WATCHED_ROOMS;
	// 0: watching is off, no bucket).
	Watches int
}

// WatchRefill is the period in which a user's watch budget refills
// completely: BudgetConfig.Watches tokens per minute (docs/protocol.md,
// "Watching rooms"), so a client watches its rooms at once, and again
// after a reconnect a minute later, while a watch → unwatch loop pays.
const WatchRefill = time.Minute

// Budgets holds the snapshot budget of every user of a gateway's
// WebSocket connections (docs/protocol.md, "Snapshots: budget and
// sharing"): all the connections of a user on this gateway share one
// state, so a client that reconnects starts from what its last connection
// left, not from a fresh budget. The rule of memory: a user with an open
// connection is always kept (its connections hold a reference; at most
// ELLIPSIS_MAX_CONNS such users); a user whose last connection closed
// moves to an LRU of at most BudgetConfig.Users users, and past that the
// one idle longest is forgotten (its next connection starts from full
// buckets). A user whose buckets are full when its last connection closes
// is forgotten at once: a new state would be the same. Safe for
// concurrent use.
type Budgets struct {
	cfg BudgetConfig

	mu   sync.Mutex
	open map[string]*userBudget              // users with an open connection
	idle *simplelru.LRU[string, *userBudget] // users with none, least recently closed first out
}

// NewBudgets makes an empty registry. Every field of cfg but Watches (0 or
// more) must be positive
// (the error names the field); the gateway's settings are validated
// upstream.
func NewBudgets(cfg BudgetConfig) (*Budgets, error) {
	var errs []error
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"FreeJoins", cfg.FreeJoins < 1},
		{"SnapshotRate", !(cfg.SnapshotRate > 0)},
		{"SnapshotBurst", cfg.SnapshotBurst < 1},
		{"Users", cfg.Users < 1},
	} {
		if f.bad {
			errs = append(errs, fmt.Errorf("session: budgets: %s must be positive", f.name))
		}
	}
	if cfg.Watches < 0 {
		errs = append(errs, fmt.Errorf("session: budgets: Watches must be 0 or more, got %d", cfg.Watches))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	idle, err := simplelru.NewLRU[string, *userBudget](cfg.Users, nil)
	if err != nil {
		return nil, fmt.Errorf("session: budgets: %w", err)
	}
	return &Budgets{cfg: cfg, open: map[string]*userBudget{}, idle: idle}, nil
}

// acquire returns user's budget for a new connection, counting the
// reference; the connection gives it back with release when it ends.
func (b *Budgets) acquire(user string) *userBudget {
	b.mu.Lock()
	defer b.mu.Unlock()
	u, ok := b.open[user]
	if !ok {
		if u, ok = b.idle.Peek(user); ok {
			b.idle.Remove(user)
		} else {
			u = newUserBudget(user, b.cfg)
		}
		b.open[user] = u
	}
	u.refs++
	return u
}

// release drops one connection's reference to u. With none left, u moves
// to the idle LRU (evicting the user idle longest when full), or is
// forgotten when its buckets are full.
func (b *Budgets) release(u *userBudget) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if u.refs--; u.refs > 0 {
		return
	}
	delete(b.open, u.user)
	if !u.full(time.Now()) {
		b.idle.Add(u.user, u)
	}
}

// users is how many users are kept: with an open connection, and idle.
func (b *Budgets) users() (open, idle int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.open), b.idle.Len()
}

// userBudget is one user's state: its free joins, its snapshot bucket and
// its watch budget.
type userBudget struct {
	user string
	refs int // open connections holding it; under Budgets.mu

	snaps *rate.Limiter // snapshot bucket (safe for concurrent use)

	mu sync.Mutex // guards free and watch; taken after Conn.mu, never before
	// free: the free joins (burst FreeJoins, FreeJoins per FreeJoinRefill),
	// held by joins in flight and taken when they commit.
	free heldBucket
	// watch: the watch budget (burst Watches, Watches per WatchRefill; no
	// bucket when watching is off), held by rooms of watch frames in
	// flight and taken when they are watched or forbidden.
	watch heldBucket
}

// heldBucket is a token bucket whose tokens are held before they are
// taken: a hold needs a token beyond those held, and only a spend takes
// one, so the bucket never falls below the holds and a spend always finds
// its token. Its owner's mutex guards it.
type heldBucket struct {
	lim  *rate.Limiter // nil: no bucket, nothing can be held
	held int
}

func (b *heldBucket) hold(now time.Time) bool {
	if b.lim == nil || b.lim.TokensAt(now)-float64(b.held) < 1 {
		return false
	}
	b.held++
	return true
}

func (b *heldBucket) spend(now time.Time) {
	b.held--
	b.lim.AllowN(now, 1)
}

func (b *heldBucket) give() { b.held-- }

// full: no token held and the bucket (if any) full at now.
func (b *heldBucket) full(now time.Time) bool {
	return b.held == 0 && (b.lim == nil || b.lim.TokensAt(now) >= float64(b.lim.Burst()))
}

// holdWatch holds one watch token for a room of a watch frame in flight
// if the user has one not held already (as holdFree); the room then calls
// spendWatch (watched, or forbidden: the authoriser was asked) or
// returnWatch (unavailable).
func (u *userBudget) holdWatch(now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.watch.hold(now)
}

// spendWatch takes the watch token a room held.
func (u *userBudget) spendWatch(now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.watch.spend(now)
}

// returnWatch gives back the watch token a room held.
func (u *userBudget) returnWatch() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.watch.give()
}

// watchRetry is how long until the user has a watch token not held.
func (u *userBudget) watchRetry(now time.Time) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	missing := 1 + float64(u.watch.held) - u.watch.lim.TokensAt(now)
	return time.Duration(missing / float64(u.watch.lim.Limit()) * float64(time.Second))
}

// watching reports whether the user has a watch budget (watching is on).
func (u *userBudget) watching() bool { return u.watch.lim != nil }

func newUserBudget(user string, cfg BudgetConfig) *userBudget {
	u := &userBudget{
		user:  user,
		snaps: rate.NewLimiter(rate.Limit(cfg.SnapshotRate), cfg.SnapshotBurst),
		free:  heldBucket{lim: rate.NewLimiter(rate.Limit(float64(cfg.FreeJoins)/FreeJoinRefill.Seconds()), cfg.FreeJoins)},
	}
	if cfg.Watches > 0 {
		u.watch.lim = rate.NewLimiter(rate.Limit(float64(cfg.Watches)/WatchRefill.Seconds()), cfg.Watches)
	}
	return u
}

// holdFree holds one free join for a join in flight if the user has one
// not held by another; the join then calls spendFree if it commits and
// returnFree if not (heldBucket: a spend always finds its token).
func (u *userBudget) holdFree(now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.free.hold(now)
}

// spendFree takes the free join a committed join held.
func (u *userBudget) spendFree(now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.free.spend(now)
}

// returnFree gives back the free join held by a join that did not commit.
func (u *userBudget) returnFree() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.free.give()
}

// full reports whether every bucket is full at now and nothing holds a
// token: the state a new user starts from.
func (u *userBudget) full(now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.free.full(now) && u.watch.full(now) && u.snaps.TokensAt(now) >= float64(u.snaps.Burst())
}
