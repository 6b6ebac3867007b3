package integration

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Per-viewer filters end to end (docs/protocol.md, "Per-viewer filters"):
// real gateways and a real worker on the test's Redis and NATS, WebSocket
// clients from outside. Alice hides Bob, by each of the three sources of a
// hide list: the JWT claim hide_typing_from (auth jwt), its dev-mode
// stand-in ?hide_typing_from= (auth none), and the join authoriser's
// reply for the room (authz nats). Bob's start, stop, refresh, activity
// (a platform service's "thinking" for him) and snapshot presence never
// reach Alice on either of her connections (one per gateway), in the room
// or in a thread, while Dave sees all of it and Alice still sees Carol.

const filterSecret = "filters-test-secret"

type filterMode struct {
	name   string
	mutate func(*config.Config)
	// url is gateway i's WebSocket URL for user; hide is the user's claim
	// (or query) hide list, nil for none.
	url func(s *stack, i int, user string, hide []string) string
	// authz, when set, answers the join authoriser's requests of stack s.
	authz func(t *testing.T, s *stack)
}

func filterModes() []filterMode {
	devURL := func(s *stack, i int, user string, hide []string) string {
		q := url.Values{"user": {user}, "hide_typing_from": hide}
		return "ws://" + s.gateways[i].HTTPAddr() + "/v1/ws?" + q.Encode()
	}
	return []filterMode{
		{name: "auth=none,query", url: devURL},
		{
			name: "auth=jwt,claim",
			mutate: func(c *config.Config) {
				c.Auth, c.JWTSecret = config.AuthJWT, filterSecret
			},
			url: func(s *stack, i int, user string, hide []string) string {
				q := url.Values{"access_token": {filterToken(s.t, user, hide)}}
				return "ws://" + s.gateways[i].HTTPAddr() + "/v1/ws?" + q.Encode()
			},
		},
		{
			name:   "authz=nats,reply",
			mutate: func(c *config.Config) { c.Authz = config.AuthzNATS },
			url: func(s *stack, i int, user string, _ []string) string {
				return devURL(s, i, user, nil) // the list comes from the authoriser
			},
			authz: func(t *testing.T, s *stack) {
				nc := connectNATS(t, s.cfg.NATSURL)
				if _, err := nc.Subscribe(names.New("", s.cfg.SubjectPrefix).AuthzJoinSubject(), func(m *nats.Msg) {
					var req struct{ User, Room string }
					_ = json.Unmarshal(m.Data, &req)
					reply := `{"allow":true}`
					if req.User == "alice" {
						reply = `{"allow":true,"hide_typing_from":["bob"]}`
					}
					_ = m.Respond([]byte(reply))
				}); err != nil {
					t.Fatal(err)
				}
				if err := nc.Flush(); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
}

// filterToken is an HS256 token of user hiding hide (no claim when nil).
func filterToken(t *testing.T, user string, hide []string) string {
	c := jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix()}
	if hide != nil {
		c["hide_typing_from"] = hide
	}
	return testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(filterSecret), "", c)
}

func TestBlockedUserNeverReachesBlocker(t *testing.T) {
	for _, mode := range filterModes() {
		t.Run(mode.name, func(t *testing.T) {
			// A ttl no step outlasts: nobody expires in the middle.
			mut := []func(*config.Config){func(c *config.Config) { c.TypingTTL = 30 * time.Second }}
			if mode.mutate != nil {
				mut = append(mut, mode.mutate)
			}
			s := newStack(t, 2, 1, mut...)
			if mode.authz != nil {
				mode.authz(t, s)
			}
			const room = "blocks"
			hide := []string{"bob"}
			if mode.authz != nil {
				hide = nil
			}
			bob := dial(t, mode.url(s, 0, "bob", nil), "bob")
			carol := dial(t, mode.url(s, 1, "carol", nil), "carol")
			dave := dial(t, mode.url(s, 0, "dave", nil), "dave")
			bob.join(room)
			carol.join(room)
			dave.join(room)
			// Bob (in the room, and recording audio in thread t1) and
			// Carol type before Alice joins: her joined lists Carol only,
			// and no thread.
			bob.start(room)
			dave.next(inScope(isStart(room, "bob"), ""), 5*time.Second, "bob's start")
			bob.send(map[string]any{"type": "typing_start", "room": room, "thread": "t1", "activity": protocol.ActivityRecordingAudio})
			if f := dave.next(inScope(isStart(room, "bob"), "t1"), 5*time.Second, "bob's start in t1"); f.Activity != protocol.ActivityRecordingAudio {
				t.Fatalf("dave got %v, want bob recording audio in t1", f)
			}
			carol.start(room)
			dave.next(inScope(isStart(room, "carol"), ""), 5*time.Second, "carol's start")

			phone := dial(t, mode.url(s, 0, "alice", hide), "alice-phone")
			laptop := dial(t, mode.url(s, 1, "alice", hide), "alice-laptop")
			for _, a := range []*client{phone, laptop} {
				j := a.join(room)
				if got := users(j.Typing); got != "carol" || j.Total == nil || *j.Total != 1 || len(j.Threads) != 0 {
					t.Fatalf("%s: joined %v, want carol, total 1 and no thread", a.name, j)
				}
			}
			if j := dave.join(room); users(j.Typing) != "bob,carol" || *j.Total != 2 || len(j.Threads) != 1 || users(j.Threads[0].Users) != "bob" {
				t.Fatalf("dave's joined: %v", j)
			}
			// Carol types in t1 too.
			carol.send(map[string]any{"type": "typing_start", "room": room, "thread": "t1"})
			dave.next(inScope(isStart(room, "carol"), "t1"), 5*time.Second, "carol's start in t1")
			for _, a := range []*client{phone, laptop} {
				if f := a.next(func(frame) bool { return true }, 5*time.Second, "carol's start in t1"); !inScope(isStart(room, "carol"), "t1")(f) {
					t.Fatalf("%s got %v, want carol's start in t1", a.name, f)
				}
			}

			// Bob stops, types again (a refresh after the throttle), and a
			// platform service shows him "thinking" then stops him.
			bob.stop(room)
			dave.next(inScope(isStop(room, "bob", ""), ""), 5*time.Second, "bob's stop")
			bob.start(room)
			dave.next(inScope(isStart(room, "bob"), ""), 5*time.Second, "bob's second start")
			// While Bob and Carol type, a sync and the HTTP read leave Bob
			// out for Alice, and list him for Dave.
			phone.send(map[string]any{"type": "sync", "room": room, "id": "s1"})
			if f := phone.next(func(f frame) bool { return f.ID == "s1" }, 5*time.Second, "sync answer"); f.Type != "typing" || users(f.Users) != "carol" || *f.Total != 1 ||
				len(f.Threads) != 1 || users(f.Threads[0].Users) != "carol" || f.Threads[0].Total != 1 {
				t.Fatalf("alice's sync: %v, want carol and total 1, in the room and in t1", f)
			}
			if got := filterHTTP(t, s, mode, "alice", hide, room); got != "carol t1:carol" {
				t.Fatalf("alice's HTTP read lists %q, want carol t1:carol", got)
			}
			if got := filterHTTP(t, s, mode, "dave", nil, room); got != "bob,carol t1:bob,carol" {
				t.Fatalf("dave's HTTP read lists %q, want bob,carol", got)
			}
			nc := connectNATS(t, s.cfg.NATSURL)
			publishCommand(t, nc, s.cfg.SubjectPrefix, protocol.Command{Op: protocol.OpStart, Room: room, User: "bob", Conn: "bot-7:1", Activity: protocol.ActivityThinking, TTLMs: 5000})
			if f := dave.next(inScope(isStart(room, "bob"), ""), 5*time.Second, "bob thinking"); f.Activity != protocol.ActivityThinking {
				t.Fatalf("dave got %v, want bob thinking", f)
			}
			publishCommand(t, nc, s.cfg.SubjectPrefix, protocol.Command{Op: protocol.OpStop, Room: room, User: "bob"})
			dave.next(inScope(isStop(room, "bob", protocol.ReasonStopped), ""), 5*time.Second, "bob's final stop")
			bob.send(map[string]any{"type": "typing_stop", "room": room, "thread": "t1"})
			dave.next(inScope(isStop(room, "bob", protocol.ReasonStopped), "t1"), 5*time.Second, "bob's stop in t1")

			// Carol's stop is published after all of Bob's events on the
			// room's channel, which every gateway reads in order: each of
			// Alice's connections gets it, and nothing about Bob before.
			carol.stop(room)
			for _, a := range []*client{phone, laptop} {
				for {
					f := a.next(func(frame) bool { return true }, 5*time.Second, "carol's stop")
					if aboutInThreads("bob")(f) {
						t.Fatalf("%s got a frame about bob: %v", a.name, f)
					}
					if inScope(isStop(room, "carol", protocol.ReasonStopped), "")(f) {
						break
					}
				}
			}
		})
	}
}

// filterHTTP reads GET /v1/rooms/{room}/typing on gateway 0 as user and
// returns the users listed.
func filterHTTP(t *testing.T, s *stack, mode filterMode, user string, hide []string, room string) string {
	t.Helper()
	u := "http://" + s.gateways[0].HTTPAddr() + "/v1/rooms/" + url.PathEscape(room) + "/typing"
	req, _ := http.NewRequest("GET", u, nil)
	if s.cfg.Auth == config.AuthJWT {
		req.Header.Set("Authorization", "Bearer "+filterToken(t, user, hide))
	} else {
		req.URL.RawQuery = url.Values{"user": {user}, "hide_typing_from": hide}.Encode()
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Users   []protocol.Typist        `json:"users"`
		Threads []protocol.ThreadTypists `json:"threads"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s as %s: %d %v", u, user, resp.StatusCode, err)
	}
	out := users(body.Users)
	for _, th := range body.Threads {
		out += " " + th.Thread + ":" + users(th.Users)
	}
	return out
}

// inScope narrows an event predicate to one thread ("" = the room itself).
func inScope(pred func(frame) bool, thread string) func(frame) bool {
	return func(f frame) bool { return pred(f) && f.Thread == thread }
}

// aboutInThreads is isAbout, thread entries of snapshots included.
func aboutInThreads(user string) func(frame) bool {
	return func(f frame) bool {
		if isAbout(user)(f) {
			return true
		}
		for _, th := range f.Threads {
			for _, u := range th.Users {
				if u.User == user {
					return true
				}
			}
		}
		return false
	}
}

// A join with "typing":false gets its joined (empty, total 0), no
// events and an empty sync, while its own typing still reaches others;
// a join again with typing on brings a fresh snapshot and events.
func TestJoinWithoutTyping(t *testing.T) {
	s := newStack(t, 1, 1)
	const room = "quiet"
	bob := dial(t, s.wsURL(0, "bob", ""), "bob")
	dave := dial(t, s.wsURL(0, "dave", ""), "dave")
	bob.join(room)
	dave.join(room)
	bob.start(room)
	dave.next(isStart(room, "bob"), 5*time.Second, "bob's start")
	alice := dial(t, s.wsURL(0, "alice", ""), "alice")
	alice.send(map[string]any{"type": "join", "room": room, "id": "q", "typing": false})
	j := alice.next(func(f frame) bool { return f.ID == "q" }, 5*time.Second, "joined")
	if j.Type != "joined" || users(j.Typing) != "" || j.Total == nil || *j.Total != 0 {
		t.Fatalf("joined with typing off: %v", j)
	}
	// Her own typing still works: Bob sees it.
	alice.start(room)
	bob.next(isStart(room, "alice"), 5*time.Second, "alice's start")
	// Bob's stop and start: Dave, on the same gateway, gets them, so they
	// were fanned out to Alice too (one fan-out per event), before her
	// frames below.
	bob.stop(room)
	dave.next(isStop(room, "bob", ""), 5*time.Second, "bob's stop")
	bob.start(room)
	dave.next(isStart(room, "bob"), 5*time.Second, "bob's second start")
	alice.send(map[string]any{"type": "sync", "room": room, "id": "s"})
	if f := alice.next(func(frame) bool { return true }, 5*time.Second, "sync answer"); f.ID != "s" || f.Type != "typing" || users(f.Users) != "" || *f.Total != 0 {
		t.Fatalf("with typing off, got %v, want the sync's empty typing first", f)
	}
	// A join again with typing on: a fresh snapshot, then events.
	alice.send(map[string]any{"type": "join", "room": room, "id": "on"})
	if f := alice.next(func(frame) bool { return true }, 5*time.Second, "joined again"); f.ID != "on" || users(f.Typing) != "bob" || *f.Total != 1 {
		t.Fatalf("re-join with typing on: %v, want joined listing bob", f)
	}
	bob.stop(room)
	if f := alice.next(func(frame) bool { return true }, 5*time.Second, "bob's stop"); !isStop(room, "bob", "")(f) {
		t.Fatalf("after the re-join with typing on: %v, want bob's stop", f)
	}
	// Non-boolean typing: bad_request naming the field.
	alice.send(map[string]any{"type": "join", "room": room, "id": "bad", "typing": "no"})
	e := alice.next(func(f frame) bool { return f.ID == "bad" }, 5*time.Second, "the error")
	if e.Type != "error" || e.Code != protocol.CodeBadRequest || e.Message != `typing: must be a boolean (true or false), got "no"` {
		t.Fatalf("non-boolean typing: %v", e)
	}
}
