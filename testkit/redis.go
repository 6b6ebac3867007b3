package testkit

import (
	"context"
	"testing"
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

// RedisOptions are go-redis options for [RedisURL]; a URL go-redis cannot
// parse fails the test.
func RedisOptions(tb testing.TB) *redis.Options {
	tb.Helper()
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		tb.Fatalf("ELLIPSIS_TEST_REDIS_URL: %v", err)
	}
	return opt
}
