package session

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// watchRooms is a fake hub for watch frames: rooms in fail fail to
// subscribe, rooms in block wait for ctx; watched records the watches.
type watchRooms struct {
	fakeRooms
	mu      sync.Mutex
	fail    map[string]bool
	block   map[string]bool
	watched map[string]bool
	armed   []string
}

func (r *watchRooms) Watch(ctx context.Context, room string, _ hub.Watcher, _ *filter.View) error {
	r.mu.Lock()
	fail, block := r.fail[room], r.block[room]
	r.mu.Unlock()
	if block {
		<-ctx.Done()
		return fmt.Errorf("%w: %v", hub.ErrUnavailable, ctx.Err())
	}
	if fail {
		return hub.ErrUnavailable
	}
	r.mu.Lock()
	r.watched[room] = true
	r.mu.Unlock()
	return nil
}

func (r *watchRooms) Arm(_ hub.Watcher, rooms ...string) {
	r.mu.Lock()
	r.armed = append(r.armed, rooms...)
	r.mu.Unlock()
}

func (r *watchRooms) Unwatch(_ hub.Watcher, rooms ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, room := range rooms {
		if r.watched[room] {
			delete(r.watched, room)
			n++
		}
	}
	return n
}

// armedList is the rooms armed so far, joined by commas.
func (r *watchRooms) armedList() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.armed, ",")
}

func (r *watchRooms) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.watched)
}

// denyNoRooms forbids the rooms starting with "no".
type denyNoRooms struct{}

func (denyNoRooms) Authorize(_ context.Context, _ auth.Identity, room string) (authz.Grant, error) {
	if strings.HasPrefix(room, "no") {
		return authz.Grant{}, authz.ErrForbidden
	}
	return authz.Grant{}, nil
}

// watchConn serves a Conn of alice over a fake transport with MaxWatched
// maxWatched (its watch budget too) and a snapshot timeout of 300 ms.
func watchConn(t *testing.T, maxWatched int, budgets *Budgets) (*Conn, *fakeTransport, *watchRooms) {
	t.Helper()
	cfg := testConfig(2, 1000)
	cfg.MaxWatched = maxWatched
	cfg.SnapshotTimeout = 300 * time.Millisecond
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if budgets == nil {
		budgets = testBudgets(t, BudgetConfig{FreeJoins: 2, SnapshotRate: 10, SnapshotBurst: 20, Users: 10, Watches: maxWatched})
	}
	rooms := &watchRooms{fail: map[string]bool{}, block: map[string]bool{}, watched: map[string]bool{}}
	tr := newFakeTransport()
	c := New(tr, "gw:1", auth.Identity{User: "alice", ShareTyping: true}, cfg,
		Deps{Hub: rooms, Backend: fakeBackend{}, Authorizer: denyNoRooms{}, Metrics: met, Logger: zap.NewNop(), Budgets: budgets})
	done := make(chan struct{})
	go func() {
		c.Serve()
		close(done)
	}()
	t.Cleanup(func() {
		c.Close(CloseGoingAway, "test over")
		_ = tr.Close()
		<-done
	})
	return c, tr, rooms
}

// answer reads the next text frame into a ServerFrame.
func answer(t *testing.T, tr *fakeTransport) protocol.ServerFrame {
	t.Helper()
	f := tr.nextNot(t, fPing)
	var sf protocol.ServerFrame
	if f.kind != fText || json.Unmarshal([]byte(f.data), &sf) != nil {
		t.Fatalf("wrote %v", f)
	}
	return sf
}

func refusals(sf protocol.ServerFrame) string {
	var out []string
	for _, r := range sf.Refused {
		out = append(out, r.Room+":"+r.Code)
	}
	return strings.Join(out, ",")
}

func TestWatchAnswersEveryRefusal(t *testing.T) {
	_, tr, rooms := watchConn(t, 4, nil)
	rooms.fail["down"] = true
	tr.send(fText, `{"type":"watch","rooms":["a","","no-1","a","down","b","c","d","e"],"id":"w1"}`)
	sf := answer(t, tr)
	if sf.Type != protocol.TypeWatching || sf.ID != "w1" || strings.Join(sf.Rooms, ",") != "a,b" || sf.Watched != 2 {
		t.Fatalf("watching %+v", sf)
	}
	// a, no-1, down and b take the 4 places while in flight (as joins in
	// flight do), so c, d and e find none left.
	if got := refusals(sf); got != ":bad_request,no-1:forbidden,down:unavailable,c:watch_limit,d:watch_limit,e:watch_limit" {
		t.Fatalf("refused %s", got)
	}
	for _, r := range sf.Refused {
		if r.Message == "" {
			t.Fatalf("refusal without message: %+v", sf.Refused)
		}
	}
	// Arm follows the queued answer: wait for it.
	testkit.WaitFor(t, 5*time.Second, "the watched rooms to be armed", func() bool { return rooms.armedList() == "a,b" })
	if rooms.count() != 2 {
		t.Fatalf("hub: %d watched, armed %v", rooms.count(), rooms.armedList())
	}
	// Already watched rooms are accepted again at no cost.
	tr.send(fText, `{"type":"watch","rooms":["a","b"],"id":"w2"}`)
	if sf := answer(t, tr); strings.Join(sf.Rooms, ",") != "a,b" || len(sf.Refused) != 0 || sf.Watched != 2 {
		t.Fatalf("watching again %+v", sf)
	}
	tr.send(fText, `{"type":"unwatch","rooms":["a","zz","a"],"id":"u1"}`)
	if sf := answer(t, tr); sf.Type != protocol.TypeUnwatched || strings.Join(sf.Rooms, ",") != "a,zz" || sf.Watched != 1 || sf.ID != "u1" {
		t.Fatalf("unwatched %+v", sf)
	}
	tr.send(fText, `{"type":"unwatch"}`)
	if sf := answer(t, tr); strings.Join(sf.Rooms, ",") != "b" || sf.Watched != 0 {
		t.Fatalf("unwatch all %+v", sf)
	}
	if rooms.count() != 0 {
		t.Fatalf("hub still has %d watches", rooms.count())
	}
	tr.send(fText, `{"type":"watch","rooms":[],"id":"w3"}`)
	if sf := answer(t, tr); sf.Type != protocol.TypeError || sf.Code != protocol.CodeBadRequest || !strings.HasPrefix(sf.Message, "rooms: ") || sf.ID != "w3" {
		t.Fatalf("empty watch %+v", sf)
	}
}

