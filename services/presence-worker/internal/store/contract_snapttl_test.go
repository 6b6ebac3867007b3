package store

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The contract suite, continued: a snapshot typist carries ttl_ms when its
// entry was started with a ttl other than the standard ttl (a platform
// service's own ttl_ms), and only then (docs/protocol.md, "Threads and
// activities").

// ttls returns each listed typist's TTLMs per scope ("" the room itself)
// of a snapshot of room cut at limit.
func (se *storeEnv) ttls(room string, limit int) map[string]map[string]int64 {
	se.t.Helper()
	snap, err := se.st.Snapshot(context.Background(), room, limit)
	if err != nil {
		se.t.Fatalf("snapshot %q: %v", room, err)
	}
	of := func(users []protocol.Typist) map[string]int64 {
		out := map[string]int64{}
		for _, u := range users {
			out[u.User] = u.TTLMs
		}
		return out
	}
	out := map[string]map[string]int64{}
	if len(snap.Users) > 0 {
		out[""] = of(snap.Users)
	}
	for _, th := range snap.Threads {
		out[th.Thread] = of(th.Users)
	}
	return out
}

func (se *storeEnv) wantTTLs(what, room string, limit int, want map[string]map[string]int64) {
	se.t.Helper()
	got := se.ttls(room, limit)
	if !maps.EqualFunc(got, want, maps.Equal) {
		se.t.Fatalf("%s: snapshot ttl_ms %v, want %v", what, got, want)
	}
}

// A service's start with its own ttl_ms lists its typist with that ttl,
// in the room and in a thread, also in a snapshot cut at the cap; a
// client's start (the standard ttl) and a service's ttl_ms equal to the
// standard ttl list none. A standard start of another connection of the
// user leaves it while the long entry outlives it; the platform's stop
// clears it, so the user's next standard start lists none.
func TestContractSnapshotServiceTTL(t *testing.T) {
	forEachKind(t, func(t *testing.T, se *storeEnv) {
		long := (3 * stTTL).Milliseconds()
		for _, th := range []string{"", "th"} {
			c := tstart("r", th, "agent", "svc", 0)
			c.Activity, c.TTLMs = "thinking", long
			se.want(c, OutcomeStarted)
			se.want(tstart("r", th, "human", "h", 1+uint64(len(th))), OutcomeStarted)
			c = tstart("r", th, "same", "svc2", 0)
			c.TTLMs = stTTL.Milliseconds()
			se.want(c, OutcomeStarted)
		}
		scope := map[string]int64{"agent": long, "human": 0, "same": 0}
		se.wantTTLs("after the starts", "r", MaxSnapshotLimit, map[string]map[string]int64{"": scope, "th": scope})
		// Cut at one typist per part: the agent is both the latest to
		// expire (zset) and the first by user (keys).
		one := map[string]int64{"agent": long}
		se.wantTTLs("cut at 1", "r", 1, map[string]map[string]int64{"": one, "th": one})

		se.want(tstart("r", "", "agent", "phone", 1), OutcomeRefreshed, OutcomeThrottled)
		se.wantTTLs("after a standard start of the agent's phone", "r", MaxSnapshotLimit, map[string]map[string]int64{"": scope, "th": scope})

		// The reply is posted in the room: the agent's typing there ends,
		// and its next standard start carries the standard ttl.
		se.want(tstop("r", "", "agent", "", 0), OutcomeStopped)
		se.advance(2 * se.throttle) // the event rate limit allows the start
		se.want(tstart("r", "", "agent", "phone", 2), OutcomeStarted)
		se.wantTTLs("after the platform's stop and a standard start", "r", MaxSnapshotLimit,
			map[string]map[string]int64{"": {"agent": 0, "human": 0, "same": 0}, "th": scope})
	})
}

// A service's ttl below the standard one is carried too, also for a typist
// whose users-set score lags their entries (a throttled refresh, read
// from the whole user hash: scripts/snapshot.lua's second pass and store
// keys's unsure typists).
func TestContractSnapshotServiceTTLLagging(t *testing.T) {
	forEachKindTiming(t, lagTTL, lagThrottle, func(t *testing.T, se *storeEnv) {
		short := (3 * lagTTL / 4).Milliseconds() // index lag min(1 s, short/4) = 750 ms
		c := tstart("r", "", "agent", "a", 0)
		c.TTLMs = short
		se.want(c, OutcomeStarted)
		first := se.redisNowMs() + short // at or after the first entry's expiry
		se.advance(600 * time.Millisecond)
		c.Conn = "b"
		se.want(c, OutcomeThrottled)
		// Past the first entry's expiry (the score), before the second's.
		se.advance(time.Duration(first-se.redisNowMs()+100) * time.Millisecond)
		se.wantTTLs("with a lagging score", "r", MaxSnapshotLimit, map[string]map[string]int64{"": {"agent": short}})
	})
}
