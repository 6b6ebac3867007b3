// Package ports hands out loopback TCP addresses for test servers that must
// be told their port before they start: service processes, redis-server,
// nats-server, Sentinels.
//
// Listening on 127.0.0.1:0 and closing again is the usual way to find a free
// port, but the kernel takes such ports from its ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default), the same range it
// gives every outgoing connection as its local port. On a busy test machine a
// client's dial can take the port in the moment between the probe and the
// server's bind, and the server fails with "address already in use". Ports
// below the ephemeral range are never given to outgoing connections, so
// Spare picks from there (and below Kubernetes' NodePort range).
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the lowest port Spare hands out: below it sit well-known
// services (Redis 6379, NATS 4222 and 8222, Prometheus 9090).
const lowest = 10000

// highest bounds the ports Spare hands out from above, besides the
// ephemeral range: Kubernetes NodePorts (30000-32767) can be redirected by
// kube-proxy on a node without any socket bound, which a probe cannot see.
const highest = 30000

// minRange is the smallest span below the ephemeral range worth choosing
// from; with less, Spare falls back to a kernel-chosen port.
const minRange = 1000

// probes bounds the random tries of one Spare call.
const probes = 200

var (
	mu     sync.Mutex
	handed = map[int]bool{} // ports this process handed out already
)

// Spare returns "127.0.0.1:P" for a port P that was free a moment ago, never
// handed out before by this process, chosen at random in [10000, the low end
// of the ephemeral range or 30000, whichever is lower). When that span is smaller than 1,000 ports or
// every probe fails, it returns a kernel-chosen port instead. It fails the
// test only when no loopback port can be listened on at all.
func Spare(t interface {
	Helper()
	Fatalf(string, ...any)
}) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if hi := top(); hi-lowest >= minRange {
		for range probes {
			p := lowest + rand.IntN(hi-lowest)
			if handed[p] {
				continue
			}
			if ok(p) {
				handed[p] = true
				return addr(p)
			}
		}
	}
	for range probes {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("ports: listen on 127.0.0.1:0 to find a spare port: %v", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handed[p] {
			handed[p] = true
			return addr(p)
		}
	}
	t.Fatalf("ports: no spare loopback port after %d probes", 2*probes)
	return ""
}

func addr(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }

func ok(p int) bool {
	l, err := net.Listen("tcp", addr(p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralLow reads the low end of the kernel's ephemeral port range; 0
// when it cannot (not Linux), which makes Spare use kernel-chosen ports.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n > 65535 {
		return 0
	}
	return n
}

// top is the end (exclusive) of the range Spare chooses from.
func top() int { return min(ephemeralLow(), highest) }

// String describes the range Spare chooses from, for test logs.
func String() string {
	hi := top()
	if hi-lowest < minRange {
		return "kernel-chosen ports (no room below the ephemeral range)"
	}
	return fmt.Sprintf("ports %d-%d (below the ephemeral range)", lowest, hi-1)
}
