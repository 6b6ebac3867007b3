package authz

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
)

func TestMatchRooms(t *testing.T) {
	patterns := []string{"42", "team-7/*", "a*b", "{x}"}
	for room, want := range map[string]bool{
		"42": true, "421": false, "4": false,
		"team-7/": true, "team-7/general": true, "team-7": false, "team-8/x": false,
		"a*b": true, "aXb": false, "a*bc": false, // '*' inside a pattern is literal
		"{x}": true, "x": false,
	} {
		if got := MatchRooms(patterns, room); got != want {
			t.Errorf("MatchRooms(%q) = %v, want %v", room, got, want)
		}
	}
	if !MatchRooms([]string{"*"}, "anything") || MatchRooms(nil, "42") || MatchRooms([]string{}, "42") {
		t.Error("* or empty claims")
	}
	ctx := context.Background()
	if _, err := (Claims{}).Authorize(ctx, auth.Identity{User: "u", Rooms: []string{"r*"}}, "room"); err != nil {
		t.Errorf("claims allow: %v", err)
	}
	if _, err := (Claims{}).Authorize(ctx, auth.Identity{User: "u"}, "room"); !errors.Is(err, ErrForbidden) {
		t.Errorf("no claim: %v", err)
	}
}

type fakeRequester struct {
	calls atomic.Int32
	reply func(data []byte) ([]byte, error)
}

func (f *fakeRequester) Request(ctx context.Context, _ string, data []byte) ([]byte, error) {
	f.calls.Add(1)
	return f.reply(data)
}

func TestNATSFailsClosed(t *testing.T) {
	ctx := context.Background()
	id := auth.Identity{User: "alice"}
	for name, tc := range map[string]struct {
		reply   []byte
		err     error
		allowed bool
	}{
		"allow":      {[]byte(`{"allow":true}`), nil, true},
		"deny":       {[]byte(`{"allow":false}`), nil, false},
		"garbage":    {[]byte(`nope`), nil, false},
		"bad list":   {[]byte(`{"allow":true,"hide_typing_from":"bob"}`), nil, false},
		"empty":      {[]byte(`{}`), nil, false},
		"allow text": {[]byte(`{"allow":"true"}`), nil, false},
		"no answer":  {nil, errors.New("timeout"), false},
	} {
		f := &fakeRequester{reply: func([]byte) ([]byte, error) { return tc.reply, tc.err }}
		_, err := (&NATS{Requester: f, Subject: "s"}).Authorize(ctx, id, "42")
		if (err == nil) != tc.allowed || (err != nil && !errors.Is(err, ErrForbidden)) {
			t.Errorf("%s: %v", name, err)
		}
		if name == "no answer" && !errors.Is(err, ErrNoAnswer) {
			t.Errorf("no answer: %v does not wrap ErrNoAnswer", err)
		}
	}
	// The timeout bounds the request.
	slow := &fakeRequester{}
	n := &NATS{Requester: requesterFunc(func(ctx context.Context) ([]byte, error) {
		slow.calls.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}), Subject: "s", Timeout: 50 * time.Millisecond}
	start := time.Now()
	if _, err := n.Authorize(ctx, id, "42"); !errors.Is(err, ErrNoAnswer) || time.Since(start) > time.Second {
		t.Errorf("slow hook: %v after %s", err, time.Since(start))
	}
}

type requesterFunc func(ctx context.Context) ([]byte, error)

func (f requesterFunc) Request(ctx context.Context, _ string, _ []byte) ([]byte, error) {
	return f(ctx)
}