// The watch budget: MaxWatched new rooms a minute per user, shared by the
// user's connections; a room refused unavailable gives its token back.
func TestWatchBudget(t *testing.T) {
	budgets := testBudgets(t, BudgetConfig{FreeJoins: 2, SnapshotRate: 10, SnapshotBurst: 20, Users: 10, Watches: 3})
	_, tr, rooms := watchConn(t, 3, budgets)
	_, tr2, _ := watchConn(t, 3, budgets) // alice's second connection
	rooms.fail["down"] = true
	tr.send(fText, `{"type":"watch","rooms":["down","a","b"]}`)
	if sf := answer(t, tr); strings.Join(sf.Rooms, ",") != "a,b" || refusals(sf) != "down:unavailable" {
		t.Fatalf("watching %+v", sf)
	}
	tr.send(fText, `{"type":"unwatch"}`)
	answer(t, tr)
	tr2.send(fText, `{"type":"watch","rooms":["c","d"]}`)
	sf := answer(t, tr2)
	if strings.Join(sf.Rooms, ",") != "c" || refusals(sf) != "d:rate_limited" || !strings.Contains(sf.Refused[0].Message, "retry in") {
		t.Fatalf("second connection %+v", sf)
	}
}

// A watch is served on the reader: nothing more is read until it is
// answered, within SnapshotTimeout (a room not confirmed by then is
// refused unavailable).
func TestWatchPausesTheReaderAndIsAnsweredInTime(t *testing.T) {
	_, tr, rooms := watchConn(t, 10, nil)
	rooms.block["slow"] = true
	start := time.Now()
	tr.send(fText, `{"type":"watch","rooms":["slow","fast"],"id":"w"}`)
	tr.send(fText, `{"type":"ping","id":"p"}`)
	sf := answer(t, tr)
	if sf.Type != protocol.TypeWatching || refusals(sf) != "slow:unavailable" || strings.Join(sf.Rooms, ",") != "fast" {
		t.Fatalf("first answer %+v, want watching", sf)
	}
	if !strings.Contains(sf.Refused[0].Message, "ELLIPSIS_SNAPSHOT_TIMEOUT") {
		t.Fatalf("timeout refusal %q", sf.Refused[0].Message)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("answered after %s, before the snapshot timeout", d)
	}
	if sf := answer(t, tr); sf.Type != protocol.TypePong {
		t.Fatalf("second answer %+v, want the pong", sf)
	}
}

// A connection closing unwatches every room.
func TestWatchCleanupAtClose(t *testing.T) {
	c, tr, rooms := watchConn(t, 10, nil)
	tr.send(fText, `{"type":"watch","rooms":["a","b"]}`)
	answer(t, tr)
	c.Close(CloseNormal, "bye")
	testkit.WaitFor(t, 10*time.Second, "watches ended", func() bool { return rooms.count() == 0 })
}

// With ELLIPSIS_MAX_WATCHED_ROOMS=0 every room is refused watch_limit.
func TestWatchOff(t *testing.T) {
	_, tr, _ := watchConn(t, 0, nil)
	tr.send(fText, `{"type":"watch","rooms":["a"]}`)
	if sf := answer(t, tr); refusals(sf) != "a:watch_limit" || !strings.Contains(sf.Refused[0].Message, "ELLIPSIS_MAX_WATCHED_ROOMS=0") {
		t.Fatalf("watching %+v", sf)
	}
}

// A slow reader's summaries conflate: while a write is stalled, the
// latest summary of each room replaces its unwritten one.
func TestSlowReaderSummariesConflate(t *testing.T) {
	c, tr, _ := watchConn(t, 10, nil)
	tr.stall.Store(true)
	c.SendSummary("r", []byte(`s0`))
	testkit.WaitFor(t, 10*time.Second, "s0 in flight", func() bool { return c.w.queued() == 0 })
	for i := 1; i <= 50; i++ {
		c.SendSummary("r", []byte(fmt.Sprintf("r%d", i)))
		c.SendSummary("q", []byte(fmt.Sprintf("q%d", i)))
	}
	if n := c.w.queued(); n != 2 {
		t.Fatalf("%d frames queued for 2 rooms", n)
	}
	tr.resume()
	var got []string
	for range 3 {
		got = append(got, tr.nextNot(t, fPing).data)
	}
	if strings.Join(got, " ") != "s0 r50 q50" {
		t.Fatalf("wrote %q, want s0 r50 q50", got)
	}
}
