package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// A typist's disconnect tombstone keeps its delayed start stale
// (docs/protocol.md, "Order and loss", "Bounds"), whatever connections
// that never typed in the room do. Every leave (and every room of a
// disconnect) buries a tombstone, also for a connection that only read
// the room, and the room keeps at most 10,000, dropping the ones that end
// first: so readers leaving the room (10,000 within ttl + 10 s +
// throttle; one client's reconnect loop makes about 600 a second on
// loopback) push out the tombstone of a typist who disconnected before
// them, and the typist's start delayed past its disconnect then shows a
// ghost for up to ttl. The commands are published on NATS exactly as a
// gateway publishes them (a start, a disconnect, the readers' leaves),
// paced so the worker's queue drops none.
func TestReaderChurnKeepsTypistTombstone(t *testing.T) {
	s := newStack(t, 1, 1, func(c *config.Config) { c.TypingTTL = 20 * time.Second })
	ctx := context.Background()
	nc := connectNATS(t, s.cfg.NATSURL)
	room, typist, conn := "r-tomb", "u-typist", "gw-t:1"
	gone := s.cfg.KeyPrefix + "typing:gone:" + names.RoomTag(room)
	w := dial(t, s.wsURL(0, "u-watcher", ""), "watcher")
	w.join(room)

	sentAt := time.Now().UnixMilli()
	start := protocol.Command{Op: protocol.OpStart, Room: room, User: typist, Conn: conn, Seq: 1, TsMs: sentAt}
	publishCommand(t, nc, s.cfg.SubjectPrefix, start)
	w.next(isStart(room, typist), 3*time.Second, "the typist's start")
	publishCommand(t, nc, s.cfg.SubjectPrefix, protocol.Command{Op: protocol.OpDisconnect, Rooms: []string{room}, User: typist, Conn: conn, Seq: 2})
	w.next(isStop(room, typist, protocol.ReasonDisconnected), 3*time.Second, "the typist's disconnect")

	// Readers that joined the room, never typed, and left.
	const readers, chunk = 10000, 500
	for i := 0; i < readers; i += chunk {
		for j := i; j < i+chunk; j++ {
			publishCommand(t, nc, s.cfg.SubjectPrefix, protocol.Command{Op: protocol.OpLeave, Room: room, User: "u-reader", Conn: fmt.Sprintf("gw-r:%d", j), Seq: 1})
		}
		want := int64(i + chunk)
		testkit.WaitForWhy(t, 10*time.Second, fmt.Sprintf("%d reader leaves applied", want), func() (bool, string) {
			_, err := s.rdb.ZScore(ctx, gone, fmt.Sprintf("gw-r:%d", want-1)).Result()
			return err == nil, fmt.Sprint(err)
		})
	}
	if n, _ := s.rdb.ZCard(ctx, gone).Result(); n > 10000 {
		t.Fatalf("%d tombstones in the room, past the cap of 10000", n)
	}

	// The typist's start, delayed past its disconnect (sent well within ttl).
	publishCommand(t, nc, s.cfg.SubjectPrefix, start)
	if f, ok := w.tryNext(isStart(room, typist), 500*time.Millisecond); ok {
		t.Fatalf("the typist's start delayed past its disconnect showed them again after %d readers left the room: %v", readers, f)
	}
}
