package gateway

import (
	"testing"
	"time"
)

// The per-user HTTP snapshot budget: a user over its burst is refused
// with the time to its next token; at most size users are tracked, the
// least recently asking one is forgotten first.
func TestUserBudgets(t *testing.T) {
	b := newUserBudgets(2, 3, 2) // 2/s, burst 3, two users
	now := time.Now()
	for i := range 3 {
		if ok, _ := b.take("alice", now); !ok {
			t.Fatalf("alice's snapshot %d within the burst was refused", i)
		}
	}
	ok, retry := b.take("alice", now)
	if ok || retry <= 0 || retry > 500*time.Millisecond {
		t.Fatalf("alice past the burst: ok %v, retry %v (want refused, 0 < retry <= 500ms at 2/s)", ok, retry)
	}
	if ok, _ := b.take("alice", now.Add(retry)); !ok {
		t.Fatalf("alice refused after waiting the retry %v", retry)
	}
	if ok, _ := b.take("bob", now); !ok {
		t.Fatal("bob's first snapshot refused: budgets are not per user")
	}
	// alice asks again (refused, but it counts as use), so bob is the
	// least recent asker when carol comes: bob is the one forgotten.
	b.take("alice", now.Add(retry))
	b.take("carol", now)
	if n := b.len(); n != 2 {
		t.Fatalf("%d users tracked, want 2 (the bound)", n)
	}
	if ok, _ := b.take("alice", now.Add(retry)); ok {
		t.Fatal("alice, the most recent asker, was evicted instead of bob")
	}
	for i := range 3 {
		if ok, _ := b.take("bob", now); !ok {
			t.Fatalf("evicted bob's snapshot %d refused: want a full burst again", i)
		}
	}
}
