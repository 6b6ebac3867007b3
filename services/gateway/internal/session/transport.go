package session

import (
	"errors"
	"time"
)

// Transport is the WebSocket as a connection uses it: data frames in,
// control frames to handlers, frames out with a deadline each, and the
// hard stop. [WebSocket] adapts a gorilla connection; tests use an
// in-memory one. The reader (ReadFrame, SetReadLimit, SetReadDeadline,
// HandleControl) and the writer (WriteTexts, WritePing, WriteClose) each
// run on one goroutine at a time; WritePong runs on the reader
// concurrently with the writer, and CutWrites and Abort may run on any
// goroutine.
type Transport interface {
	// SetReadLimit bounds a data frame to n bytes; a larger one ends
	// reading with [ErrFrameTooBig] after a 1009 close frame is sent.
	SetReadLimit(n int64)
	// SetReadDeadline fails reading (any error but the two below) when no
	// frame arrived by t.
	SetReadDeadline(t time.Time) error
	// HandleControl sets what the reader does on the peer's ping (ping
	// gets its payload; the transport sends no pong itself) and pong. They
	// run on the reader within ReadFrame; an error of theirs ends reading
	// with it.
	HandleControl(ping func(data []byte) error, pong func() error)
	// ReadFrame blocks for the next data frame: text or binary. Its errors
	// are a [*PeerClose] (the peer's close frame, already answered),
	// [ErrFrameTooBig], or any other for a broken connection.
	ReadFrame() (text bool, data []byte, err error)
	// WriteTexts writes frames, text frames in order, by deadline, in as
	// few socket writes as the transport can (one, from [Upgrade]). An
	// error means some of them may not have been written.
	WriteTexts(frames [][]byte, deadline time.Time) error
	// WritePing writes a ping (no payload) by deadline.
	WritePing(deadline time.Time) error
	// WritePong answers a ping with its payload by deadline; after the
	// close frame it writes nothing and returns nil.
	WritePong(data []byte, deadline time.Time) error
	// WriteClose writes the close frame of code (RFC 6455) and reason by
	// deadline.
	WriteClose(code int, reason string, deadline time.Time) error
	// CutWrites moves the deadline of the write in flight, if any, to by.
	CutWrites(by time.Time)
	// Abort drops the TCP connection whatever a write in flight does.
	Abort()
	// Close drops the connection; reading and writing end.
	Close() error
}

// PeerClose is the peer's close frame, which the transport has answered.
type PeerClose struct {
	Code int // RFC 6455 close code; 1005 when the frame had none
}

func (e *PeerClose) Error() string { return "peer closed the connection" }

// ErrFrameTooBig ends reading at a data frame over the read limit; the
// transport has sent close 1009.
var ErrFrameTooBig = errors.New("session: frame over the read limit")
