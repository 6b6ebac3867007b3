package testkit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// CleanupKeys deletes every key under prefix (SCAN, never KEYS: the
// machine's Redis is shared by parallel tests), 500 keys a DEL, within 5 s.
func CleanupKeys(rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		rdb.Del(ctx, keys[:n]...)
		keys = keys[n:]
	}
}
