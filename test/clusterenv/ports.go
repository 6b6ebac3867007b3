package clusterenv

import (
	"fmt"
	"net"
)

// maxPortAttempts bounds the listen probes of one reservePorts call.
const maxPortAttempts = 1000

// reservePorts returns n distinct TCP ports that were free on 127.0.0.1 at
// the time of the call, each obtained by listening on 127.0.0.1:0.
//
// When busOffset > 0, every returned port p also satisfies
// p+busOffset <= 65535 with p+busOffset free as well (Redis Cluster's bus
// listens on port+10000), and no returned port equals another one's bus
// port. All probe listeners are held until the set is complete, so the
// ports are distinct, then closed: another process may still take a port
// before the server binds it, which callers detect (the server exits or is
// not the one answering) and retry with fresh ports.
//
// The error reports that no such set was found within maxPortAttempts probes.
func reservePorts(n, busOffset int) ([]int, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for attempt := 0; len(ports) < n; attempt++ {
		if attempt >= maxPortAttempts {
			return nil, fmt.Errorf("reserve %d loopback ports (bus offset %d): only %d found after %d probes",
				n, busOffset, len(ports), maxPortAttempts)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("listen on 127.0.0.1:0 to find a spare port: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		if busOffset == 0 {
			held = append(held, l)
			ports = append(ports, p)
			continue
		}
		if p+busOffset > 65535 {
			l.Close()
			continue
		}
		bl, err := net.Listen("tcp", addr(p+busOffset))
		if err != nil {
			l.Close()
			continue
		}
		held = append(held, l, bl)
		ports = append(ports, p)
	}
	return ports, nil
}
