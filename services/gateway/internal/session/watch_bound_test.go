package session

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
)

// A reader that stopped reading and keeps sending watch frames (of rooms
// it watches already: free) while its rooms change holds at most one
// summary per watched room (docs/protocol.md, "Order and loss": "at most
// ELLIPSIS_MAX_WATCHED_ROOMS of them wait per connection"), not one per
// room and watch frame; each room's latest summary is the one queued.
func TestWatchFramesKeepOneSummaryPerRoom(t *testing.T) {
	const n = 20
	cfg := testConfig(2, 1000)
	cfg.MaxWatched = n
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rooms := &watchRooms{fail: map[string]bool{}, block: map[string]bool{}, watched: map[string]bool{}}
	budgets := testBudgets(t, BudgetConfig{FreeJoins: 2, SnapshotRate: 10, SnapshotBurst: 20, Users: 10, Watches: n})
	c := New(nil, "gw:1", auth.Identity{User: "alice", ShareTyping: true}, cfg,
		Deps{Hub: rooms, Backend: fakeBackend{}, Authorizer: denyNoRooms{}, Metrics: met, Logger: zap.NewNop(), Budgets: budgets})
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("%q", fmt.Sprint("r", i)))
	}
	watch := []byte(`{"type":"watch","rooms":[` + strings.Join(ids, ",") + `]}`)
	c.handle(true, watch)
	const rounds = 50
	var _ hub.Watcher = c
	for k := range rounds {
		for i := range n {
			c.SendSummary(fmt.Sprint("r", i), []byte(fmt.Sprintf("s r%d %d", i, k)))
		}
		c.handle(true, watch) // accepted again at no cost
	}
	summaries := map[string]string{}
	count := 0
	for _, f := range c.drainQueued() {
		if strings.HasPrefix(f, "s ") {
			count++
			fs := strings.Fields(f)
			summaries[fs[1]] = fs[2]
		}
	}
	if count > n {
		t.Errorf("%d summaries queued for %d watched rooms after %d watch frames", count, n, rounds)
	}
	for i := range n {
		if got := summaries[fmt.Sprint("r", i)]; got != fmt.Sprint(rounds-1) {
			t.Errorf("room r%d: last summary queued %q, want %d", i, got, rounds-1)
		}
	}
}
