package integration

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
)

// A user's snapshots are priced whatever its connections do: a client
// that reconnects in a loop, joining the same room each time, makes the
// workers read the room about once per reconnect. The per-connection
// budget (docs/protocol.md, "Snapshots: budget and sharing") lets each new
// connection's first ELLIPSIS_MAX_ROOMS_PER_CONN joins through for free,
// so a connect → join → close loop of one user asks a snapshot per loop,
// bounded by nothing but the handshake rate. Checked against what one
// connection's budget admits over the loop (its free joins, the burst
// and the rate), with the snapshot requests counted on NATS.
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
	loops := 0
	for time.Since(began) < time.Second {
		c := dial(t, s.wsURL(0, user, ""), "c")
		c.join(room)
		c.close()
		loops++
	}
	elapsed := time.Since(began)
	_ = nc.Flush()
	time.Sleep(100 * time.Millisecond)
	admitted := int64(maxRooms + s.cfg.SnapshotBurst + int(s.cfg.SnapshotRate*elapsed.Seconds()) + 1)
	if n := asked.Load(); n > admitted {
		t.Fatalf("one user reconnecting %d times in %v made the workers read room %q %d times; one connection's budget admits %d (%d free joins, burst %d, %g/s)",
			loops, elapsed.Round(time.Millisecond), room, n, admitted, maxRooms, s.cfg.SnapshotBurst, s.cfg.SnapshotRate)
	}
}
