package session

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// denyRooms forbids the rooms it lists and allows the others.
type denyRooms map[string]bool

func (d denyRooms) Authorize(_ context.Context, _ auth.Identity, room string) (authz.Grant, error) {
	if d[room] {
		return authz.Grant{}, authz.ErrForbidden
	}
	return authz.Grant{}, nil
}

// The connections of a user share its budget: the free joins the first
// spent are not the second's to spend again, and the second's paying join
// takes the token the first did not.
func TestConnectionsOfAUserShareTheBudget(t *testing.T) {
	rooms := &fakeRooms{}
	budgets := slowBudgets(t, 1) // 2 free joins, 1 snapshot
	first := newBudgetedConn(t, rooms, fakeBackend{}, budgets)
	second := newBudgetedConn(t, rooms, fakeBackend{}, budgets)
	first.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "a", ID: "1"})
	first.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "b", ID: "2"})
	second.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "a", ID: "3"}) // pays the one token
	if !first.isJoined("a") || !first.isJoined("b") || !second.isJoined("a") {
		t.Fatal("joins within the user's free joins and burst were refused")
	}
	second.drainQueued()
	second.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "b", ID: "4"})
	wantRateLimited(t, second, "b", "4")
	first.drainQueued()
	first.sync(protocol.ClientFrame{Type: protocol.TypeSync, Room: "a", ID: "5"})
	wantRateLimited(t, first, "a", "5")
	if open, _ := budgets.users(); open != 1 {
		t.Fatalf("%d users with open connections, want 1 (alice)", open)
	}
}

// A join that does not commit gives its free join back: answered
// unavailable by the hub (an outage: the client retries, as
// docs/protocol.md says), the user still joins its MaxRooms rooms for free
// afterwards, and its snapshot token is left for a sync.
func TestFailedJoinGivesItsFreeJoinBack(t *testing.T) {
	rooms := &fakeRooms{err: fmt.Errorf("%w: no worker answered", hub.ErrSnapshot)}
	budgets := slowBudgets(t, 1)
	c := newBudgetedConn(t, rooms, fakeBackend{}, budgets)
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "a", ID: "1"})
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "b", ID: "2"})
	rooms.err = nil
	if c.isJoined("a") || c.isJoined("b") {
		t.Fatal("a failed join joined its room")
	}
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "a", ID: "4"})
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "b", ID: "5"})
	c.sync(protocol.ClientFrame{Type: protocol.TypeSync, Room: "a", ID: "6"})
	if !c.isJoined("a") || !c.isJoined("b") {
		t.Fatal("joins after failed ones were refused")
	}
	c.drainQueued()
	c.sync(protocol.ClientFrame{Type: protocol.TypeSync, Room: "b", ID: "7"})
	wantRateLimited(t, c, "b", "7") // the sync before took the token: the joins were free
	c.budget.mu.Lock()
	pending := c.budget.free.held
	c.budget.mu.Unlock()
	if pending != 0 {
		t.Fatalf("%d free joins held after every join ended, want 0", pending)
	}
}

// The free joins are a bucket of FreeJoins refilled FreeJoins a minute.
func TestFreeJoinsRefill(t *testing.T) {
	u := newUserBudget("alice", BudgetConfig{FreeJoins: 2, SnapshotRate: 1, SnapshotBurst: 1, Users: 1})
	t0 := time.Now()
	for i := range 2 {
		if !u.holdFree(t0) {
			t.Fatalf("free join %d of 2 refused", i)
		}
		u.spendFree(t0)
	}
	if u.holdFree(t0) {
		t.Fatal("a third free join at once")
	}
	if u.holdFree(t0.Add(FreeJoinRefill / 2).Add(-time.Millisecond)) {
		t.Fatal("a free join before FreeJoins/minute refilled one")
	}
	if !u.holdFree(t0.Add(FreeJoinRefill / 2)) {
		t.Fatal("no free join half a minute later (2 a minute)")
	}
	if u.holdFree(t0.Add(FreeJoinRefill / 2)) {
		t.Fatal("the held free join was handed out twice")
	}
}

