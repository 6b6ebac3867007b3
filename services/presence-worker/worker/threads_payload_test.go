package worker

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// longThread is the i-th of the longest thread ids the protocol admits,
// made of '<' (six bytes each in Go's JSON), sorted by i.
func longThread(i int) string {
	p := fmt.Sprintf("t%03d-", i)
	return p + strings.Repeat("<", protocol.MaxIDBytes-len(p))
}

// A room whose threads' entries alone (thread and total, without their
// lists) do not fit the NATS server's max_payload is still answered, with
// the room's total and as many threads as fit, never with an error
// (docs/protocol.md, "Snapshots: cap and total": no snapshot ever fails
// for being large). 13 users typing in 5 threads each with ids of 256 '<'
// make 65 threads of about 1.6 KB each, over a 64 KiB max_payload: the
// reply was "internal".
func TestSnapshotReplyWithThreadsOverMaxPayload(t *testing.T) {
	const maxPayload = 64 << 10
	url := startSmallNATS(t, maxPayload)
	e := newEnv(t, storetest.Backends[0], func(c *config.Config) {
		c.NATSURL = url
		c.TypingTTL = 10 * time.Minute // the room must outlive its filling, however slow
		c.TypingThrottle = 2 * time.Second
		c.TypingRefresh = 4 * time.Second
		c.TypingIdleStop = 3 * time.Second
	})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	e.startWorker()
	const users, perUser = 13, 5
	before := e.processed()
	send := func(c protocol.Command) {
		c.V = protocol.Version
		b, _ := json.Marshal(c)
		if err := nc.Publish(e.names.CommandSubject(), b); err != nil {
			t.Fatal(err)
		}
	}
	send(protocol.Command{Op: protocol.OpStart, Room: "big", User: "alice", Name: "Alice", Conn: "c-alice", Seq: 1})
	for u := range users {
		for k := range perUser {
			send(protocol.Command{Op: protocol.OpStart, Room: "big", Thread: longThread(u*perUser + k), User: fmt.Sprintf("u%02d", u), Conn: fmt.Sprintf("c%02d", u), Seq: uint64(k + 1)})
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	e.eventually("starts processed", func() bool { return e.processed() >= before+1+users*perUser })
	if n := e.metric("ellipsis_worker_commands_total", map[string]string{"outcome": "started"}); n != 1+users*perUser {
		t.Fatalf("%v starts started, want %d", n, 1+users*perUser)
	}

	req, _ := json.Marshal(protocol.SnapshotRequest{V: 1, Room: "big"})
	msg, err := nc.Request(e.names.SnapshotSubject(), req, waitLong)
	if err != nil {
		t.Fatalf("snapshot request: %v", err)
	}
	r, err := protocol.DecodeSnapshotReply(msg.Data)
	if err != nil {
		t.Fatalf("snapshot reply %.300s: %v", msg.Data, err)
	}
	if r.Error != nil {
		t.Fatalf("snapshot reply is an error: %+v", r.Error)
	}
	if len(msg.Data) > maxPayload || r.Total != 1 || len(r.Users) != 1 || r.Users[0].User != "alice" {
		t.Fatalf("reply of %d bytes, total %d, users %+v", len(msg.Data), r.Total, r.Users)
	}
	if len(r.Threads) == 0 || len(r.Threads) >= users*perUser {
		t.Fatalf("%d threads listed, want some but not all %d", len(r.Threads), users*perUser)
	}
	for i, th := range r.Threads {
		if th.Thread != longThread(i) || th.Total != 1 || len(th.Users) != 0 {
			t.Fatalf("thread %d: %q total %d, %d listed (want the first threads in order, bare)", i, th.Thread[:5], th.Total, len(th.Users))
		}
	}
	t.Logf("%d of %d threads in %d bytes", len(r.Threads), users*perUser, len(msg.Data))
}
