package store

import (
	"context"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
)

// The contract suite, continued: store keys's typist key.

// Store keys's typist key lives while the user is in the room's users set
// (scripts/lib.lua, mark): created by the start that adds the user,
// renewed with the user hash by every start outside the refresh window
// (same expiry), left alone by throttled refreshes, recreated by the next
// renewal when something removed it (an eviction), deleted with the user
// by a stop and by the sweep. Store zset keeps no such key.
func TestContractTypistKeyLivesWithTheUser(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		ctx := context.Background()
		key := se.names.TypistKey("r", "u")
		userKey := userKeyPrefix(se.names, "r") + names.Enc("u")
		exists := func() bool {
			t.Helper()
			n, err := se.rdb.Exists(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		}
		at := func(k string) time.Duration {
			t.Helper()
			d, err := se.rdb.PExpireTime(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		// renewed checks the key right after a renewal of the user hash.
		renewed := func(what string) {
			t.Helper()
			if se.kind == config.StoreZSet {
				if exists() {
					t.Fatalf("%s: store zset has a typist key", what)
				}
				return
			}
			// The same PEXPIRE, a few µs after the user hash's: Redis 7.0's
			// clock moves inside a script, so it may land 1 ms later.
			if got, want := at(key), at(userKey); want <= 0 || got < want || got > want+2*time.Millisecond {
				t.Fatalf("%s: typist key expires at %v, want the user hash's %v (+ up to 2 ms)", what, got, want)
			}
			if u, err := se.rdb.HGet(ctx, key, "u").Result(); err != nil || u != names.Enc("u") {
				t.Fatalf("%s: typist key field u = %q, %v; want enc(user)", what, u, err)
			}
		}
		unchanged := func(what string, before time.Duration) {
			t.Helper()
			if se.kind == config.StoreKeys && at(key) != before {
				t.Fatalf("%s rewrote the typist key", what)
			}
		}
		se.start("r", "u", "phone", 1, OutcomeStarted)
		renewed("after the start")
		before := at(key)
		se.advance(300 * time.Millisecond)
		se.start("r", "u", "phone", 2, OutcomeThrottled) // the score lags
		unchanged("a throttled refresh that left the score", before)
		se.advance(800 * time.Millisecond)
		se.start("r", "u", "laptop", 1, OutcomeThrottled) // past the lag bound: the score moves
		unchanged("a throttled refresh that moved the score", before)
		se.stop("r", "u", "laptop", 2, OutcomeNoop) // the score drops to the phone's entry
		unchanged("one device's stop", before)
		if err := se.rdb.Del(ctx, key).Err(); err != nil { // as an eviction would
			t.Fatal(err)
		}
		se.advance(lagThrottle) // past the refresh window
		se.start("r", "u", "phone", 3, OutcomeRefreshed)
		renewed("after the refresh that renewed the user hash")
		se.stop("r", "u", "phone", 4, OutcomeStopped)
		if exists() {
			t.Fatalf("typist key left after the user's last stop")
		}
		se.start("r", "u", "phone", 5, OutcomeStarted)
		renewed("after a new start")
		se.advance(lagTTL + 100*time.Millisecond)
		if r := se.sweep(); r.Stops != 1 {
			t.Fatalf("sweep after the ttl: %+v, want one stop", r)
		}
		if exists() {
			t.Fatalf("typist key left after the sweep removed the user")
		}
		// A typist key whose user is not in the users set (one an earlier
		// version left behind) is neither listed nor counted, even with a
		// user hash that says shown and live (the users set decides).
		live := se.redisNowMs() + lagTTL.Milliseconds()
		if err := se.rdb.HSet(ctx, key, "c:phone", live).Err(); err != nil {
			t.Fatal(err)
		}
		if err := se.rdb.HSet(ctx, userKeyPrefix(se.names, "r")+names.Enc("u"), "p", "1", "c:phone", live).Err(); err != nil {
			t.Fatal(err)
		}
		if snap, err := se.st.Snapshot(ctx, "r", MaxSnapshotLimit); err != nil || len(snap.Users) != 0 || snap.Total != 0 {
			t.Fatalf("snapshot with a typist key of a user not in the room: %+v, %v; want nobody", snap, err)
		}
	})
}
