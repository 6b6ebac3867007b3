package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// bigTypists are n typists with ids of protocol.MaxIDBytes bytes and names
// of protocol.MaxNameBytes '<' (six bytes each in Go's JSON), sorted by
// user: the largest snapshot entries the protocol admits.
func bigTypists(n int) []protocol.Typist {
	out := make([]protocol.Typist, n)
	for i := range out {
		id := fmt.Sprintf("user-%06d-", i)
		out[i] = protocol.Typist{
			User: id + strings.Repeat("x", protocol.MaxIDBytes-len(id)),
			Name: strings.Repeat("<", protocol.MaxNameBytes),
		}
	}
	return out
}

// A reply never exceeds maxPayload, lists as many typists as fit (a
// prefix of the list), and keeps total; one that fits is not touched.
func TestEncodeSnapshotReplyFitsPayload(t *testing.T) {
	users := bigTypists(700)                         // 1.27 MB of JSON
	room := strings.Repeat("&", protocol.MaxIDBytes) // the longest room, escaped too
	for _, maxPayload := range []int{2000, 5000, 64 << 10, 1 << 20, 2 << 20} {
		snap := protocol.Snapshot{Users: users, Total: 3000}
		data, listed, err := encodeSnapshotReply(room, snap, maxPayload)
		if err != nil {
			t.Fatalf("max %d: %v", maxPayload, err)
		}
		if len(data) > maxPayload {
			t.Fatalf("max %d: reply of %d bytes", maxPayload, len(data))
		}
		r, err := protocol.DecodeSnapshotReply(data)
		if err != nil {
			t.Fatalf("max %d: %v", maxPayload, err)
		}
		if r.Total != 3000 || r.Room != room || len(r.Users) != listed || !slices.Equal(r.Users, users[:listed]) {
			t.Fatalf("max %d: total %d, %d listed (said %d), room ok %v", maxPayload, r.Total, len(r.Users), listed, r.Room == room)
		}
		if listed < len(users) {
			more, _ := json.Marshal(protocol.SnapshotReply{V: 1, Room: room, Users: users[:listed+1], Total: 3000})
			if len(more) <= maxPayload {
				t.Fatalf("max %d: %d listed, but %d fit (%d bytes)", maxPayload, listed, listed+1, len(more))
			}
		}
		t.Logf("max_payload %d: %d of %d typists listed, %d bytes", maxPayload, listed, len(users), len(data))
	}
	// Small enough already: the one encoding, all listed.
	data, listed, err := encodeSnapshotReply("r", protocol.Snapshot{Users: users[:2], Total: 7}, 1<<20)
	want, _ := json.Marshal(protocol.SnapshotReply{V: 1, Room: "r", Users: users[:2], Total: 7})
	if err != nil || listed != 2 || string(data) != string(want) {
		t.Fatalf("small reply: %d listed, %v, %s", listed, err, data)
	}
	// Empty: users stays [].
	if data, _, err := encodeSnapshotReply("r", protocol.Snapshot{}, 100); err != nil || string(data) != `{"v":1,"room":"r","users":[],"total":0}` {
		t.Fatalf("empty reply %s, %v", data, err)
	}
	// Not even the envelope fits: an error naming the limit.
	if _, _, err := encodeSnapshotReply(room, protocol.Snapshot{Users: users, Total: 3000}, 100); err == nil || !strings.Contains(err.Error(), "max_payload of 100 bytes") {
		t.Fatalf("100-byte max_payload: %v", err)
	}
}

