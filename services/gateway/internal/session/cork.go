package session

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// maxCorked bounds the bytes one drain of the writer gathers before they
// go to the socket in one write (see [writer.drainLocked]): about a TCP
// send buffer's worth; a drain that would pass it writes what it has
// first.
const maxCorked = 64 << 10

// corkConn is the hijacked TCP connection of a WebSocket with a cork:
// while corked, writes are appended to buf instead of going to the
// socket, and flush sends them in one write. The writer corks around the
// frames of one drain, so a socket that owes several frames gets them in
// one system call, not one per frame (gorilla flushes every frame).
// Uncorked it writes through. No lock is held across the socket write:
// flush takes buf under mu and writes it after, and net.Conn keeps
// concurrent writes whole (a pong the reader writes meanwhile goes before
// or after the batch, never inside a frame).
type corkConn struct {
	net.Conn

	mu     sync.Mutex
	corked bool
	buf    []byte

	// deadline is the write deadline last set on the socket: gorilla sets
	// it before every frame, mostly to the value it already has (the
	// frames of one drain; drains of one stallDeadline step), and setting
	// it updates a runtime timer. Under dmu, held across the set so that
	// deadline is always the socket's.
	dmu      sync.Mutex
	deadline time.Time
}

// SetWriteDeadline implements net.Conn; a deadline at the same instant of
// the wall clock as the one set last is not set again (the socket's is
// unchanged, expired or not). Wall clock, not Equal: two deadlines of one
// stallDeadline step carry monotonic readings that differ by the
// nanoseconds between the clock reads of the two time.Now calls.
func (c *corkConn) SetWriteDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	if t.UnixNano() == c.deadline.UnixNano() && t.IsZero() == c.deadline.IsZero() {
		return nil
	}
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	c.deadline = t
	return nil
}

// SetDeadline implements net.Conn: the read deadline is set, and the
// write deadline through SetWriteDeadline.
func (c *corkConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// Write implements net.Conn: appended while corked (never refused: the
// writer bounds a drain to maxCorked bytes), else written to the socket.
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.corked {
		c.buf = append(c.buf, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// cork makes the next writes wait in buf until flush.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// flush uncorks and writes what was gathered in one write, under the
// socket's write deadline (which gorilla set for the last frame). It
// returns the socket's error; the bytes are dropped either way (buf is
// not kept: an idle connection holds no write buffer of its own).
func (c *corkConn) flush() error {
	c.mu.Lock()
	buf := c.buf
	c.corked, c.buf = false, nil
	c.mu.Unlock()
	if len(buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(buf)
	return err
}

// corkingWriter is the http.ResponseWriter given to gorilla's Upgrade: its
// Hijack hands gorilla a [corkConn] of the TCP connection and keeps it for
// the transport. http.ResponseController finds the original writer's other
// methods through Unwrap.
type corkingWriter struct {
	http.ResponseWriter
	conn *corkConn
}

// Hijack implements http.Hijacker.
func (w *corkingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = &corkConn{Conn: c}
	return w.conn, brw, nil
}

// Unwrap is for http.ResponseController.
func (w *corkingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
