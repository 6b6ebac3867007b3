package gateway_test

import (
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// 500 connections that each join two rooms (one shared by all, one of
// their own) and then end, half with a close handshake and half by
// dropping TCP: afterwards the gateway holds no goroutine, room or
// Redis subscription more than before (goroutines counted with
// runtime.NumGoroutine, polled with a generous deadline). Not parallel,
// so no other test's goroutines are counted.
func TestNoLeakAfter500Connections(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: opens and closes 500 connections; make test runs it (no -short)")
	}
	e := newEnv(t)
	e.startWorker("")
	warm := e.dial("warm", "")
	warm.join("leak:warm")
	warm.ws.Close()
	testkit.WaitFor(t, 5*time.Second, "the warm-up connection to end", func() bool { return e.metric("ellipsis_gateway_connections") == 0 })
	time.Sleep(200 * time.Millisecond)
	before := runtime.NumGoroutine()

	const n = 500
	clients := make([]*client, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 25)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c := joinLeakRooms(t, e, i)
			if c == nil {
				return
			}
			mu.Lock()
			clients[i] = c
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if got := len(pubsubChannels(t, e)); got != n+1 {
		t.Fatalf("%d room channels subscribed with %d connections in %d rooms", got, n, n+1)
	}
	for i, c := range clients {
		if i%2 == 0 {
			_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		}
		c.ws.Close()
	}
	testkit.WaitFor(t, 5*time.Second, "every connection to end", func() bool { return e.metric("ellipsis_gateway_connections") == 0 })
	testkit.WaitFor(t, 5*time.Second, "every room left", func() bool { return e.metric("ellipsis_gateway_joined_rooms") == 0 })
	var after int
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if after = runtime.NumGoroutine(); after <= before+5 {
			break
		}
	}
	if after > before+5 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before 500 connections, %d after they all ended:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && len(pubsubChannels(t, e)) > 0; time.Sleep(100 * time.Millisecond) {
	}
	if chs := pubsubChannels(t, e); len(chs) != 0 {
		t.Fatalf("%d room channels still subscribed after every connection ended", len(chs))
	}
	t.Logf("goroutines: %d before, %d after 500 connections", before, after)
}

// joinLeakRooms dials connection i as user u<i> and joins leak:shared and
// leak:<i>, waiting for both joined frames; nil after a failure it
// reported.
func joinLeakRooms(t *testing.T, e *env, i int) *client {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(e.wsURL(map[string][]string{"user": {"u" + strconv.Itoa(i)}}), nil)
	if err != nil {
		t.Errorf("dial %d: %v", i, err)
		return nil
	}
	c := &client{t: t, ws: ws}
	for _, room := range []string{"leak:shared", "leak:" + strconv.Itoa(i)} {
		if err := ws.WriteJSON(map[string]string{"type": "join", "room": room, "id": room}); err != nil {
			t.Errorf("write %d: %v", i, err)
			return nil
		}
	}
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for got := 0; got < 2; {
		var f map[string]any
		if err := ws.ReadJSON(&f); err != nil {
			t.Errorf("conn %d: %v", i, err)
			return nil
		}
		if f["type"] == "joined" {
			got++
		}
	}
	return c
}
