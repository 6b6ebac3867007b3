package joinauthz_test

import (
	"encoding/json"
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
	sub, err := joinauthz.Serve(st.NC, st.Prefix, func(user, room string) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, user+"/"+room)
		return user == "alice" && room == "team:42"
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
	sub, err := joinauthz.Serve(st.NC, st.Prefix, func(user, room string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for _, req := range []string{`nope`, `{"v":2,"user":"a","room":"r"}`, `{"v":1,"user":"","room":"r"}`, `{"v":1,"user":"a"}`, `{"v":1,"user":"a","room":"r"}`} {
		msg, err := st.NC.Request(sub.Subject, []byte(req), stacktest.Wait)
		if err != nil {
			t.Fatal(err)
		}
		var r joinauthz.Reply
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			t.Fatal(err)
		}
		if want := req == `{"v":1,"user":"a","room":"r"}`; r.Allow != want {
			t.Errorf("%s: allow %v, want %v", req, r.Allow, want)
		}
	}
}
