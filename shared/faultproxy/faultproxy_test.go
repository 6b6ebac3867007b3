package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer echoes every line back.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c, bufio.NewReader(c)}
}

// echo sends line and reads the reply within d; ok false on timeout/error.
func (c *client) echo(line string, d time.Duration) (string, error) {
	_ = c.c.SetDeadline(time.Now().Add(d))
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := c.r.ReadString('\n')
	return got, err
}

func TestForwards(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	if got, err := c.echo("hello", 2*time.Second); err != nil || got != "hello\n" {
		t.Fatalf("got %q, %v", got, err)
	}
	if p.Conns() != 1 {
		t.Fatalf("conns %d", p.Conns())
	}
}

func TestFreezeKeepsConnectionsAndForwardsNothing(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	if _, err := c.echo("a", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Freeze(true)
	if got, err := c.echo("b", 300*time.Millisecond); err == nil {
		t.Fatalf("frozen proxy forwarded %q", got)
	}
	if p.Conns() != 1 {
		t.Fatalf("freeze dropped the connection: conns %d", p.Conns())
	}
	p.Freeze(false)
	_ = c.c.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := c.r.ReadString('\n'); err != nil || got != "b\n" {
		t.Fatalf("after thaw: %q, %v", got, err)
	}
}

func TestCutResets(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	if _, err := c.echo("a", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if _, err := c.echo("b", 2*time.Second); err == nil {
		t.Fatal("cut connection still echoes")
	}
	c2 := dial(t, p)
	if got, err := c2.echo("c", 2*time.Second); err != nil || got != "c\n" {
		t.Fatalf("new connection after cut: %q, %v", got, err)
	}
}

func TestSlowDelays(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	p.Slow(150 * time.Millisecond)
	start := time.Now()
	if _, err := c.echo("a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Two hops (there and back), each delayed.
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("slowed echo took %v, want >= 300ms", took)
	}
}

func TestBlackholeHangsNewConnections(t *testing.T) {
	p := newProxy(t)
	old := dial(t, p)
	if _, err := old.echo("a", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	c := dial(t, p) // accepted by the kernel
	if got, err := c.echo("b", 300*time.Millisecond); err == nil {
		t.Fatalf("blackholed connection answered %q", got)
	}
	if _, err := old.echo("c", 2*time.Second); err != nil {
		t.Fatalf("existing connection affected: %v", err)
	}
	p.Blackhole(false)
	_ = c.c.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := c.r.ReadString('\n'); err != nil || got != "b\n" {
		t.Fatalf("after blackhole: %q, %v", got, err)
	}
}
