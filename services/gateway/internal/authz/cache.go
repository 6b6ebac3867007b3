package authz

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
)

// DefaultCacheEntries bounds a [Cache] whose MaxEntries is zero. At about
// 100 bytes an entry (plus the ids) that is some tens of MB at most, however
// many distinct rooms clients ask for.
const DefaultCacheEntries = 100_000

// Cache remembers the decisions of another Authorizer per (user, room):
// allowed answers for AllowTTL (ELLIPSIS_AUTHZ_CACHE_TTL), explicit
// denials for DenyTTL (ELLIPSIS_AUTHZ_DENY_CACHE_TTL, kept short so a
// user just granted access can join soon). A missing answer
// ([ErrNoAnswer]) or any other error is never cached: the next join asks
// again. A zero TTL disables that half of the cache.
//
// The cache holds at most MaxEntries; when full, expired entries are
// dropped, then arbitrary ones, so a client asking for many distinct rooms
// cannot grow it without bound. Safe for concurrent use.
type Cache struct {
	Next       Authorizer
	AllowTTL   time.Duration
	DenyTTL    time.Duration
	MaxEntries int              // zero: DefaultCacheEntries
	Now        func() time.Time // nil: time.Now

	mu sync.Mutex
	m  map[cacheKey]cacheEntry
}

var _ Authorizer = (*Cache)(nil)

type cacheKey struct{ user, room string }

type cacheEntry struct {
	allow bool
	until time.Time
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Authorize implements [Authorizer].
func (c *Cache) Authorize(ctx context.Context, id auth.Identity, room string) error {
	k := cacheKey{id.User, room}
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok && now.Before(e.until) {
		if e.allow {
			return nil
		}
		return ErrForbidden
	}
	err := c.Next.Authorize(ctx, id, room)
	switch {
	case err == nil && c.AllowTTL > 0:
		c.store(k, cacheEntry{allow: true, until: now.Add(c.AllowTTL)}, now)
	case errors.Is(err, ErrForbidden) && !errors.Is(err, ErrNoAnswer) && c.DenyTTL > 0:
		c.store(k, cacheEntry{allow: false, until: now.Add(c.DenyTTL)}, now)
	}
	return err
}

// Len returns the number of cached entries, expired ones included.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

func (c *Cache) store(k cacheKey, e cacheEntry, now time.Time) {
	max := c.MaxEntries
	if max <= 0 {
		max = DefaultCacheEntries
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[cacheKey]cacheEntry{}
	}
	if _, ok := c.m[k]; !ok && len(c.m) >= max {
		for ck, ce := range c.m {
			if !now.Before(ce.until) {
				delete(c.m, ck)
			}
		}
		// Still full: drop arbitrary entries (map order) down to 90 %.
		for ck := range c.m {
			if len(c.m) < max-max/10 {
				break
			}
			delete(c.m, ck)
		}
	}
	c.m[k] = e
}
