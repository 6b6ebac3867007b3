// Package faultproxy is a TCP proxy for tests that injects network faults
// between a client and a server on loopback: Freeze (connections stay
// open, nothing is forwarded: a paused server or a silent partition), Cut
// (every connection is reset), Slow (every chunk is delayed) and
// Blackhole (new connections are accepted and never forwarded, as a
// partition that drops SYN-ACKs would look to a dialer with a timeout).
//
// A test points the client at [Proxy.Addr] instead of the server.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards every accepted connection to a target address. Its
// methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	cond      *sync.Cond // signalled when frozen or delay changes
	frozen    bool
	blackhole bool
	delay     time.Duration
	conns     map[net.Conn]struct{} // both sides of every open pair
	closed    bool
	wg        sync.WaitGroup
}

// New listens on a spare loopback port and forwards to target
// ("host:port").
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address ("127.0.0.1:port").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops forwarding in both directions (on, true) or resumes it;
// connections stay open, and bytes read meanwhile are forwarded on resume.
func (p *Proxy) Freeze(on bool) {
	p.mu.Lock()
	p.frozen = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Slow delays every forwarded chunk by d (0: no delay).
func (p *Proxy) Slow(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Blackhole makes new connections hang (accepted, never connected to the
// target, never answered) while on; existing ones are not affected.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Cut resets every open connection (RST to the client, close to the
// server). New connections are still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close sends RST
		}
		_ = c.Close()
	}
	clear(p.conns)
}

// Conns is the number of open connection pairs.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Close stops listening, resets every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.frozen, p.blackhole = false, false
	p.cond.Broadcast()
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers c unless the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		return
	}
	p.mu.Lock()
	for p.blackhole && !p.closed {
		p.cond.Wait()
	}
	p.mu.Unlock()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.drop(client)
		return
	}
	if !p.track(server) {
		p.drop(client)
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client) }()
	go func() { defer wg.Done(); p.pipe(client, server) }()
	wg.Wait()
	p.drop(client)
	p.drop(server)
}

func (p *Proxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// pipe copies src to dst, honouring Freeze and Slow per chunk; it closes
// dst's write side (or dst) when src ends.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.frozen && !p.closed {
				p.cond.Wait()
			}
			delay := p.delay
			p.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			_ = dst.Close()
			return
		}
	}
}