func TestCache(t *testing.T) {
	now := time.Now()
	answer := map[string]error{"open": nil, "closed": ErrForbidden, "silent": fmt.Errorf("%w: %w", ErrForbidden, ErrNoAnswer), "broken": errors.New("down")}
	var calls atomic.Int32
	next := authorizerFunc(func(room string) error { calls.Add(1); return answer[room] })
	c := &Cache{Next: next, AllowTTL: 30 * time.Second, DenyTTL: 2 * time.Second, Now: func() time.Time { return now }}
	ctx := context.Background()
	alice := auth.Identity{User: "alice"}
	ask := func(id auth.Identity, room string) error { _, err := c.Authorize(ctx, id, room); return err }

	for i := 0; i < 3; i++ {
		if err := ask(alice, "open"); err != nil {
			t.Fatal(err)
		}
		if err := ask(alice, "closed"); !errors.Is(err, ErrForbidden) {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d requests, want 2 (answers cached)", n)
	}
	// The key is (user, room): bob is asked for.
	_ = ask(auth.Identity{User: "bob"}, "open")
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
	// No answer and errors are never cached.
	for i := 0; i < 2; i++ {
		if err := ask(alice, "silent"); !errors.Is(err, ErrNoAnswer) {
			t.Fatal(err)
		}
		if err := ask(alice, "broken"); err == nil || errors.Is(err, ErrForbidden) {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 7 {
		t.Fatalf("%d requests, want 7 (failures not cached)", n)
	}
	// Denials expire after DenyTTL, allows after AllowTTL.
	answer["closed"] = nil
	now = now.Add(2 * time.Second)
	if err := ask(alice, "closed"); err != nil {
		t.Fatalf("denial outlived DenyTTL: %v", err)
	}
	answer["open"] = ErrForbidden
	now = now.Add(27 * time.Second)
	if err := ask(alice, "open"); err != nil {
		t.Fatalf("allow expired early: %v", err)
	}
	now = now.Add(time.Second)
	if err := ask(alice, "open"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("allow outlived AllowTTL: %v", err)
	}
}

func TestCacheIsBounded(t *testing.T) {
	c := &Cache{Next: authorizerFunc(func(string) error { return nil }), AllowTTL: time.Hour, MaxEntries: 100}
	for i := 0; i < 1000; i++ {
		_, _ = c.Authorize(context.Background(), auth.Identity{User: "u"}, fmt.Sprint("room-", i))
	}
	if n := c.Len(); n > 100 {
		t.Fatalf("cache holds %d entries, max 100", n)
	}
	// TTL 0 caches nothing.
	off := &Cache{Next: authorizerFunc(func(string) error { return ErrForbidden })}
	_, _ = off.Authorize(context.Background(), auth.Identity{User: "u"}, "r")
	if off.Len() != 0 {
		t.Fatal("zero TTLs cached")
	}
}

type authorizerFunc func(room string) error

func (f authorizerFunc) Authorize(_ context.Context, _ auth.Identity, room string) (Grant, error) {
	return Grant{}, f(room)
}

// The hook's hide_typing_from comes back in the grant; an allow with an
// invalid list is denied (fail closed) as a bad reply, and cached as a
// denial like any other reply but an allow.
func TestNATSHideTypingFrom(t *testing.T) {
	ctx := context.Background()
	id := auth.Identity{User: "alice"}
	ask := func(reply string) (Grant, error) {
		f := &fakeRequester{reply: func([]byte) ([]byte, error) { return []byte(reply), nil }}
		return (&NATS{Requester: f, Subject: "s"}).Authorize(ctx, id, "42")
	}
	g, err := ask(`{"allow":true,"hide_typing_from":["bob","carol"]}`)
	if err != nil || g.HideTypingFrom.Len() != 2 || !g.HideTypingFrom.Has("bob") {
		t.Fatalf("%+v %v", g, err)
	}
	if g, err := ask(`{"allow":true,"hide_typing_from":null}`); err != nil || g.HideTypingFrom.Len() != 0 {
		t.Fatalf("null list: %+v %v", g, err)
	}
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprintf("%q", fmt.Sprint("u", i))
	}
	for reply, want := range map[string]string{
		`{"allow":true,"hide_typing_from":"bob"}`:                             "hide_typing_from: must be an array of user ids",
		`{"allow":true,"hide_typing_from":["bob",""]}`:                        "hide_typing_from[1]: is required",
		`{"allow":true,"hide_typing_from":[` + strings.Join(many, ",") + `]}`: "hide_typing_from: at most 1000 user ids, got 1001",
		`{"allow":1}`: "not a JSON object with a boolean allow",
		`[true]`:      "not a JSON object with a boolean allow",
	} {
		_, err := ask(reply)
		if !errors.Is(err, ErrForbidden) || !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), want) {
			t.Errorf("%.50s: %v, want a bad reply naming %q", reply, err, want)
		}
	}
	// A denial's list is not read: a plain denial.
	if _, err := ask(`{"allow":false,"hide_typing_from":7}`); !errors.Is(err, ErrForbidden) || errors.Is(err, ErrBadReply) {
		t.Errorf("deny with a bad list: %v", err)
	}
}

// A cached allow keeps its grant; the cache bounds the hidden ids it holds.
func TestCacheKeepsGrants(t *testing.T) {
	lists := map[string][]string{"r1": {"bob"}, "big": make([]string, 30)}
	for i := range lists["big"] {
		lists["big"][i] = fmt.Sprint("u", i)
	}
	var calls atomic.Int32
	next := grantFunc(func(room string) Grant {
		calls.Add(1)
		if l, ok := lists[room]; ok {
			return Grant{HideTypingFrom: filter.NewSet(l)}
		}
		return Grant{HideTypingFrom: filter.NewSet([]string{"x", "y"})}
	})
	c := &Cache{Next: next, AllowTTL: time.Hour, MaxHiddenIDs: 20}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		g, err := c.Authorize(ctx, auth.Identity{User: "alice"}, "r1")
		if err != nil || !g.HideTypingFrom.Has("bob") {
			t.Fatalf("%+v %v", g, err)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("%d requests, want 1 (the grant cached)", calls.Load())
	}
	// A grant over the bound alone is not cached.
	_, _ = c.Authorize(ctx, auth.Identity{User: "alice"}, "big")
	_, _ = c.Authorize(ctx, auth.Identity{User: "alice"}, "big")
	if calls.Load() != 3 {
		t.Fatalf("%d requests, want 3 (a grant of 30 ids over 20 is not cached)", calls.Load())
	}
	for i := 0; i < 50; i++ {
		_, _ = c.Authorize(ctx, auth.Identity{User: "alice"}, fmt.Sprint("room-", i))
		if n := c.HiddenIDs(); n > 20 {
			t.Fatalf("cache holds %d hidden ids, max 20", n)
		}
	}
}

type grantFunc func(room string) Grant

func (f grantFunc) Authorize(_ context.Context, _ auth.Identity, room string) (Grant, error) {
	return f(room), nil
}
