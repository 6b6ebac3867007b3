package integration

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// A user's snapshots are priced whatever its connections do: a client
// that reconnects in a loop, joining the same room each time, would make
// the workers read the room once per reconnect if each connection brought
// a fresh budget. The budget is the user's on the gateway (docs/protocol.md,
// "Snapshots: budget and sharing"), shared by its connections and kept
// across them, so a connect → join → close loop gets the user's free joins
// (ELLIPSIS_MAX_ROOMS_PER_CONN, refilled that many a minute), its snapshot
// burst and its rate, counted on NATS, and the joins past them are answered
// rate_limited.
func TestReconnectLoopSnapshotsArePriced(t *testing.T) {
	const maxRooms = 4
	s := newStack(t, 1, 1, func(c *config.Config) {
		c.MaxRoomsPerConn = maxRooms
		c.SnapshotRate = 1
		c.SnapshotBurst = 2
	})
	nc := connectNATS(t, s.cfg.NATSURL)
	var asked atomic.Int64
	sub, err := nc.Subscribe(names.New(s.cfg.KeyPrefix, s.cfg.SubjectPrefix).SnapshotSubject(), func(*nats.Msg) { asked.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	room, user := "r-reconnect", "u-reconnect"
	began := time.Now()
	loops, refused := 0, 0
	for time.Since(began) < time.Second {
		c := dial(t, s.wsURL(0, user, ""), "c")
		id := "j-" + testkit.RandHex(5)
		c.send(map[string]any{"type": "join", "room": room, "id": id})
		f := c.next(func(f frame) bool { return f.ID == id && (f.Type == "joined" || f.Type == "error") }, 5*time.Second, "an answer to join "+room)
		switch {
		case f.Type == "error" && f.Code == "rate_limited":
			refused++
		case f.Type != "joined":
			t.Fatalf("reconnect %d: join answered %v", loops, f)
		}
		c.close()
		loops++
	}
	elapsed := time.Since(began)
	_ = nc.Flush()
	time.Sleep(100 * time.Millisecond)
	// The free joins refill maxRooms a minute; +1 for the token the rate
	// has part-filled when the loop begins.
	refill := int(math.Ceil(maxRooms * elapsed.Minutes()))
	admitted := int64(maxRooms + refill + s.cfg.SnapshotBurst + int(s.cfg.SnapshotRate*elapsed.Seconds()) + 1)
	n := asked.Load()
	t.Logf("%d reconnects in %v: %d snapshots asked, %d joins rate_limited; the user's budget admits %d", loops, elapsed.Round(time.Millisecond), n, refused, admitted)
	if n > admitted {
		t.Fatalf("one user reconnecting %d times in %v made the workers read room %q %d times; the user's budget admits %d (%d free joins + %d refilled, burst %d, %g/s)",
			loops, elapsed.Round(time.Millisecond), room, n, admitted, maxRooms, refill, s.cfg.SnapshotBurst, s.cfg.SnapshotRate)
	}
	if int64(loops) > admitted && refused == 0 {
		t.Fatalf("%d reconnects, none of their joins rate_limited", loops)
	}
}
