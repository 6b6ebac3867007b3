// Package testkit is what the tests of every Ellipsis module share, so that
// no module's tests depend on another's: the Redis and NATS the tests run
// against (ELLIPSIS_TEST_REDIS_URL and ELLIPSIS_TEST_NATS_URL, which
// scripts/testenv.sh and `make test` set to private servers), private
// redis-server and nats-server processes that a test may kill and restart,
// polling waits, random ids, a log buffer safe for concurrent writers, and
// JWKS fixtures (keys, JWK sets, signed JWTs).
//
// It imports no Ellipsis package, so any package's internal tests can use
// it. The whole stack in one process (workers and gateways) is its own
// module, testkit/inproc; spare loopback ports for servers told their port
// before they start are package testkit/ports.
package testkit
