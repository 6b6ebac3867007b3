package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

func newNATS(t *testing.T, timeout time.Duration) (*NATS, *nats.Conn, names.Names) {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	n := names.New("", "presencetest"+hex.EncodeToString(b))
	var errs atomic.Int64
	c, err := Connect([]string{testkit.NATSURL()}, natsconn.Auth{}, n, timeout, zap.NewNop(), func(string) { errs.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	deadline := time.Now().Add(5 * time.Second)
	for !c.Connected() {
		if time.Now().After(deadline) {
			t.Fatalf("not connected to NATS at %s", testkit.NATSURL())
		}
		time.Sleep(10 * time.Millisecond)
	}
	nc, err := nats.Connect(testkit.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return c, nc, n
}

// Each way a snapshot can fail says why, in words for clients.
func TestSnapshotErrorsSayWhy(t *testing.T) {
	t.Parallel()
	c, nc, n := newNATS(t, 400*time.Millisecond)
	ctx := context.Background()

	_, err := c.Snapshot(ctx, "r")
	if !errors.Is(err, ErrUnavailable) || Reason(err) != "no presence worker is running" {
		t.Fatalf("no worker: %v (reason %q)", err, Reason(err))
	}

	// A worker that takes the request and never answers (hung).
	sub, err := nc.QueueSubscribe(n.SnapshotSubject(), "presence-worker", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	began := time.Now()
	_, err = c.Snapshot(ctx, "r")
	took := time.Since(began)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(Reason(err), "timed out") || !strings.Contains(Reason(err), "400ms") {
		t.Fatalf("hung worker: %v (reason %q)", err, Reason(err))
	}
	if took < 350*time.Millisecond || took > time.Second {
		t.Fatalf("hung worker: failed after %v, want the 400ms timeout", took)
	}
	_ = sub.Unsubscribe()

	// A worker's error reply is passed on.
	sub, _ = nc.QueueSubscribe(n.SnapshotSubject(), "presence-worker", func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"v":1,"error":{"code":"unavailable","message":"typing state unavailable, retry"}}`))
	})
	_ = nc.Flush()
	_, err = c.Snapshot(ctx, "r")
	if Reason(err) != "presence worker: typing state unavailable, retry" {
		t.Fatalf("worker error: %v (reason %q)", err, Reason(err))
	}
	_ = sub.Unsubscribe()
	if Reason(nil) != "" {
		t.Fatal("Reason(nil) is not empty")
	}
}

// A request lost by one worker (the queue group routed it to a worker that
// had just died) is asked again within the same timeout.
func TestSnapshotRetriesALostRequest(t *testing.T) {
	t.Parallel()
	c, nc, n := newNATS(t, time.Second)
	var seen atomic.Int64
	if _, err := nc.QueueSubscribe(n.SnapshotSubject(), "presence-worker", func(m *nats.Msg) {
		if seen.Add(1) == 1 {
			return // lost, as in a worker killed with the request in flight
		}
		_ = m.Respond([]byte(`{"v":1,"room":"r","users":[{"user":"alice"}]}`))
	}); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	began := time.Now()
	users, err := c.Snapshot(context.Background(), "r")
	took := time.Since(began)
	if err != nil || len(users.Users) != 1 || users.Users[0].User != "alice" || users.Total != 1 {
		t.Fatalf("snapshot after a lost request: %v %v", users, err)
	}
	if took < 400*time.Millisecond || took > 900*time.Millisecond {
		t.Fatalf("retried after %v, want about half the 1s timeout", took)
	}
	if seen.Load() != 2 {
		t.Fatalf("%d requests, want 2", seen.Load())
	}
}

// While NATS is unreachable, publishes and requests fail at once with
// "NATS not connected" (nothing is buffered for later).
func TestNotConnectedFailsAtOnce(t *testing.T) {
	t.Parallel()
	n := names.New("", "presencetest-down")
	c, err := Connect([]string{"nats://127.0.0.1:1"}, natsconn.Auth{}, n, time.Second, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	began := time.Now()
	if err := c.Publish(nil); Reason(err) != "NATS not connected" {
		t.Fatalf("publish: %v", err)
	}
	if _, err := c.Snapshot(context.Background(), "r"); Reason(err) != "NATS not connected" {
		t.Fatalf("snapshot: %v", err)
	}
	if d := time.Since(began); d > 100*time.Millisecond {
		t.Fatalf("failing took %v", d)
	}
}
