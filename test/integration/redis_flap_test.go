package integration

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/shared/faultproxy"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Joins and leaves under a flapping Redis path (frozen and thawed
// every 300 ms, frozen 1.2 s now and then, reset now and then) while clients join and leave rooms
// with typists in them: no frame of a room reaches a client outside its
// membership (before its joined, or after its left), every join is
// answered, and once the path is healthy the gateway subscribes exactly
// the rooms that still have members (PUBSUB CHANNELS and SHARDCHANNELS on
// the private Redis).
func TestRedisFlappingKeepsRoomsConsistent(t *testing.T) {
	t.Parallel()
	s, px, pr := faultStack(t)
	rooms := []string{"flap:a", "flap:b", "flap:c"}
	for i, room := range rooms[:2] { // typists stay in a and b
		u := "typist" + strconv.Itoa(i)
		c := dial(t, s.wsURL(0, u, ""), u)
		c.join(room)
		stop := keepTyping(c, room, testRefresh/4)
		defer stop()
	}
	stopFlapping := startFlapping(px)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			churnRooms(t, s, rooms, w)
		}()
	}
	wg.Wait()
	stopFlapping()
	waitReadyz(t, s.gateways[0].AdminAddr(), 200, 15*time.Second)

	waitSubscribedExactly(t, s, pr, "flap:a", "flap:b")
}

// startFlapping flaps px: frozen and thawed every 300 ms, frozen 1.2 s
// now and then, reset now and then, until the returned stop, which thaws
// the path and returns once the flapping has ended.
func startFlapping(px *faultproxy.Proxy) (stop func()) {
	stopFlap := make(chan struct{})
	flapDone := make(chan struct{})
	go func() {
		defer close(flapDone)
		for i := 0; ; i++ {
			px.Freeze(i%2 == 1)
			if i%9 == 8 {
				px.Cut()
			}
			d := 300 * time.Millisecond
			if i%10 == 5 {
				d = 1200 * time.Millisecond // longer than the health PING timeout: a redial
			}
			select {
			case <-stopFlap:
				px.Freeze(false)
				return
			case <-time.After(d):
			}
		}
	}()
	return func() { close(stopFlap); <-flapDone }
}

// churnRooms is churning client w: 12 times it joins one of rooms, then
// leaves it. Every join and leave must be answered; no frame of a room may
// reach it outside its membership (before its joined, or after its left).
func churnRooms(t *testing.T, s *stack, rooms []string, w int) {
	t.Helper()
	u := "churn" + strconv.Itoa(w)
	c := dial(t, s.wsURL(0, u, ""), u)
	var log []frame
	var joined, unavailable, pushed int
	await := func(id string) frame {
		deadline := time.After(s.cfg.SnapshotTimeout + 3*time.Second)
		for {
			select {
			case f := <-c.frames:
				log = append(log, f)
				if f.ID == id {
					return f
				}
			case <-deadline:
				t.Errorf("%s: no answer to %s", u, id)
				return frame{}
			}
		}
	}
	for j := 0; j < 12; j++ {
		room := rooms[(w+j)%len(rooms)]
		id := "j" + strconv.Itoa(j)
		c.send(map[string]any{"type": "join", "room": room, "id": id})
		switch f := await(id); {
		case f.Type == "joined":
			joined++
		case f.Code == "unavailable":
			unavailable++
		default:
			t.Errorf("%s: join answered %v", u, f)
		}
		time.Sleep(150 * time.Millisecond)
		id = "l" + strconv.Itoa(j)
		c.send(map[string]any{"type": "leave", "room": room, "id": id})
		await(id)
		time.Sleep(100 * time.Millisecond)
	}
	log = append(log, c.drain(500*time.Millisecond)...)
	in := map[string]bool{}
	defer func() {
		t.Logf("%s: %d joins answered joined, %d unavailable; %d pushed snapshots", u, joined, unavailable, pushed)
	}()
	for k, f := range log {
		switch f.Type {
		case "joined":
			in[f.Room] = true
		case "left":
			in[f.Room] = false
		case "typing", "typing_start", "typing_stop":
			if f.Type == "typing" && f.ID == "" {
				pushed++
			}
			if !in[f.Room] {
				t.Errorf("%s: frame %d %v of room %s outside its membership", u, k, f, f.Room)
			}
		}
	}
}

// waitSubscribedExactly waits (10 s) until the gateway subscribes exactly
// the channels of rooms (PUBSUB CHANNELS and SHARDCHANNELS on the private
// Redis pr).
func waitSubscribedExactly(t *testing.T, s *stack, pr testkit.RedisServer, rooms ...string) {
	t.Helper()
	n := names.New(s.cfg.KeyPrefix, s.cfg.SubjectPrefix)
	var want []string
	for _, room := range rooms {
		want = append(want, n.RoomChannel(room))
	}
	slices.Sort(want)
	direct := redis.NewClient(&redis.Options{Addr: pr.Addr()})
	defer direct.Close()
	ctx := context.Background()
	var got []string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		classic, _ := direct.PubSubChannels(ctx, s.cfg.KeyPrefix+"*").Result()
		sharded, _ := direct.PubSubShardChannels(ctx, s.cfg.KeyPrefix+"*").Result()
		got = append(classic, sharded...)
		slices.Sort(got)
		if slices.Equal(got, want) {
			return
		}
	}
	t.Fatalf("after the flapping Redis subscribes %v, want the rooms with members %v", got, want)
}
