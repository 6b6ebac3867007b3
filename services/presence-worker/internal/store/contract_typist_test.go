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
		key := se.names.TypistKey("r", "u")
		userKey := se.names.UserKey("r", "u")
		exists := func() bool {
			t.Helper()
			n, err := se.rdb.Exists(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		}
		at := func() int64 {
			t.Helper()
			d, err := se.rdb.PExpireTime(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			return d.Milliseconds()
		}
		entry := func(conn string) int64 {
			t.Helper()
			v, err := se.rdb.HGet(ctx, userKey, "c:"+conn).Int64()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		// honest checks the key after a start of ttl: PTTL in (0, ttl], at
		// the latest of the entries of conns.
		honest := func(what string, ttl time.Duration, conns ...string) {
			t.Helper()
			if se.kind == config.StoreZSet {
				if exists() {
					t.Fatalf("%s: store zset has a typist key", what)
				}
				return
			}
			pttl, err := se.rdb.PTTL(ctx, key).Result()
			if err != nil || pttl <= 0 || pttl > ttl {
				t.Fatalf("%s: typist key PTTL %v, %v; want in (0, %v]", what, pttl, err, ttl)
			}
			var latest int64
			for _, c := range conns {
				latest = max(latest, entry(c))
			}
			// Redis 7.0's clock moves inside a script, so the key's
			// PEXPIREAT may land 1 ms from the entry's.
			if got := at(); got < latest || got > latest+1 {
				t.Fatalf("%s: typist key expires at %d, want the latest entry's %d", what, got, latest)
			}
			if u, err := se.rdb.HGet(ctx, key, "u").Result(); err != nil || u != names.Enc("u") {
				t.Fatalf("%s: typist key field u = %q, %v; want enc(user)", what, u, err)
			}
		}
		se.start("r", "u", "phone", 1, OutcomeStarted)
		honest("after the start", lagTTL, "phone")
		se.advance(300 * time.Millisecond)
		se.start("r", "u", "phone", 2, OutcomeThrottled)
		honest("after a throttled refresh", lagTTL, "phone")
		se.advance(300 * time.Millisecond)
		se.start("r", "u", "laptop", 1, OutcomeThrottled)
		honest("after the laptop's start", lagTTL, "phone", "laptop")
		se.stop("r", "u", "laptop", 2, OutcomeNoop)
		honest("after the laptop's stop", lagTTL, "phone")
		if err := se.rdb.Del(ctx, key).Err(); err != nil { // as an eviction would
			t.Fatal(err)
		}
		se.start("r", "u", "phone", 3, OutcomeThrottled)
		honest("after a throttled refresh of an evicted key", lagTTL, "phone")
		// A worker with a shorter ttl: the key drops to the phone's new
		// entry, but stays at the laptop's while that one is later.
		short := se.shortTTL()
		se.startWith(short, "r", "u", "phone", 4, OutcomeThrottled)
		honest("after a shorter ttl's start", lagTTL/2, "phone")
		se.start("r", "u", "laptop", 3, OutcomeThrottled)
		se.startWith(short, "r", "u", "phone", 5, OutcomeThrottled)
		honest("after a shorter ttl's start with the laptop typing", lagTTL, "phone", "laptop")
		se.stop("r", "u", "laptop", 4, OutcomeNoop)
		se.stop("r", "u", "phone", 6, OutcomeStopped)
		if exists() {
			t.Fatalf("typist key left after the user's last stop")
		}
		// No worker runs: the key is gone within ttl of the last start.
		se.start("r", "u", "phone", 7, OutcomeStarted)
		honest("after a new start", lagTTL, "phone")
		se.advance(lagTTL + 50*time.Millisecond)
		if exists() {
			t.Fatalf("typist key left %v after the last start, no sweep", lagTTL+50*time.Millisecond)
		}
		if got := se.snapshotOf("r"); len(got) != 0 {
			t.Fatalf("snapshot lists a typist whose entries ran out: %v", got)
		}
		if r := se.sweep(); r.Stops != 1 {
			t.Fatalf("sweep after the ttl: %+v, want one stop", r)
		}
		// A typist key whose user is not in the users set (one an earlier
		// version left behind) is neither listed nor counted, even with a
		// user hash that says shown and live (the users set decides).
		live := se.redisNowMs() + lagTTL.Milliseconds()
		if err := se.rdb.HSet(ctx, key, "c:phone", live).Err(); err != nil {
			t.Fatal(err)
		}
		if err := se.rdb.HSet(ctx, se.names.UserKey("r", "u"), "p", "1", "c:phone", live).Err(); err != nil {
			t.Fatal(err)
		}
		if snap, err := se.st.Snapshot(ctx, "r", MaxSnapshotLimit); err != nil || len(snap.Users) != 0 || snap.Total != 0 {
			t.Fatalf("snapshot with a typist key of a user not in the room: %+v, %v; want nobody", snap, err)
		}
	})
}
