package integration

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// subscriberIDs lists the ids of the connections of Redis at addr that
// hold (classic or sharded) subscriptions, sorted: the gateway's Pub/Sub
// links (the workers subscribe nothing).
func subscriberIDs(t *testing.T, addr string) []string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer c.Close()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		var id string
		subs := false
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			switch {
			case k == "id":
				id = v
			case (k == "sub" || k == "ssub") && v != "0":
				subs = true
			}
		}
		if subs {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// An idle Pub/Sub link, through the whole gateway with its own Redis client
// settings and the default health PINGs: 50 joined rooms, 60 idle
// seconds, and the gateway's Pub/Sub connection is the same one at the
// end (CLIENT LIST ids on a private Redis): it was never redialed.
// Skipped with -short.
func TestGatewayIdleLinkNeverRedialed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: watches an idle link for 60 s; make test runs it (no -short)")
	}
	t.Parallel()
	r := testkit.StartRedis(t, "")
	s := newStack(t, 1, 1, func(c *config.Config) { c.RedisURL = r.URL() })
	for i := 0; i < 5; i++ { // 10 rooms per connection: under the inbound burst
		u := "idle" + strconv.Itoa(i)
		c := dial(t, s.wsURL(0, u, ""), u)
		for j := 0; j < 10; j++ {
			c.join("idle:" + strconv.Itoa(i*10+j))
		}
	}
	before := subscriberIDs(t, r.Addr())
	if len(before) == 0 {
		t.Fatal("no subscribed connection in CLIENT LIST")
	}
	time.Sleep(60 * time.Second)
	if after := subscriberIDs(t, r.Addr()); !slices.Equal(after, before) {
		t.Fatalf("the gateway's Pub/Sub connections went from ids %v to %v over 60 idle seconds: redialed", before, after)
	}
	waitReadyz(t, s.gateways[0].AdminAddr(), 200, 5*time.Second)
}
