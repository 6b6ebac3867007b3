package ports

import (
	"net"
	"strconv"
	"testing"
)

// Spare hands out distinct loopback ports that can be listened on, below
// the ephemeral range when the machine leaves room there.
func TestSpareDistinctAndListenable(t *testing.T) {
	seen := map[string]bool{}
	low := top()
	for range 50 {
		a := Spare(t)
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
		_, ps, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(ps)
		if low-lowest >= minRange && (p < lowest || p >= low) {
			t.Fatalf("%s outside %s", a, String())
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("listen on spare %s: %v", a, err)
		}
		l.Close()
	}
}
