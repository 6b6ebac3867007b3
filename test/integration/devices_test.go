package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// connectNATS connects the test itself to a NATS server (to publish
// commands as a platform service would, or to watch subjects).
func connectNATS(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("ellipsis-test"), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("nats connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// publishCommand publishes a command on the stack's command subject, as a
// platform service (chat backend, bot) may.
func publishCommand(t *testing.T, nc *nats.Conn, subjectPrefix string, cmd protocol.Command) {
	t.Helper()
	cmd.V = protocol.Version
	if cmd.TsMs == 0 {
		cmd.TsMs = time.Now().UnixMilli()
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(names.New("", subjectPrefix).CommandSubject(), b); err != nil {
		t.Fatalf("publish %s: %v", b, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// httpTyping asks a gateway's GET /v1/rooms/{room}/typing as user and
// returns the status, the users listed (sorted, comma-separated) and the
// error message of a non-200 answer.
func httpTyping(t *testing.T, httpAddr, room, user string) (int, string, string) {
	t.Helper()
	u := "http://" + httpAddr + "/v1/rooms/" + url.PathEscape(room) + "/typing?user=" + url.QueryEscape(user)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	var body struct {
		Users []protocol.Typist `json:"users"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	var us []string
	for _, x := range body.Users {
		us = append(us, x.User)
	}
	return resp.StatusCode, sortedCSV(us...), body.Error.Message
}

// Alice types on a phone (gateway 0) and a laptop (gateway
// 1). A stop, a leave and a disconnect of the phone each leave her shown to
// receivers on both gateways while the laptop types; the laptop's stop is
// the one that publishes typing_stop, exactly once.
func TestMultiDeviceOneTypistAcrossGateways(t *testing.T) {
	t.Parallel()
	ps := newProcStack(t, nil)
	ps.startWorker(nil)
	ps.startWorker(nil)
	g0, g1 := ps.startGateway(nil), ps.startGateway(nil)
	room := "devices:1"
	phone := dial(t, g0.wsURL("alice", "Alice"), "alice-phone")
	laptop := dial(t, g1.wsURL("alice", "Alice"), "alice-laptop")
	bob := watch(dial(t, g0.wsURL("bob", "Bob"), "bob"))
	carol := watch(dial(t, g1.wsURL("carol", "Carol"), "carol"))
	phone.join(room)
	laptop.join(room)
	bob.join(room)
	carol.join(room)
	receivers := []*view{bob, carol}
	marks := []int{bob.mark(), carol.mark()}

	// Both devices type; they refresh like the JS client (every testRefresh).
	stopLaptop := keepTyping(laptop, room, testRefresh)
	defer stopLaptop()
	stopPhone := keepTyping(phone, room, testRefresh)
	for _, r := range receivers {
		r.waitShown(room, "alice", 2*time.Second)
	}
	waitDeviceEntries(t, ps, room, "alice", 2)
	holds := func(what string) {
		t.Helper()
		checkAliceHolds(t, receivers, marks, room, g1, what)
	}

	stopPhone()
	phone.stop(room)
	holds("stop")

	stopPhone = keepTyping(phone, room, testRefresh)
	time.Sleep(100 * time.Millisecond)
	phone.send(map[string]any{"type": "leave", "room": room, "id": "l1"})
	phone.next(func(f frame) bool { return f.Type == "left" }, 2*time.Second, "left")
	stopPhone()
	holds("leave")

	phone.join(room)
	stopPhone = keepTyping(phone, room, testRefresh)
	time.Sleep(100 * time.Millisecond)
	stopPhone()
	phone.close() // the gateway publishes the connection's disconnect
	holds("disconnect")

	checkLastDeviceStop(t, receivers, marks, room, laptop, stopLaptop)
}

// waitDeviceEntries waits (3 s) until the workers applied the starts of
// user's devices: want connection entries, c:<conn>, in the user's hash
// in the room (docs/protocol.md, "Keys").
func waitDeviceEntries(t *testing.T, ps *procStack, room, user string, want int) {
	t.Helper()
	userKey := ps.s.cfg.KeyPrefix + "typing:user:" + names.RoomTag(room) + ":" + names.Enc(user)
	conns := func() int {
		n := 0
		for _, f := range ps.s.rdb.HKeys(context.Background(), userKey).Val() {
			if strings.HasPrefix(f, "c:") {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(3 * time.Second); conns() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("the two devices' entries are not both in %s", userKey)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkAliceHolds checks that alice stays shown and no stop about her
// arrives at receivers (after marks) for a while after one device ended,
// and that g1's snapshot still has her.
func checkAliceHolds(t *testing.T, receivers []*view, marks []int, room string, g1 *proc, what string) {
	t.Helper()
	time.Sleep(400 * time.Millisecond)
	for i, r := range receivers {
		s := marks[i]
		if stops := r.frames(s, isStop(room, "alice", "")); len(stops) > 0 || r.shown(room) != "alice" {
			t.Fatalf("after the phone's %s, %s shows %q (stops %v): the laptop still types", what, r.c.name, r.shown(room), stops)
		}
	}
	if st, us, _ := httpTyping(t, g1.httpAddr, room, "dave"); st != 200 || us != "alice" {
		t.Fatalf("after the phone's %s, the snapshot is %d %q, want alice", what, st, us)
	}
}

// checkLastDeviceStop stops the last device (laptop): now receivers see
// exactly one stop.
func checkLastDeviceStop(t *testing.T, receivers []*view, marks []int, room string, laptop *client, stopLaptop func()) {
	t.Helper()
	stopLaptop()
	ended := time.Now()
	laptop.stop(room)
	for i, r := range receivers {
		s := marks[i]
		r.waitFrame(s, isStop(room, "alice", "stopped"), time.Second, "typing_stop stopped")
		t.Logf("%s saw the stop %v after the laptop's", r.c.name, r.frames(s, isStop(room, "alice", ""))[0].at.Sub(ended))
	}
	time.Sleep(300 * time.Millisecond)
	for i, r := range receivers {
		s := marks[i]
		if n := len(r.frames(s, isStop(room, "alice", ""))); n != 1 {
			t.Fatalf("%s got %d typing_stop for alice, want exactly 1", r.c.name, n)
		}
	}
}

// A platform service publishes a stop without conn (the
// user's message was posted): every connection of the user in that room is
// cleared at once, with one typing_stop(stopped) and no later expired stop;
// leave stops with reason left; disconnect with disconnected, in every
// joined room.
func TestServerSideStops(t *testing.T) {
	t.Parallel()
	ps := newProcStack(t, nil)
	ps.startWorker(nil)
	ps.startWorker(nil)
	g0, g1 := ps.startGateway(nil), ps.startGateway(nil)
	nc := connectNATS(t, ps.s.cfg.NATSURL)
	room, room2 := "posted", "other room"
	phone := dial(t, g0.wsURL("alice", "Alice"), "alice-phone")
	laptop := dial(t, g1.wsURL("alice", "Alice"), "alice-laptop")
	bob := watch(dial(t, g0.wsURL("bob", "Bob"), "bob"))
	for _, c := range []*client{phone, laptop} {
		c.join(room)
		c.join(room2)
	}
	bob.join(room)
	bob.join(room2)

	// Platform stop without conn: both of alice's connections end at once.
	since := bob.mark()
	stop1 := keepTyping(phone, room, testRefresh)
	stop2 := keepTyping(laptop, room, testRefresh)
	laptop.start(room2) // and she types elsewhere too: untouched
	bob.waitShown(room, "alice", 2*time.Second)
	bob.waitShown(room2, "alice", 2*time.Second)
	stop1()
	stop2()
	// Let the last refreshes land first: a refresh still in flight when
	// the platform stop is applied would show her again (until it expires).
	time.Sleep(200 * time.Millisecond)
	posted := time.Now()
	publishCommand(t, nc, ps.s.cfg.SubjectPrefix, protocol.Command{Op: protocol.OpStop, Room: room, User: "alice"})
	f := bob.waitFrame(since, isStop(room, "alice", ""), time.Second, "typing_stop after the platform stop")
	if f.Reason != "stopped" {
		t.Fatalf("platform stop: reason %q, want stopped", f.Reason)
	}
	t.Logf("platform stop reached bob %v after it was published", f.at.Sub(posted))
	if st, us, _ := httpTyping(t, g0.httpAddr, room, "bob"); st != 200 || us != "" {
		t.Fatalf("after the platform stop the snapshot is %d %q, want nobody", st, us)
	}
	if bob.shown(room2) != "alice" {
		t.Fatalf("the platform stop in %s hid alice in %s", room, room2)
	}
	// No connection was left behind: no expired stop follows.
	time.Sleep(testTTL + 500*time.Millisecond)
	if n := len(bob.frames(since, isStop(room, "alice", ""))); n != 1 {
		t.Fatalf("%d typing_stop for alice in %s after one platform stop, want 1: %v", n, room, bob.frames(since, isAbout("alice")))
	}

	// leave → left.
	laptop.close()
	phone.start(room)
	bob.waitShown(room, "alice", 2*time.Second)
	since = bob.mark()
	phone.send(map[string]any{"type": "leave", "room": room})
	if f := bob.waitFrame(since, isStop(room, "alice", ""), time.Second, "stop after leave"); f.Reason != "left" {
		t.Fatalf("leave: reason %q, want left", f.Reason)
	}

	// disconnect → disconnected, in every room the connection had joined.
	phone.join(room)
	phone.start(room)
	phone.start(room2)
	bob.waitShown(room, "alice", 2*time.Second)
	bob.waitShown(room2, "alice", 2*time.Second)
	since = bob.mark()
	phone.abort() // no close frame: the gateway still publishes the disconnect
	for _, r := range []string{room, room2} {
		if f := bob.waitFrame(since, isStop(r, "alice", ""), time.Second, "stop after disconnect in "+r); f.Reason != "disconnected" {
			t.Fatalf("disconnect in %s: reason %q, want disconnected", r, f.Reason)
		}
	}
}
