package testkit

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// The machine's Redis and NATS when the test environment names none.
const (
	DefaultRedisURL = "redis://127.0.0.1:6379"
	DefaultNATSURL  = "nats://127.0.0.1:4222"
)

// EnvOr returns the environment variable k, or def when it is unset or
// empty.
func EnvOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// RedisURL is the Redis the tests run against: ELLIPSIS_TEST_REDIS_URL, else
// [DefaultRedisURL].
func RedisURL() string { return EnvOr("ELLIPSIS_TEST_REDIS_URL", DefaultRedisURL) }

// NATSURL is the NATS the tests run against: ELLIPSIS_TEST_NATS_URL, else
// [DefaultNATSURL].
func NATSURL() string { return EnvOr("ELLIPSIS_TEST_NATS_URL", DefaultNATSURL) }

// RequireReachable fails the test (never skips it: a skipped contract test
// would read as a pass) when the host of one of the URLs does not accept a
// TCP connection within a second.
func RequireReachable(tb testing.TB, urls ...string) {
	tb.Helper()
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil {
			tb.Fatalf("test service URL %q: %v", u, err)
		}
		c, err := net.DialTimeout("tcp", p.Host, time.Second)
		if err != nil {
			tb.Fatalf("%s is required and not reachable (%v): `make test` and scripts/testenv.sh start private Redis and NATS servers and set ELLIPSIS_TEST_REDIS_URL / ELLIPSIS_TEST_NATS_URL", u, err)
		}
		c.Close()
	}
}

// ClosedAddr returns a 127.0.0.1 address nothing listens on (a moment
// ago): a backend that refuses connections.
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
