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
