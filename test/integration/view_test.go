package integration

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// view consumes every frame of one client in a goroutine and keeps what a
// receiver's UI would show: who is typing in each room, from typing_start,
// typing_stop and the joined / typing snapshots, in arrival order. Tests
// then wait for conditions on it instead of reading frames one by one.
type view struct {
	t *testing.T
	c *client

	mu     sync.Mutex
	typing map[string]map[string]bool // room -> users shown
	log    []frame
	notify chan struct{} // closed and replaced after every frame
	ended  bool
}

// watch starts following c; c.next must no longer be used.
func watch(c *client) *view {
	v := &view{t: c.t, c: c, typing: map[string]map[string]bool{}, notify: make(chan struct{})}
	go v.run()
	return v
}

func (v *view) run() {
	for {
		select {
		case f := <-v.c.frames:
			v.apply(f)
		case <-v.c.done:
			for {
				select {
				case f := <-v.c.frames:
					v.apply(f)
				default:
					v.mu.Lock()
					v.ended = true
					close(v.notify)
					v.notify = make(chan struct{})
					v.mu.Unlock()
					return
				}
			}
		}
	}
}

func (v *view) apply(f frame) {
	v.mu.Lock()
	defer v.mu.Unlock()
	set := func(room string, ts []protocol.Typist) {
		m := map[string]bool{}
		for _, u := range ts {
			m[u.User] = true
		}
		v.typing[room] = m
	}
	switch f.Type {
	case "typing_start":
		if v.typing[f.Room] == nil {
			v.typing[f.Room] = map[string]bool{}
		}
		v.typing[f.Room][f.User] = true
	case "typing_stop":
		delete(v.typing[f.Room], f.User)
	case "joined":
		set(f.Room, f.Typing)
	case "typing":
		set(f.Room, f.Users)
	}
	v.log = append(v.log, f)
	close(v.notify)
	v.notify = make(chan struct{})
}

// shown returns the users shown typing in room, sorted, comma-separated.
func (v *view) shown(room string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.shownLocked(room)
}

func (v *view) shownLocked(room string) string {
	var us []string
	for u := range v.typing[room] {
		us = append(us, u)
	}
	sort.Strings(us)
	return strings.Join(us, ",")
}

// mark returns the log position, for frames(since) and waitFrame(since).
func (v *view) mark() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.log)
}

// frames returns the frames received from position since on that match pred.
func (v *view) frames(since int, pred func(frame) bool) []frame {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []frame
	for _, f := range v.log[min(since, len(v.log)):] {
		if pred == nil || pred(f) {
			out = append(out, f)
		}
	}
	return out
}

// waitUntil waits until cond (evaluated under the view's lock, with the
// current log) holds, and returns the arrival time of the frame that made
// it hold (now, if it held already).
func (v *view) waitUntil(what string, within time.Duration, cond func() bool) time.Time {
	v.t.Helper()
	at, ok := v.tryUntil(within, cond)
	if !ok {
		v.mu.Lock()
		var last []string
		for _, f := range v.log[max(0, len(v.log)-8):] {
			last = append(last, f.String())
		}
		v.mu.Unlock()
		v.t.Fatalf("%s: not %s within %v; last frames:\n  %s", v.c.name, what, within, strings.Join(last, "\n  "))
	}
	return at
}

func (v *view) tryUntil(within time.Duration, cond func() bool) (time.Time, bool) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	checked := -1
	for {
		v.mu.Lock()
		n, ch := len(v.log), v.notify
		var at time.Time
		ok := false
		if n != checked {
			ok = cond()
			if ok && n > 0 {
				at = v.log[n-1].at
			}
		}
		v.mu.Unlock()
		if ok {
			if at.IsZero() || checked == -1 {
				at = time.Now()
			}
			return at, true
		}
		checked = n
		select {
		case <-ch:
		case <-deadline.C:
			return time.Time{}, false
		}
	}
}

// waitShown waits until room shows exactly users (sorted, comma-separated;
// "" for nobody) and returns when that became true.
func (v *view) waitShown(room, users string, within time.Duration) time.Time {
	v.t.Helper()
	return v.waitUntil(fmt.Sprintf("showing %q in %s (shows %q)", users, room, v.shown(room)), within,
		func() bool { return v.shownLocked(room) == users })
}

// waitFrame waits for a frame matching pred at or after position since.
func (v *view) waitFrame(since int, pred func(frame) bool, within time.Duration, what string) frame {
	v.t.Helper()
	var got frame
	v.waitUntil("receiving "+what, within, func() bool {
		for _, f := range v.log[min(since, len(v.log)):] {
			if pred(f) {
				got = f
				return true
			}
		}
		return false
	})
	return got
}

// join joins room and waits for the joined frame; it fails on an error
// reply.
func (v *view) join(room string) frame {
	v.t.Helper()
	id := "j-" + testkit.RandHex(5)
	since := v.mark()
	v.c.send(map[string]any{"type": "join", "room": room, "id": id})
	f := v.waitFrame(since, func(f frame) bool { return f.ID == id }, 5*time.Second, "joined "+room)
	if f.Type != "joined" {
		v.t.Fatalf("%s: join %s: %v", v.c.name, room, f)
	}
	return f
}

// request sends a frame with a fresh id and returns the reply with that id.
func (v *view) request(msg map[string]any, within time.Duration) (frame, time.Duration) {
	v.t.Helper()
	id := "r-" + testkit.RandHex(5)
	msg["id"] = id
	since := v.mark()
	sent := time.Now()
	v.c.send(msg)
	f := v.waitFrame(since, func(f frame) bool { return f.ID == id }, within, fmt.Sprintf("reply to %v", msg))
	return f, f.at.Sub(sent)
}

// closeCode waits for the connection to end and returns the server's close
// code (1006 when it ended without one) and when it ended.
func (c *client) closeCode(within time.Duration) (int, time.Time) {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(within):
		c.t.Fatalf("%s: connection still open after %v", c.name, within)
	}
	var ce *websocket.CloseError
	if errors.As(c.readErr, &ce) {
		return ce.Code, c.endedAt
	}
	return websocket.CloseAbnormalClosure, c.endedAt
}

// tryDial dials without failing the test.
func tryDial(t *testing.T, rawURL, name string) (*client, error) {
	d := websocket.Dialer{HandshakeTimeout: 3 * time.Second}
	conn, resp, err := d.Dial(rawURL, nil)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("%w (HTTP %d)", err, resp.StatusCode)
		}
		return nil, err
	}
	c := &client{t: t, name: name, conn: conn, frames: make(chan frame, 4096), done: make(chan struct{})}
	go c.read()
	t.Cleanup(c.close)
	return c, nil
}

func sortedCSV(us ...string) string {
	s := slices.Clone(us)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// trySend writes a frame and returns the error instead of failing (for
// goroutines other than the test's).
func (c *client) trySend(v map[string]any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("closed")
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
	defer func() { _ = c.conn.SetWriteDeadline(time.Time{}) }()
	return c.conn.WriteJSON(v)
}

// keepTyping sends typing_start in room now and every interval, as the JS
// client refreshes while its user types, until the returned function is
// called (which sends no typing_stop by itself).
func keepTyping(c *client, room string, every time.Duration) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	_ = c.trySend(map[string]any{"type": "typing_start", "room": room})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if c.trySend(map[string]any{"type": "typing_start", "room": room}) != nil {
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}
