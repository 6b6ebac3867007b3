package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

type member struct {
	user string
	mu   sync.Mutex
	got  []string
	full bool
}

func (m *member) User() string { return m.user }
func (m *member) Send(f []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full {
		return false
	}
	m.got = append(m.got, string(f))
	return true
}
func (m *member) frames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.got...)
}

// testRedis publishes and lists channels in one Pub/Sub mode.
type testRedis struct {
	*redis.Client
	sharded bool
}

// Publish is PUBLISH, or SPUBLISH when sharded.
func (r testRedis) Publish(ctx context.Context, channel string, msg any) *redis.IntCmd {
	if r.sharded {
		return r.Client.SPublish(ctx, channel, msg)
	}
	return r.Client.Publish(ctx, channel, msg)
}

// PubSubChannels is PUBSUB CHANNELS, or PUBSUB SHARDCHANNELS when sharded.
func (r testRedis) PubSubChannels(ctx context.Context, pattern string) *redis.StringSliceCmd {
	if r.sharded {
		return r.Client.PubSubShardChannels(ctx, pattern)
	}
	return r.Client.PubSubChannels(ctx, pattern)
}

// forEachMode runs f once with classic and once with sharded Pub/Sub
// (Redis 7 has SPUBLISH/SSUBSCRIBE outside Cluster too).
func forEachMode(t *testing.T, f func(t *testing.T, sharded bool)) {
	for _, sharded := range []bool{false, true} {
		name := "classic"
		if sharded {
			name = "sharded"
		}
		t.Run(name, func(t *testing.T) { f(t, sharded) })
	}
}

func newHub(t *testing.T, pending int, sharded bool) (*Hub, testRedis, names.Names) {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	n := names.New("hubt"+hex.EncodeToString(b)+":", "")
	url := os.Getenv("ELLIPSIS_TEST_REDIS_URL") // make test starts a private Redis
	if url == "" {
		url = "redis://127.0.0.1:6379"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{Redis: rdb, Sharded: sharded, Names: n, Metrics: met, PendingLimit: pending,
		Snapshot: func(context.Context, string) (protocol.Snapshot, error) { return protocol.Snapshot{}, nil }})
	h.Start()
	t.Cleanup(h.Close)
	return h, testRedis{rdb, sharded}, n
}

func event(user string, i int) string {
	return string(protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: user, TTLMs: 5000})) + strconv.Itoa(i) + "}"
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatalf("timed out: %s", what)
}

func TestHoldBuffersAndOverflows(t *testing.T) { forEachMode(t, testHoldBuffersAndOverflows) }

func testHoldBuffersAndOverflows(t *testing.T, sharded bool) {
	h, rdb, n := newHub(t, 2, sharded)
	ctx := context.Background()
	m := &member{user: "alice"}
	hd, err := h.Join(ctx, "r", m)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		rdb.Publish(ctx, n.RoomChannel("r"), event("bob", i))
	}
	rdb.Publish(ctx, n.RoomChannel("r"), event("alice", 9)) // self: never delivered
	// Once a later member sees a later event, the events above have passed
	// the fan-out.
	s := &member{user: "sentinel"}
	shd, _ := h.Join(ctx, "r", s)
	h.Release(shd, nil, "")
	rdb.Publish(ctx, n.RoomChannel("r"), event("bob", 4))
	waitFor(t, "the sentinel's event", func() bool {
		f := s.frames()
		return len(f) > 0 && f[len(f)-1] == event("bob", 4)
	})

	if !h.Release(hd, []byte("snapshot"), protocol.TypeJoined) {
		t.Fatal("overflow not reported")
	}
	got := m.frames()
	want := []string{"snapshot", event("bob", 1), event("bob", 2)}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	// Released: events flow directly again.
	rdb.Publish(ctx, n.RoomChannel("r"), event("bob", 5))
	waitFor(t, "a live event", func() bool { return len(m.frames()) == 4 })
}

func TestConcurrentJoinLeaveSubscriptions(t *testing.T) {
	forEachMode(t, testConcurrentJoinLeaveSubscriptions)
}

func testConcurrentJoinLeaveSubscriptions(t *testing.T, sharded bool) {
	h, rdb, n := newHub(t, 0, sharded)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &member{user: "u" + strconv.Itoa(i)}
			for j := 0; j < 5; j++ {
				hd, err := h.Join(ctx, "r", m)
				if err != nil {
					t.Error(err)
					return
				}
				h.Release(hd, nil, "")
				h.Leave("r", m)
			}
		}()
	}
	wg.Wait()
	if got := h.Members("r"); got != 0 {
		t.Fatalf("members %d", got)
	}
	waitFor(t, "no subscription left", func() bool {
		chs, _ := rdb.PubSubChannels(ctx, n.KeyPrefix()+"*").Result()
		return len(chs) == 0
	})
	// And a final join subscribes again.
	m := &member{user: "last"}
	hd, err := h.Join(ctx, "r", m)
	if err != nil {
		t.Fatal(err)
	}
	h.Release(hd, nil, "")
	chs, _ := rdb.PubSubChannels(ctx, n.KeyPrefix()+"*").Result()
	if len(chs) != 1 || chs[0] != n.RoomChannel("r") {
		t.Fatalf("channels %v", chs)
	}
}
