package backend

import (
	"context"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/faultproxy"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// A NATS that stops reading (a silent partition: connection open, nothing
// forwarded) while the gateway keeps publishing: once the socket buffers
// are full, nats.go's writes block while holding its connection lock,
// which every publish, snapshot request and Connected check waits on.
// Connected (/readyz, every join and typing frame) must still answer
// within a second, and a Publish must return within a few seconds
// instead of nats.go's default one-minute write timeout.
func TestFrozenNATSNeverBlocksStatusOrPublishLong(t *testing.T) {
	u, err := url.Parse(testkit.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	px, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	n := names.New("", "presencefrozen"+strings.ReplaceAll(time.Now().Format("150405.000000"), ".", ""))
	c, err := Connect([]string{"nats://" + px.Addr()}, natsconn.Auth{}, n, time.Second, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		px.Freeze(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	for end := time.Now().Add(5 * time.Second); !c.Connected(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("not connected")
		}
	}
	px.Freeze(true)
	big := strings.Repeat("x", 60<<10)
	var slowest atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // publishes 60 KiB commands until the test ends
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			_ = c.Publish(&protocol.Command{V: protocol.Version, Op: protocol.OpStart, Room: "r", User: "u", Name: big, Conn: "c", Seq: 1})
			if d := int64(time.Since(start)); d > slowest.Load() {
				slowest.Store(d)
			}
		}
	}()
	defer func() { close(stop); px.Freeze(false); <-done }()
	// Probe Connected for 8 s: every answer within a second.
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		ch := make(chan struct{})
		go func() { c.Connected(); c.Status(); close(ch) }()
		select {
		case <-ch:
		case <-time.After(time.Second):
			t.Fatalf("Connected/Status blocked for more than a second with NATS frozen (slowest Publish so far %v)", time.Duration(slowest.Load()))
		}
	}
	if d := time.Duration(slowest.Load()); d > 5*time.Second {
		t.Fatalf("a Publish took %v with NATS frozen", d)
	}
}
