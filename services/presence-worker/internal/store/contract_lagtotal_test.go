package store

import (
	"context"
	"testing"
	"time"
)

// Snapshot's Total is "the number of users with a live entry" (store.go);
// a user whose entry expired moments ago and whom no sweep has removed yet
// is not live, also when the limit lists fewer users than the room holds.
func TestContractSnapshotTotalSkipsUnsweptExpired(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		se.start("r", "old", "c", 1, OutcomeStarted)
		se.advance(stTTL / 2)
		se.start("r", "new", "c", 1, OutcomeStarted)
		se.advance(stTTL/2 + 100*time.Millisecond) // old expired 100 ms ago, unswept; new live
		for _, limit := range []int{0, 1} {
			snap, err := se.st.Snapshot(context.Background(), "r", limit)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Total != 1 {
				t.Errorf("limit %d: total %d (users %v), want 1: only \"new\" is live", limit, snap.Total, snap.Users)
			}
		}
		if got := se.snapshotOf("r"); len(got) != 1 || got[0] != "new/N" {
			t.Fatalf("snapshot: %v, want new", got)
		}
	})
}

// A snapshot limited to as many users as are typing lists them all, also
// when one of them has a lagging score (a throttled refresh) below that of
// a user who expired moments ago and whom no sweep has removed yet.
func TestContractSnapshotLimitListsLaggingTypist(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		se.start("r", "c", "x", 1, OutcomeStarted) // score: T0 + ttl
		se.advance(100 * time.Millisecond)
		se.start("r", "b", "x", 1, OutcomeStarted) // T0 + 100 + ttl, never refreshed
		se.advance(700 * time.Millisecond)
		se.start("r", "c", "x", 2, OutcomeThrottled) // c lives to T0 + 800 + ttl; score lags
		se.advance(100 * time.Millisecond)
		se.start("r", "a", "x", 1, OutcomeStarted) // T0 + 900 + ttl
		se.advance(lagTTL - 600*time.Millisecond)  // T0 + 300 + ttl: b expired, a and c type
		snap, err := se.st.Snapshot(context.Background(), "r", 2)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, u := range snap.Users {
			got = append(got, u.User)
		}
		if len(got) != 2 || got[0] != "a" || got[1] != "c" || snap.Total != 2 {
			t.Fatalf("snapshot (limit 2) of a room where a and c type: %v total %d, want [a c] total 2", got, snap.Total)
		}
	})
}
