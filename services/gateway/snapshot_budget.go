package gateway

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"
)

// userBudgets is the per-user budget of GET /v1/rooms/{room}/typing
// (docs/protocol.md, "Limits"): one token bucket per user
// (ELLIPSIS_HTTP_SNAPSHOT_RATE tokens/s, ELLIPSIS_HTTP_SNAPSHOT_BURST),
// keyed by the authenticated user id (with ELLIPSIS_AUTH=none the user the
// request claims). At most ELLIPSIS_HTTP_SNAPSHOT_USERS users are tracked;
// past that the user that asked least recently is forgotten, and its next
// request starts from a full bucket (an LRU: a user that keeps asking is
// never the one evicted). With ELLIPSIS_AUTH=none a client may claim a new
// user per request; the budget then bounds only honest clients, the
// shared snapshots (one request in flight per room) bound the rest.
type userBudgets struct {
	perSecond rate.Limit
	burst     int

	mu    sync.Mutex
	users *simplelru.LRU[string, *rate.Limiter]
}

// newUserBudgets tracks at most size users (size >= 1, validated by
// config), each with a bucket of perSecond tokens/s and burst tokens.
func newUserBudgets(perSecond float64, burst, size int) *userBudgets {
	users, err := simplelru.NewLRU[string, *rate.Limiter](size, nil)
	if err != nil {
		panic("gateway: HTTP snapshot users: " + err.Error()) // size < 1: not a validated config
	}
	return &userBudgets{perSecond: rate.Limit(perSecond), burst: burst, users: users}
}

// take takes one token of user's bucket at now. Without one it returns
// false and how long until a token is there.
func (b *userBudgets) take(user string, now time.Time) (ok bool, retry time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, found := b.users.Get(user)
	if !found {
		l = rate.NewLimiter(b.perSecond, b.burst)
		b.users.Add(user, l)
	}
	if l.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - l.TokensAt(now)
	return false, time.Duration(missing / float64(b.perSecond) * float64(time.Second))
}

// len is the number of users tracked.
func (b *userBudgets) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.users.Len()
}
