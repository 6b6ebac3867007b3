package joinauthz_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ellipsis-chat/ellipsis/examples/go/internal/stacktest"
	"github.com/ellipsis-chat/ellipsis/examples/go/joinauthz"
)

// TestGatewayAsksTheAuthoriser: with ELLIPSIS_AUTHZ=nats the gateway lets
// alice into the room the policy allows and refuses the other.
func TestGatewayAsksTheAuthoriser(t *testing.T) {
	st := stacktest.Start(t, map[string]string{"ELLIPSIS_AUTHZ": "nats"})
	var mu sync.Mutex
	var asked []string
	sub, err := joinauthz.Serve(st.NC, st.Prefix, func(user, room string) joinauthz.Decision {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, user+"/"+room)
		if user == "alice" && room == "team:42" {
			return joinauthz.Allow()
		}
		return joinauthz.Deny
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := st.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	alice := st.Dial(t, "alice")
	if f := alice.Join("team:42"); f["type"] != "joined" {
		t.Fatalf("allowed room: %v", f)
	}
	if f := alice.Join("team:7"); f["type"] != "error" || f["code"] != "forbidden" {
		t.Fatalf("denied room: %v, want error forbidden", f)
	}
	bob := st.Dial(t, "bob")
	if f := bob.Join("team:42"); f["type"] != "error" || f["code"] != "forbidden" {
		t.Fatalf("bob: %v, want error forbidden", f)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 3 {
		t.Fatalf("policy asked %v, want 3 questions", asked)
	}
}

// TestMalformedRequestsAreDenied: the authoriser answers garbage with a
// denial without asking its policy.
func TestMalformedRequestsAreDenied(t *testing.T) {
	st := stacktest.Start(t, nil)
	sub, err := joinauthz.Serve(st.NC, st.Prefix, func(user, room string) joinauthz.Decision { return joinauthz.Allow() })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for _, req := range []string{`nope`, `{"v":2,"user":"a","room":"r"}`, `{"v":1,"user":"","room":"r"}`, `{"v":1,"user":"a"}`, `{"v":1,"user":"a","room":"r"}`} {
		msg, err := st.NC.Request(sub.Subject, []byte(req), stacktest.Wait)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"allow":false}`
		if req == `{"v":1,"user":"a","room":"r"}` {
			want = `{"allow":true}`
		}
		if string(msg.Data) != want {
			t.Errorf("%s: reply %s, want %s", req, msg.Data, want)
		}
	}
}

// TestReplyCarriesTheHideList: an allow carries the policy's list as
// hide_typing_from; a list the gateway would refuse makes the answer a
// denial.
func TestReplyCarriesTheHideList(t *testing.T) {
	st := stacktest.Start(t, nil)
	lists := map[string][]string{
		"r":       {"bob", "carol"},
		"empty":   {},
		"long":    make([]string, 1001),
		"bad-id":  {"bob", ""},
		"control": {"b\x00b"},
	}
	for i := range lists["long"] {
		lists["long"][i] = "u"
	}
	sub, err := joinauthz.Serve(st.NC, st.Prefix, func(user, room string) joinauthz.Decision {
		return joinauthz.Allow(lists[room]...)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for room, want := range map[string]string{
		"r":       `{"allow":true,"hide_typing_from":["bob","carol"]}`,
		"empty":   `{"allow":true}`,
		"long":    `{"allow":false}`,
		"bad-id":  `{"allow":false}`,
		"control": `{"allow":false}`,
	} {
		req, _ := json.Marshal(joinauthz.Request{V: 1, User: "alice", Room: room})
		msg, err := st.NC.Request(sub.Subject, req, stacktest.Wait)
		if err != nil {
			t.Fatal(err)
		}
		if string(msg.Data) != want {
			t.Errorf("room %s: reply %s, want %s", room, msg.Data, want)
		}
	}
}

// TestHiddenUsersTypingDoesNotReachTheJoiner: the authoriser allows alice
// into the room hiding bob; the gateway then leaves bob out of alice's
// joined snapshot and never sends her his typing, while carol (no list)
// sees it. Bob's start is published before dave's (carol sees them in that
// order), so alice, who gets the room's events in order too, would have
// got bob's before dave's.
func TestHiddenUsersTypingDoesNotReachTheJoiner(t *testing.T) {
	st := stacktest.Start(t, map[string]string{"ELLIPSIS_AUTHZ": "nats"})
	const room = "team:42"
	sub, err := joinauthz.Serve(st.NC, st.Prefix, func(user, r string) joinauthz.Decision {
		if r != room {
			return joinauthz.Deny
		}
		if user == "alice" {
			return joinauthz.Allow("bob")
		}
		return joinauthz.Allow()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := st.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	bob, carol, dave := st.Dial(t, "bob"), st.Dial(t, "carol"), st.Dial(t, "dave")
	for _, u := range []*stacktest.User{bob, carol, dave} {
		if f := u.Join(room); f["type"] != "joined" {
			t.Fatalf("%s: %v", u.Name, f)
		}
	}
	bob.Send(map[string]any{"type": "typing_start", "room": room})
	carol.Until(map[string]any{"type": "typing_start", "user": "bob"})

	// Bob is typing when alice joins: her snapshot leaves him out.
	alice := st.Dial(t, "alice")
	joined := alice.Join(room)
	if joined["type"] != "joined" || fmt.Sprint(joined["typing"]) != "[]" || joined["total"] != 0.0 {
		t.Fatalf("alice's join: %v, want joined with typing [] and total 0", joined)
	}
	// Bob stops and starts again, then dave starts: alice gets dave's
	// start and nothing of bob's before it.
	bob.Send(map[string]any{"type": "typing_stop", "room": room})
	carol.Until(map[string]any{"type": "typing_stop", "user": "bob"})
	bob.Send(map[string]any{"type": "typing_start", "room": room})
	carol.Until(map[string]any{"type": "typing_start", "user": "bob"})
	dave.Send(map[string]any{"type": "typing_start", "room": room})
	carol.Until(map[string]any{"type": "typing_start", "user": "dave"})
	for {
		f := alice.Next()
		if f["user"] == "bob" {
			t.Fatalf("alice got bob's %v, which her authoriser hid", f)
		}
		if f["type"] == "typing_start" && f["user"] == "dave" {
			break
		}
	}
	// A sync leaves bob out too, and counts dave only.
	alice.Send(map[string]any{"type": "sync", "room": room, "id": "s1"})
	f := alice.Until(map[string]any{"id": "s1"})
	if f["type"] != "typing" || f["total"] != 1.0 || !strings.Contains(fmt.Sprint(f["users"]), "dave") || strings.Contains(fmt.Sprint(f["users"]), "bob") {
		t.Fatalf("alice's sync: %v, want dave alone", f)
	}
}
