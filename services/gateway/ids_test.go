package gateway_test

import (
	"encoding/json"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// protocolIDs are docs/protocol.md's example ids ("Terms and ids"), plus look-alikes
// that a careless encoding or a glob would confuse with them, and the
// longest valid id.
var protocolIDs = []string{
	"42", "room:42", "!abc:matrix.org", "a*b?c[d]", "{x}", "café ☕", "a b",
	"x", "aXbYcd", "a%2Ab%3Fc%5Bd%5D", "%7Bx%7D", "a%20b", "room", `a\b`, `q"uote`, "/", "%",
	strings.Repeat("é", 128), // 256 bytes
}

// Item 7: every id works through the gateway as a room and as a user:
// join, commands carry the exact ids, events on a room's channel reach that
// room's members and no other room's, and the self filter matches the
// exact user.
func TestIDsThroughTheGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.MaxRoomsPerConn = len(protocolIDs) })
	e.startWorker("")
	obs := e.dial("observer", "")
	typists := map[string]*client{}
	join := func(c *client, room string) {
		t.Helper()
		c.send(map[string]string{"type": "join", "room": room, "id": "j"})
		if f := c.expect(protocol.TypeJoined); f.str("room") != room {
			t.Fatalf("joined %v, want room %q", f, room)
		}
	}
	for _, id := range protocolIDs {
		join(obs, id)
		c := e.dialURL(e.wsURL(url.Values{"user": {id}, "name": {"N " + id[:min(len(id), 200)]}}), nil)
		join(c, id)
		c.send(map[string]string{"type": "typing_start", "room": id})
		cmd := e.nextCommand()
		if cmd.Room != id || cmd.User != id || cmd.Name != "N "+id[:min(len(id), 200)] {
			t.Fatalf("id %q: command %+v", id, cmd)
		}
		typists[id] = c
	}
	// One event per room, from the user of the same id: the observer gets
	// each exactly once, in its room; the typist never gets its own.
	sent := map[string]string{}
	for _, id := range protocolIDs {
		sent[id] = e.publish(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: id, User: id, Name: "N " + id, TTLMs: 5000})
	}
	got := map[string]int{}
	for range protocolIDs {
		var ev protocol.RoomEvent
		raw := obs.readRaw()
		if err := json.Unmarshal(raw, &ev); err != nil || string(raw) != sent[ev.Room] {
			t.Fatalf("observer got %s", raw)
		}
		got[ev.Room]++
	}
	for _, id := range protocolIDs {
		if got[id] != 1 {
			t.Fatalf("room %q: %d events, want 1 (%v)", id, got[id], got)
		}
	}
	// Each typist joined only its own room, where the only event was its
	// own: it gets nothing (no cross-room delivery, exact self filter).
	for _, id := range protocolIDs {
		typists[id].send(`{"type":"ping","id":"p"}`)
		if f := typists[id].read(); f.str("type") != protocol.TypePong {
			t.Fatalf("typist %q got %v, want nothing but its pong (self filter, no cross-room delivery)", id, f)
		}
	}
	chans := pubsubChannels(t, e)
	want := make([]string, 0, len(protocolIDs))
	for _, id := range protocolIDs {
		want = append(want, e.names.RoomChannel(id))
	}
	sort.Strings(want)
	if strings.Join(chans, "\n") != strings.Join(want, "\n") {
		t.Fatalf("subscribed channels\n%s\nwant\n%s", strings.Join(chans, "\n"), strings.Join(want, "\n"))
	}
}

