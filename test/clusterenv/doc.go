// Package clusterenv starts real clustered backends on this machine for
// tests and benchmarks: a Redis Cluster of N masters (redis-server
// processes, cluster formed in Go with go-redis), to which replicas can be
// added for failover tests (AddReplica, WaitMaster), and a NATS cluster of
// N routed nats-server processes.
//
// Every server listens on 127.0.0.1 only, on spare ports chosen at start
// (never the machine's shared Redis on 6379 or NATS on 4222), runs in its
// own process group, keeps its files in the test's temporary directory and
// is killed with SIGKILL (to the whole process group) when the test ends.
// Start functions are safe to call from parallel tests: port collisions
// between concurrently starting servers are detected and retried.
//
// A missing server binary is a test failure (not a skip) whose message
// names the Debian package to install.
//
// Methods that take no testing.TB report failures through the testing.TB
// given to the Start function, with Fatalf, so they must be called from the
// goroutine running that test (or benchmark).
package clusterenv
