package integration

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Issue 24 end to end (docs/protocol.md, "Threads and activities"): one
// user types in the room on a phone and in a thread on a laptop, through
// the real gateway and worker; each scope shows and ends on its own, and
// every snapshot lists both.

func isScopeStart(room, thread, user string) func(frame) bool {
	return func(f frame) bool {
		return f.Type == "typing_start" && f.Room == room && f.Thread == thread && f.User == user
	}
}

func isScopeStop(room, thread, user, reason string) func(frame) bool {
	return func(f frame) bool {
		return f.Type == "typing_stop" && f.Room == room && f.Thread == thread && f.User == user && (reason == "" || f.Reason == reason)
	}
}

// threadsOf is a snapshot's threads as "thread:user/activity,...;...".
func threadsOf(ts []protocol.ThreadTypists) string {
	var s string
	for i, t := range ts {
		if i > 0 {
			s += ";"
		}
		s += t.Thread + ":"
		for j, u := range t.Users {
			if j > 0 {
				s += ","
			}
			s += u.User + "/" + u.Activity
		}
	}
	return s
}

func (c *client) syncFrame(room string) frame {
	c.t.Helper()
	id := "s-" + room + time.Now().Format("150405.000000")
	c.send(map[string]any{"type": "sync", "room": room, "id": id})
	return c.next(func(f frame) bool { return f.Type == "typing" && f.ID == id }, 5*time.Second, "typing for sync "+room)
}

func TestOneUserTypesInRoomAndThreadOnTwoDevices(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2, 1)
	const room = "threads"
	phone := dial(t, s.wsURL(0, "alice", "Alice"), "phone")
	laptop := dial(t, s.wsURL(1, "alice", "Alice"), "laptop")
	bob := dial(t, s.wsURL(0, "bob", ""), "bob")
	old := dial(t, s.wsURL(1, "carol", ""), "carol") // a client that never sends thread or activity
	for _, c := range []*client{phone, laptop, bob, old} {
		c.join(room)
	}

	phone.start(room)
	bob.next(isScopeStart(room, "", "alice"), 5*time.Second, "alice's room start")
	laptop.send(map[string]any{"type": "typing_start", "room": room, "thread": "t-1", "activity": "thinking"})
	f := bob.next(isScopeStart(room, "t-1", "alice"), 5*time.Second, "alice's thread start")
	if f.Activity != protocol.ActivityThinking || f.Name != "Alice" {
		t.Fatalf("thread start %v, want activity thinking and her name", f)
	}
	old.next(isScopeStart(room, "t-1", "alice"), 5*time.Second, "the thread start at an old client (events are forwarded as published)")

	snap := bob.syncFrame(room)
	if users(snap.Users) != "alice" || *snap.Total != 1 || threadsOf(snap.Threads) != "t-1:alice/thinking" {
		t.Fatalf("sync with both scopes = %v", snap)
	}
	if code, body := httpTypingBody(t, s.gateways[1].HTTPAddr(), room, "bob"); code != 200 || users(body.Users) != "alice" || threadsOf(body.Threads) != "t-1:alice/thinking" {
		t.Fatalf("GET typing = %d %+v", code, body)
	}
	late := dial(t, s.wsURL(0, "dave", ""), "dave")
	j := late.join(room)
	if users(j.Typing) != "alice" || threadsOf(j.Threads) != "t-1:alice/thinking" {
		t.Fatalf("joined = %v", j)
	}

	// The phone's stop ends the room scope only.
	phone.stop(room)
	bob.next(isScopeStop(room, "", "alice", "stopped"), 5*time.Second, "alice's room stop")
	snap = bob.syncFrame(room)
	if len(snap.Users) != 0 || *snap.Total != 0 || threadsOf(snap.Threads) != "t-1:alice/thinking" {
		t.Fatalf("sync after the room stop = %v", snap)
	}
	// The room again, and the thread's stop ends the thread only.
	phone.start(room)
	bob.next(isScopeStart(room, "", "alice"), 5*time.Second, "alice's room start again")
	laptop.send(map[string]any{"type": "typing_stop", "room": room, "thread": "t-1"})
	bob.next(isScopeStop(room, "t-1", "alice", "stopped"), 5*time.Second, "alice's thread stop")
	snap = bob.syncFrame(room)
	if users(snap.Users) != "alice" || snap.Threads != nil {
		t.Fatalf("sync after the thread stop = %v", snap)
	}
	bob.quiet(isScopeStop(room, "", "alice", ""), 300*time.Millisecond, "a room stop from the thread's stop")

	// A leave ends the connection in every scope of the room.
	laptop.send(map[string]any{"type": "typing_start", "room": room, "thread": "t-2"})
	bob.next(isScopeStart(room, "t-2", "alice"), 5*time.Second, "alice's start in t-2")
	phone.send(map[string]any{"type": "typing_start", "room": room, "thread": "t-3"})
	bob.next(isScopeStart(room, "t-3", "alice"), 5*time.Second, "alice's start in t-3")
	phone.send(map[string]any{"type": "leave", "room": room, "id": "l"})
	bob.next(isScopeStop(room, "", "alice", "left"), 5*time.Second, "the phone's leave ending the room")
	bob.next(isScopeStop(room, "t-3", "alice", "left"), 5*time.Second, "the phone's leave ending t-3")
	// The laptop still types in t-2: a disconnect ends it.
	laptop.close()
	bob.next(isScopeStop(room, "t-2", "alice", "disconnected"), 5*time.Second, "the laptop's disconnect ending t-2")
	snap = bob.syncFrame(room)
	if len(snap.Users) != 0 || snap.Threads != nil {
		t.Fatalf("sync at the end = %v", snap)
	}
}

type roomTypingBody struct {
	Users   []protocol.Typist        `json:"users"`
	Total   int                      `json:"total"`
	Threads []protocol.ThreadTypists `json:"threads"`
}

func httpTypingBody(t *testing.T, httpAddr, room, user string) (int, roomTypingBody) {
	t.Helper()
	u := "http://" + httpAddr + "/v1/rooms/" + url.PathEscape(room) + "/typing?user=" + url.QueryEscape(user)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	var body roomTypingBody
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}