// Item 7: control characters, invalid UTF-8 and over-long ids get
// bad_request, in frames, at the handshake and on the HTTP API.
func TestInvalidIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("")
	c := e.dial("alice", "")
	for name, room := range map[string]string{
		"control char":    "a\x01b",
		"newline":         "a\nb",
		"DEL":             "a\x7fb",
		"C1 control":      "a\u0085b",
		"257 bytes":       strings.Repeat("r", 257),
		"257 bytes UTF-8": strings.Repeat("é", 128) + "x",
		"empty":           "",
	} {
		c.send(`{"type":"join","room":` + mustJSON(room) + `,"id":"j"}`)
		if f := c.expectError(protocol.CodeBadRequest); !strings.Contains(f.str("message"), "room") || f.str("id") != "j" {
			t.Fatalf("%s: %v", name, f)
		}
	}
	// JSON escapes of lone surrogates decode to U+FFFD (valid UTF-8), so
	// they name the room "\uFFFD"; raw invalid bytes close the frame (1007,
	// TestFrameLimits).
	c.join("\uFFFD")

	base := "ws://" + e.srv.HTTPAddr() + "/v1/ws?user="
	for name, user := range map[string]string{"control": "a%01b", "invalid UTF-8": "a%FFb", "257 bytes": strings.Repeat("u", 257)} {
		if st, code, msg := handshake(t, base+user, nil); st != 400 || code != protocol.CodeBadRequest || !strings.Contains(msg, "user") {
			t.Errorf("user %s: %d %s %q", name, st, code, msg)
		}
	}
	for name, room := range map[string]string{"control": "a%01b", "invalid UTF-8": "a%FFb", "257 bytes": strings.Repeat("r", 257)} {
		st, body := httpGet(t, e.httpURL("/v1/rooms/"+room+"/typing?user=alice"), nil)
		if code, msg := errorOf(body); st != 400 || code != protocol.CodeBadRequest || !strings.Contains(msg, "room") {
			t.Errorf("HTTP room %s: %d %v", name, st, body)
		}
	}
	c.send(`{"type":"ping"}`)
	c.expect(protocol.TypePong)
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Item 6: one client that never reads sits in a busy room; its events
// conflate and it is closed (1013) once a write stalled for
// ELLIPSIS_WRITE_STALL, without ever blocking the fan-out, and another
// client in the same room keeps receiving every event with low latency.
func TestSlowReaderDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	// Outbound queue: the default 256 frames. A write stall of 12 s: a
	// fan-out that waited on the slow client's stuck write would hold the
	// other client's events that long (over the 10 s checked below).
	// The slow client's events conflate meanwhile; its stall closes it.
	e := newEnv(t, func(c *config.Config) { c.WriteStall = 12 * time.Second })
	e.startWorker("")
	slow := e.dialSlow(e.wsURL(url.Values{"user": {"slow"}}))
	if err := slow.WriteMessage(1, []byte(`{"type":"join","room":"busy","id":"j"}`)); err != nil {
		t.Fatal(err)
	}
	fast := e.dial("fast", "")
	fast.join("busy")
	r := readAll(fast.ws, 10000)
	testkit.WaitFor(t, 5*time.Second, "the slow client to join", func() bool { return e.metric("ellipsis_gateway_joined_rooms") == 2 })

	// 3000 events of 2 KB, in bursts of 10 every 10 ms (~1000 events/s, 2
	// MB/s to each member): 6 MB, more than the slow client's socket
	// buffers and queue hold.
	const total, burst = 3000, 10
	name := strings.Repeat("N", 2000)
	var lat []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(lat) < total {
			select {
			case f := <-r.frames:
				var ev protocol.RoomEvent
				if json.Unmarshal(f.data, &ev) != nil || ev.Type != protocol.TypeTypingStart {
					continue
				}
				lat = append(lat, f.at.Sub(time.UnixMilli(ev.TsMs)))
			case <-r.done:
				return
			case <-time.After(10 * time.Second):
				return
			}
		}
	}()
	for sent := 0; sent < total; sent += burst {
		ev := string(protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "busy", User: "bob", Name: name, TTLMs: 5000}))
		pipe := e.rdb.Pipeline()
		for i := 0; i < burst; i++ {
			pipe.Publish(t.Context(), e.names.RoomChannel("busy"), ev+itoa(time.Now().UnixMilli())+"}")
		}
		if _, err := pipe.Exec(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-done
	if len(lat) != total {
		t.Fatalf("fast client got %d of %d events (%v)", len(lat), total, r.err)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99, max := lat[total/2], lat[total*99/100], lat[total-1]
	// Latency is measured, not asserted (speed belongs to benchmarks and
	// the load generator); the structural check is that no event waited
	// behind the slow client's stuck write, which would take the whole
	// 30 s write deadline.
	t.Logf("fast client latency over %d events: p50 %v, p99 %v, max %v", total, p50, p99, max)
	if max >= 10*time.Second {
		t.Fatalf("an event waited %v with a slow reader in the room: the fan-out blocked on it", max)
	}
	// The slow client's write stalled: it was closed with 1013 (counted
	// once its stuck write gave up).
	testkit.WaitFor(t, 30*time.Second, "the slow client to be closed with 1013", func() bool {
		return e.metric("ellipsis_gateway_write_stall_closes_total") == 1 &&
			e.metric(`ellipsis_gateway_closes_total{code="1013"}`) == 1
	})
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
