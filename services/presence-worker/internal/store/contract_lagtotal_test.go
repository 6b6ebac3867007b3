package store

import (
	"context"
	"slices"
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

// hold makes user live but not shown in room: two honest start → stop
// pairs spend the burst of the event rate limit, so the third start is
// held (coalesced) until the sweeper may publish it.
func (se *storeEnv) hold(room, user string) {
	se.t.Helper()
	se.start(room, user, "c", 1, OutcomeStarted)
	se.stop(room, user, "c", 2, OutcomeStopped)
	se.start(room, user, "c", 3, OutcomeStarted)
	se.stop(room, user, "c", 4, OutcomeStopped)
	se.start(room, user, "c", 5, OutcomeCoalesced)
}

// A user whose start the event rate limit holds is live but not shown: a
// snapshot neither lets them take a shown user's place under the limit nor
// counts them in total, whichever of the two is more recent.
func TestContractSnapshotHeldStartNotShownNorCounted(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		se.start("r", "b", "c", 1, OutcomeStarted) // shown, older than the held one
		se.advance(10 * time.Millisecond)
		se.hold("r", "a")
		se.advance(10 * time.Millisecond)
		se.start("r", "c", "c", 1, OutcomeStarted) // shown, more recent
		for _, limit := range []int{1, 2, MaxSnapshotLimit} {
			snap, err := se.st.Snapshot(context.Background(), "r", limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, u := range snap.Users {
				got = append(got, u.User)
			}
			if len(got) != min(limit, 2) || slices.Contains(got, "a") || snap.Total != 2 {
				t.Errorf("limit %d: %v total %d; want %d of b and c, total 2", limit, got, snap.Total, min(limit, 2))
			}
		}
	})
}