// startSmallNATS runs a private nats-server whose max_payload is
// maxPayload bytes and returns its URL.
func startSmallNATS(t *testing.T, maxPayload int) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin = "/usr/sbin/nats-server" // Debian's package, not always in PATH
		if _, serr := os.Stat(bin); serr != nil {
			t.Fatalf("nats-server not found in PATH or %s (apt-get install nats-server): %v", bin, err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, []byte("max_payload: "+strconv.Itoa(maxPayload)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(waitLong)
	for {
		nc, err := nats.Connect(url, nats.Timeout(time.Second))
		if err == nil {
			got := nc.MaxPayload()
			nc.Close()
			if got != int64(maxPayload) {
				t.Fatalf("nats-server max_payload %d, want %d", got, maxPayload)
			}
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server on %s: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A room of 3000 typists with the largest ids and names full of '<' (5.4
// MB of JSON) is answered within a 64 KiB max_payload, with total 3000,
// whether the list is cut by ELLIPSIS_SNAPSHOT_MAX or by the payload.
func TestSnapshotReplyFitsServerMaxPayload(t *testing.T) {
	const (
		typing     = 3000
		maxPayload = 64 << 10
	)
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
	w := e.startWorker(func(c *config.Config) { c.SnapshotMax = 500 })

	users := bigTypists(typing)
	fillBigRoom(t, e, nc, users)

	r, size := askBigSnapshot(t, e, nc)
	if size > maxPayload || r.Total != typing || len(r.Users) == 0 || len(r.Users) >= typing || !sortedSubset(r.Users, users) {
		t.Fatalf("SNAPSHOT_MAX 500: %d bytes, total %d, %d listed (want <= %d bytes, total %d, a sorted subset)", size, r.Total, len(r.Users), maxPayload, typing)
	}
	t.Logf("3000 typists, max_payload %d: %d listed in %d bytes", maxPayload, len(r.Users), size)
	if n := e.metric("ellipsis_worker_snapshots_cut_total", map[string]string{"reason": "payload"}); n != 1 {
		t.Errorf("snapshots_cut_total{reason=payload} = %v, want 1", n)
	}

	// A cap that fits: exactly SNAPSHOT_MAX listed, total still 3000.
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	e.startWorker(func(c *config.Config) { c.SnapshotMax = 20 })
	r, size = askBigSnapshot(t, e, nc)
	if size > maxPayload || r.Total != typing || len(r.Users) != 20 || !sortedSubset(r.Users, users) {
		t.Fatalf("SNAPSHOT_MAX 20: %d bytes, total %d, %d listed", size, r.Total, len(r.Users))
	}
	if n := e.metric("ellipsis_worker_snapshots_cut_total", map[string]string{"reason": "max"}); n != 1 {
		t.Errorf("snapshots_cut_total{reason=max} = %v, want 1", n)
	}
}

// fillBigRoom starts every typist of users in room "big", in rounds of
// 500 starts, each processed before the next is sent (a burst of 3000
// would overflow the shards' queues: dispatch sheds starts). A first
// start reads the whole room in today's store, so on a loaded machine a
// pipeline of them may fail after its retries: the whole set is then sent
// again with the next seq (a visible user's start is a cheap throttled
// refresh), until a pass without errors.
func fillBigRoom(t *testing.T, e *env, nc *nats.Conn, users []protocol.Typist) {
	t.Helper()
	count := func(outcome string) float64 {
		if outcome == "" {
			return e.metric("ellipsis_worker_commands_total", nil)
		}
		return e.metric("ellipsis_worker_commands_total", map[string]string{"outcome": outcome})
	}
	deadline := time.Now().Add(3 * time.Minute)
	for seq := uint64(1); ; seq++ {
		errsBefore := count(store.OutcomeError.String())
		for from := 0; from < len(users); from += 500 {
			sent := count("")
			for i := from; i < from+500; i++ {
				b, _ := json.Marshal(start("big", users[i].User, users[i].Name, "c"+strconv.Itoa(i), seq))
				if err := nc.Publish(e.names.CommandSubject(), b); err != nil {
					t.Fatal(err)
				}
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			for count("") < sent+500 {
				if time.Now().After(deadline) {
					t.Fatalf("pass %d: %v of %v commands processed (shed %v, overflow %v, error %v)", seq, count(""), sent+500,
						count(OutcomeShed.String()), count(OutcomeOverflow.String()), count(store.OutcomeError.String()))
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		if count(OutcomeShed.String())+count(OutcomeOverflow.String()) != 0 {
			t.Fatalf("dispatch dropped %v starts", count(OutcomeShed.String())+count(OutcomeOverflow.String()))
		}
		if count(store.OutcomeError.String()) == errsBefore {
			break
		}
		t.Logf("pass %d: %v starts failed, sending again", seq, count(store.OutcomeError.String())-errsBefore)
	}
}

// askBigSnapshot requests the snapshot of room "big"; it returns the reply
// and its size in bytes.
func askBigSnapshot(t *testing.T, e *env, nc *nats.Conn) (protocol.SnapshotReply, int) {
	t.Helper()
	req, _ := json.Marshal(protocol.SnapshotRequest{V: 1, Room: "big"})
	msg, err := nc.Request(e.names.SnapshotSubject(), req, 10*time.Second)
	if err != nil {
		t.Fatalf("snapshot request: %v", err)
	}
	r, err := protocol.DecodeSnapshotReply(msg.Data)
	if err != nil {
		t.Fatalf("snapshot reply: %v", err)
	}
	return r, len(msg.Data)
}

// sortedSubset reports whether listed is sorted by user and every typist
// in it is one of all (the store lists the most recently active typists,
// sorted by user, not a prefix of the whole room).
func sortedSubset(listed, all []protocol.Typist) bool {
	known := make(map[protocol.Typist]bool, len(all))
	for _, u := range all {
		known[u] = true
	}
	for i, u := range listed {
		if !known[u] || (i > 0 && listed[i-1].User >= u.User) {
			return false
		}
	}
	return true
}

// A reply with threads that does not fit first loses the threads' lists
// (each keeps its thread and total), then cuts the room's list; every
// activity counts in the size.
func TestEncodeSnapshotReplyThreads(t *testing.T) {
	room := bigTypists(20)
	acts := map[string]string{room[0].User: protocol.ActivityRecordingVideo}
	snap := protocol.Snapshot{Users: room, Total: 20, Activities: acts,
		Threads: []protocol.ThreadSnapshot{{Thread: "t1", Users: bigTypists(30), Total: 31}}}
	full, n, err := encodeSnapshotReply("r", snap, 1<<20)
	if err != nil || n != 20 {
		t.Fatalf("full reply: %d listed, %v", n, err)
	}
	for _, max := range []int{len(full) - 1, len(full) / 2, len(full) / 5} {
		data, listed, err := encodeSnapshotReply("r", snap, max)
		if err != nil || len(data) > max {
			t.Fatalf("max %d: %d bytes, %v", max, len(data), err)
		}
		r, err := protocol.DecodeSnapshotReply(data)
		if err != nil || len(r.Threads) != 1 || r.Threads[0].Total != 31 || len(r.Threads[0].Users) != 0 || r.Total != 20 || len(r.Users) != listed {
			t.Fatalf("max %d: %s, %v", max, data, err)
		}
		if listed > 0 && r.Activities[room[0].User] != protocol.ActivityRecordingVideo {
			t.Fatalf("max %d: activity lost: %+v", max, r.Activities)
		}
		if max == len(full)-1 && listed != 20 {
			t.Fatalf("max %d: %d listed; dropping the threads' lists should have been enough", max, listed)
		}
	}
}
