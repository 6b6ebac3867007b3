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

// DefaultCacheHiddenIDs bounds a [Cache] whose MaxHiddenIDs is zero: the
// user ids of the cached grants' hide lists, all entries together. At
// about 50 bytes an id plus its bytes, some tens of MB for ids of 20
// bytes, whatever the platform's hook replies.
const DefaultCacheHiddenIDs = 500_000

// Cache remembers the decisions of another Authorizer per (user, room):
// allowed answers for AllowTTL (ELLIPSIS_AUTHZ_CACHE_TTL), explicit
// denials for DenyTTL (ELLIPSIS_AUTHZ_DENY_CACHE_TTL, kept short so a
// user just granted access can join soon). A missing answer
// ([ErrNoAnswer]) or any other error is never cached: the next join asks
// again. A zero TTL disables that half of the cache.
//
// An allowed answer is cached with its [Grant] (the hook's hide list for
// the room), so a cached allow hides the same users as the reply did.
//
// The cache holds at most MaxEntries, and grants of at most MaxHiddenIDs
// hidden user ids in all; when full, expired entries are dropped, then
// arbitrary ones, so a client asking for many distinct rooms cannot grow
// it without bound (a grant alone over MaxHiddenIDs is not cached). Safe
// for concurrent use.
type Cache struct {
	Next         Authorizer
	AllowTTL     time.Duration
	DenyTTL      time.Duration
	MaxEntries   int              // zero: DefaultCacheEntries
	MaxHiddenIDs int              // zero: DefaultCacheHiddenIDs
	Now          func() time.Time // nil: time.Now

	mu     sync.Mutex
	m      map[cacheKey]cacheEntry
	hidden int // the grants' hidden ids in m
}

var _ Authorizer = (*Cache)(nil)

type cacheKey struct{ user, room string }

type cacheEntry struct {
	allow bool
	grant Grant
	until time.Time
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Authorize implements [Authorizer].
func (c *Cache) Authorize(ctx context.Context, id auth.Identity, room string) (Grant, error) {
	k := cacheKey{id.User, room}
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok && now.Before(e.until) {
		if e.allow {
			return e.grant, nil
		}
		return Grant{}, ErrForbidden
	}
	g, err := c.Next.Authorize(ctx, id, room)
	switch {
	case err == nil && c.AllowTTL > 0:
		c.store(k, cacheEntry{allow: true, grant: g, until: now.Add(c.AllowTTL)}, now)
	case errors.Is(err, ErrForbidden) && !errors.Is(err, ErrNoAnswer) && c.DenyTTL > 0:
		c.store(k, cacheEntry{allow: false, until: now.Add(c.DenyTTL)}, now)
	}
	return g, err
}

// Len returns the number of cached entries, expired ones included.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// HiddenIDs returns the hidden user ids of the cached grants, expired
// ones included.
func (c *Cache) HiddenIDs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hidden
}

func (c *Cache) store(k cacheKey, e cacheEntry, now time.Time) {
	max, maxIDs := c.MaxEntries, c.MaxHiddenIDs
	if max <= 0 {
		max = DefaultCacheEntries
	}
	if maxIDs <= 0 {
		maxIDs = DefaultCacheHiddenIDs
	}
	ids := e.grant.HideTypingFrom.Len()
	if ids > maxIDs {
		return // asked again at the next join
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[cacheKey]cacheEntry{}
	}
	c.drop(k) // replaced: its ids leave the count
	if len(c.m) >= max || c.hidden+ids > maxIDs {
		for ck, ce := range c.m {
			if !now.Before(ce.until) {
				c.drop(ck)
			}
		}
		// Still full: drop arbitrary entries (map order) down to 90 %.
		for ck := range c.m {
			if len(c.m) < max-max/10 && c.hidden+ids <= maxIDs-maxIDs/10 {
				break
			}
			c.drop(ck)
		}
	}
	c.m[k] = e
	c.hidden += ids
}

// drop removes k's entry (c.mu held).
func (c *Cache) drop(k cacheKey) {
	if e, ok := c.m[k]; ok {
		c.hidden -= e.grant.HideTypingFrom.Len()
		delete(c.m, k)
	}
}
