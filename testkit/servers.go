//go:build unix

package testkit

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/testkit/ports"
)

// Private Redis and NATS servers, for tests that take a backend down (an
// outage, a restart, a frozen process) or need one of their own (DEBUG
// POPULATE). They run on spare loopback ports, never on the machine's
// shared instances, and are killed (process group) when the test ends. A
// missing binary fails the test with how to install it.

// FindBinary returns the path of a server binary: name in PATH, else the
// first of fallbacks that exists. Neither fails the test.
func FindBinary(tb testing.TB, name string, fallbacks ...string) string {
	tb.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range fallbacks {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	tb.Fatalf("%s not found in PATH or %v: the test needs it (apt-get install %s)", name, fallbacks, name)
	return ""
}

// Server is one private server process on a fixed loopback address, which
// the test can kill, stop and start again on the same port.
type Server struct {
	tb    testing.TB
	name  string
	bin   string
	args  []string
	addr  string // 127.0.0.1:port
	ready func() bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  SyncBuffer
}

// Addr is the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return s.addr }

// Port is the server's port.
func (s *Server) Port() string { _, p, _ := net.SplitHostPort(s.addr); return p }

// Output is what the server wrote to stdout and stderr so far (all runs).
func (s *Server) Output() string { return s.out.String() }

// Restart starts the server (again) on its port and waits until it answers
// (10 s at most; an exit or a timeout fails the test with its output).
func (s *Server) Restart() {
	s.tb.Helper()
	s.mu.Lock()
	cmd := exec.Command(s.bin, s.args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Stdout, cmd.Stderr = &s.out, &s.out
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.tb.Fatalf("%s: start %s: %v", s.name, s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for !s.ready() {
		select {
		case <-done:
			s.tb.Fatalf("%s exited at start:\n%s", s.name, s.out.String())
		default:
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("%s not ready on %s within 10s:\n%s", s.name, s.addr, s.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Signal sends sig to the server's process group (SIGSTOP freezes it,
// SIGCONT thaws it).
func (s *Server) Signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, sig)
	}
}

// Kill SIGKILLs the server (an outage) and waits until it is gone (10 s at
// most). Killing a server that is not running does nothing.
func (s *Server) Kill() {
	s.tb.Helper()
	s.Signal(syscall.SIGCONT) // in case it was stopped
	s.Signal(syscall.SIGKILL)
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.tb.Fatalf("%s did not die", s.name)
	}
}

// Name is the server's name in failure messages, e.g. "redis-server:10042".
func (s *Server) Name() string { return s.name }

// StartServer starts bin with args as the private server name on addr
// (127.0.0.1:port), waits until ready reports true (see [Server.Restart]),
// and kills it when the test ends.
func StartServer(tb testing.TB, name, bin, addr string, args []string, ready func() bool) *Server {
	tb.Helper()
	return startServer(tb, &Server{tb: tb, name: name, bin: bin, args: args, addr: addr, ready: ready})
}

func startServer(tb testing.TB, s *Server) *Server {
	tb.Helper()
	tb.Cleanup(s.Kill)
	s.Restart()
	return s
}

// RedisServer is a private redis-server.
type RedisServer struct{ *Server }

// URL is the server's redis:// URL.
func (r RedisServer) URL() string { return "redis://" + r.addr }

// StartRedis starts the redis-server binary bin ("" finds redis-server) on
// a spare loopback port without persistence (docs/protocol.md, "Order and
// loss": typing is never persisted), with args appended to its command
// line (e.g. "--enable-debug-command", "local"), and kills it when the test
// ends.
func StartRedis(tb testing.TB, bin string, args ...string) RedisServer {
	tb.Helper()
	if bin == "" {
		bin = FindBinary(tb, "redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
	}
	s := &Server{tb: tb, bin: bin, addr: ports.Spare(tb)}
	s.name = "redis-server:" + s.Port()
	s.args = append([]string{"--port", s.Port(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--loglevel", "warning", "--dir", tb.TempDir()}, args...)
	s.ready = func() bool {
		c := redis.NewClient(&redis.Options{Addr: s.addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return c.Ping(ctx).Err() == nil
	}
	return RedisServer{startServer(tb, s)}
}

// NATSServer is a private nats-server.
type NATSServer struct{ *Server }

// URL is the server's nats:// URL.
func (n NATSServer) URL() string { return "nats://" + n.addr }

// StartNATS starts nats-server on a spare loopback port (addr "" picks one;
// else that 127.0.0.1:port), with args appended to its command line, and
// kills it when the test ends. It is ready once it sends its INFO line.
func StartNATS(tb testing.TB, addr string, args ...string) NATSServer {
	tb.Helper()
	bin := FindBinary(tb, "nats-server", "/usr/sbin/nats-server", "/usr/local/bin/nats-server", "/usr/bin/nats-server")
	if addr == "" {
		addr = ports.Spare(tb)
	}
	s := &Server{tb: tb, bin: bin, addr: addr}
	s.name = "nats-server:" + s.Port()
	s.args = append([]string{"-a", "127.0.0.1", "-p", s.Port()}, args...)
	s.ready = func() bool {
		c, err := net.DialTimeout("tcp", s.addr, 200*time.Millisecond)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		line, err := bufio.NewReader(c).ReadString('\n')
		return err == nil && strings.HasPrefix(line, "INFO ")
	}
	return NATSServer{startServer(tb, s)}
}
