package store

import (
	"context"
	"slices"
	"testing"
	"time"
)

// The contract suite, continued: users whose start the event rate limit
// holds (coalesced) in snapshots.

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
		for _, limit := range []int{0, 1, 2, MaxSnapshotLimit} {
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
