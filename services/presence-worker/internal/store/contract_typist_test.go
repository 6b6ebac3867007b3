package store

import (
	"context"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
)

// The contract suite, continued: store keys's typist key.

// Store keys's typist key expires at the user's true expiry, their latest
// live entry (scripts/lib.lua, mark), as seen from outside: right after a
// start its PTTL is in (0, ttl]; a throttled refresh moves it later; a
// stop of one of two devices sets it to the other device's entry; a start
// with a shorter ttl lowers it but not below another device's live entry;
// it is recreated after an eviction, gone on the last stop, and gone
// within ttl of the last start with no worker running (no sweep). Store
// zset keeps no such key.
func TestContractTypistKeyExpiresWithTheUser(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		c := &typistKeyCheck{t: t, se: se, ctx: ctx, key: se.names.TypistKey("r", "u"), userKey: se.names.UserKey("r", "u")}
		se.start("r", "u", "phone", 1, OutcomeStarted)
		c.honest("after the start", lagTTL, "phone")
		se.advance(300 * time.Millisecond)
		se.start("r", "u", "phone", 2, OutcomeThrottled)
		c.honest("after a throttled refresh", lagTTL, "phone")
		se.advance(300 * time.Millisecond)
		se.start("r", "u", "laptop", 1, OutcomeThrottled)
		c.honest("after the laptop's start", lagTTL, "phone", "laptop")
		se.stop("r", "u", "laptop", 2, OutcomeNoop)
		c.honest("after the laptop's stop", lagTTL, "phone")
		if err := se.rdb.Del(ctx, c.key).Err(); err != nil { // as an eviction would
			t.Fatal(err)
		}
		se.start("r", "u", "phone", 3, OutcomeThrottled)
		c.honest("after a throttled refresh of an evicted key", lagTTL, "phone")
		// A worker with a shorter ttl: the key drops to the phone's new
		// entry, but stays at the laptop's while that one is later.
		short := se.shortTTL()
		se.startWith(short, "r", "u", "phone", 4, OutcomeThrottled)
		c.honest("after a shorter ttl's start", lagTTL/2, "phone")
		se.start("r", "u", "laptop", 3, OutcomeThrottled)
		se.startWith(short, "r", "u", "phone", 5, OutcomeThrottled)
		c.honest("after a shorter ttl's start with the laptop typing", lagTTL, "phone", "laptop")
		se.stop("r", "u", "laptop", 4, OutcomeNoop)
		se.stop("r", "u", "phone", 6, OutcomeStopped)
		if c.exists() {
			t.Fatalf("typist key left after the user's last stop")
		}
		c.expiresWithoutSweep()
		c.orphanKeyIsNotListed()
	})
}

// typistKeyCheck reads store keys's typist key of user u in room r.
type typistKeyCheck struct {
	t            *testing.T
	se           *storeEnv
	ctx          context.Context
	key, userKey string
}

func (c *typistKeyCheck) exists() bool {
	c.t.Helper()
	n, err := c.se.rdb.Exists(c.ctx, c.key).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	return n == 1
}

// at is the key's PEXPIRETIME (Unix ms).
func (c *typistKeyCheck) at() int64 {
	c.t.Helper()
	d, err := c.se.rdb.PExpireTime(c.ctx, c.key).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	return d.Milliseconds()
}

// entry is conn's entry in the user hash (Unix ms).
func (c *typistKeyCheck) entry(conn string) int64 {
	c.t.Helper()
	v, err := c.se.rdb.HGet(c.ctx, c.userKey, "c:"+conn).Int64()
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

// honest checks the key after a start of ttl: PTTL in (0, ttl], at
// the latest of the entries of conns.
func (c *typistKeyCheck) honest(what string, ttl time.Duration, conns ...string) {
	t, se := c.t, c.se
	t.Helper()
	if se.kind == config.StoreZSet {
		if c.exists() {
			t.Fatalf("%s: store zset has a typist key", what)
		}
		return
	}
	pttl, err := se.rdb.PTTL(c.ctx, c.key).Result()
	if err != nil || pttl <= 0 || pttl > ttl {
		t.Fatalf("%s: typist key PTTL %v, %v; want in (0, %v]", what, pttl, err, ttl)
	}
	var latest int64
	for _, conn := range conns {
		latest = max(latest, c.entry(conn))
	}
	// Redis 7.0's clock moves inside a script, so the key's
	// PEXPIREAT may land 1 ms from the entry's.
	if got := c.at(); got < latest || got > latest+1 {
		t.Fatalf("%s: typist key expires at %d, want the latest entry's %d", what, got, latest)
	}
	if u, err := se.rdb.HGet(c.ctx, c.key, "u").Result(); err != nil || u != names.Enc("u") {
		t.Fatalf("%s: typist key field u = %q, %v; want enc(user)", what, u, err)
	}
}

// expiresWithoutSweep checks that with no worker running the key is gone
// within ttl of the last start, and the next sweep stops the user.
func (c *typistKeyCheck) expiresWithoutSweep() {
	t, se := c.t, c.se
	t.Helper()
	se.start("r", "u", "phone", 7, OutcomeStarted)
	c.honest("after a new start", lagTTL, "phone")
	se.advance(lagTTL + 50*time.Millisecond)
	if c.exists() {
		t.Fatalf("typist key left %v after the last start, no sweep", lagTTL+50*time.Millisecond)
	}
	if got := se.snapshotOf("r"); len(got) != 0 {
		t.Fatalf("snapshot lists a typist whose entries ran out: %v", got)
	}
	if r := se.sweep(); r.Stops != 1 {
		t.Fatalf("sweep after the ttl: %+v, want one stop", r)
	}
}

// orphanKeyIsNotListed checks that a typist key whose user is not in the
// users set (one an earlier version left behind) is neither listed nor
// counted, even with a user hash that says shown and live (the users set
// decides).
func (c *typistKeyCheck) orphanKeyIsNotListed() {
	t, se := c.t, c.se
	t.Helper()
	live := se.redisNowMs() + lagTTL.Milliseconds()
	if err := se.rdb.HSet(c.ctx, c.key, "c:phone", live).Err(); err != nil {
		t.Fatal(err)
	}
	if err := se.rdb.HSet(c.ctx, se.names.UserKey("r", "u"), "p", "1", "c:phone", live).Err(); err != nil {
		t.Fatal(err)
	}
	if snap, err := se.st.Snapshot(c.ctx, "r", MaxSnapshotLimit); err != nil || len(snap.Users) != 0 || snap.Total != 0 {
		t.Fatalf("snapshot with a typist key of a user not in the room: %+v, %v; want nobody", snap, err)
	}
}