// A user with an open connection keeps its budget however many users come
// and go; the idle LRU forgets the user idle longest, and a user released
// with full buckets is not kept at all.
func TestBudgetsForgetOnlyIdleUsers(t *testing.T) {
	b := testBudgets(t, BudgetConfig{FreeJoins: 1, SnapshotRate: 1e-6, SnapshotBurst: 1, Users: 1})
	spent := func(user string) *userBudget {
		u := b.acquire(user)
		if !u.snaps.Allow() {
			t.Fatalf("%s: first snapshot refused", user)
		}
		return u
	}
	alice := spent("alice")
	b.release(spent("bob"))
	b.release(spent("carol")) // evicts bob, the only idle one
	if again := b.acquire("alice"); again != alice {
		t.Fatal("alice, with an open connection, was given a new budget")
	}
	b.release(alice)
	if open, idle := b.users(); open != 1 || idle != 1 {
		t.Fatalf("open %d, idle %d; want alice open, carol idle", open, idle)
	}
	b.release(b.acquire("dave")) // full buckets: forgotten at once, carol stays
	if u := b.acquire("carol"); u.snaps.Allow() {
		t.Fatal("carol's spent bucket was forgotten by a user that kept nothing")
	} else {
		b.release(u)
	}
	if u := b.acquire("bob"); !u.snaps.Allow() {
		t.Fatal("bob, evicted, should start from a full bucket")
	}
	b.release(alice) // the last connection: alice moves to the idle LRU
	if u := b.acquire("alice"); u != alice {
		t.Fatal("alice, idle most recently, was forgotten")
	}
}

// A user's connections hold, spend and return free joins on their own
// goroutines (run with -race): no more are spent than the bucket holds,
// and none stays held.
func TestFreeJoinsConcurrent(t *testing.T) {
	const freeJoins, conns, tries = 5, 8, 200
	b := testBudgets(t, BudgetConfig{FreeJoins: freeJoins, SnapshotRate: 1, SnapshotBurst: 1, Users: 1})
	var spent atomic.Int64
	var wg sync.WaitGroup
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := b.acquire("alice")
			defer b.release(u)
			now := time.Now() // the refill within one instant: none
			for i := range tries {
				if !u.holdFree(now) {
					continue
				}
				if (g+i)%2 == 0 {
					u.returnFree()
				} else {
					u.spendFree(now)
					spent.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	u := b.acquire("alice")
	defer b.release(u)
	if n := spent.Load(); n < 1 || n > freeJoins {
		t.Fatalf("%d free joins spent, want 1..%d", n, freeJoins)
	}
	if u.free.held != 0 {
		t.Fatalf("%d free joins still held", u.free.held)
	}
}

// NewBudgets refuses a field below 1, naming it.
func TestNewBudgetsValidates(t *testing.T) {
	_, err := NewBudgets(BudgetConfig{FreeJoins: 0, SnapshotRate: 0, SnapshotBurst: 1, Users: 0})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"FreeJoins must be positive", "SnapshotRate must be positive", "Users must be positive"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// A join the authoriser denied asked it, so it spends its free join like
// a joined room: a loop of joins of forbidden rooms pays the snapshot
// budget once the free joins are spent, instead of asking the authoriser
// at the inbound rate.
func TestForbiddenJoinSpendsItsFreeJoin(t *testing.T) {
	rooms := &fakeRooms{}
	budgets := slowBudgets(t, 1) // 2 free joins, 1 snapshot
	c := newBudgetedConn(t, rooms, fakeBackend{}, budgets)
	c.deps.Authorizer = denyRooms{"x": true, "y": true, "z": true}
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "x", ID: "1"})
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "y", ID: "2"})
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "z", ID: "3"}) // pays the one token
	c.drainQueued()
	c.join(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "a", ID: "4"})
	wantRateLimited(t, c, "a", "4")
	c.budget.mu.Lock()
	pending := c.budget.free.held
	c.budget.mu.Unlock()
	if pending != 0 {
		t.Fatalf("%d free joins held after every join ended, want 0", pending)
	}
}
