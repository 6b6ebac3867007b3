package session

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// readLoop is the reader: it reads and handles client frames until
// reading fails, and records why the connection ended.
func (c *Conn) readLoop() {
	defer close(c.readerDone)
	c.w.tr.SetReadLimit(int64(c.cfg.MaxFrameBytes))
	_ = c.w.tr.SetReadDeadline(time.Now().Add(c.cfg.PongWait))
	c.w.tr.HandleControl(c.onPing, c.onPong)
	for {
		text, data, err := c.w.tr.ReadFrame()
		if err != nil {
			c.terminate(readEndCode(err))
			return
		}
		if c.closing() {
			continue // waiting for the peer's close reply
		}
		c.handle(text, data)
	}
}

// readEndCode is the close code, for the metrics, of a read error of the
// transport: the peer's (already answered), 1009 (sent by the transport)
// or 1006.
func readEndCode(err error) int {
	var pc *PeerClose
	switch {
	case errors.As(err, &pc):
		return pc.Code
	case errors.Is(err, ErrFrameTooBig):
		return CloseTooBig
	default:
		return CloseAbnormal
	}
}

// onPong runs on the reader for a pong (the answer to our ping, or an
// unsolicited one: RFC 6455 section 5.5.3). It takes a token of the
// inbound bucket like any client frame, so a flood of them is closed
// (1008) like a flood of frames; it extends the read deadline either way,
// so a client at its limit is not dropped as silent.
func (c *Conn) onPong() error {
	c.allowInbound()
	return c.w.tr.SetReadDeadline(time.Now().Add(c.cfg.PongWait))
}

// onPing runs on the reader for a client's WebSocket ping. It takes a
// token of the inbound bucket like data frames: over it the pong is
// skipped, and a sustained flood closes the connection (1008) as for
// frames.
func (c *Conn) onPing(data []byte) error {
	if !c.allowInbound() {
		return nil
	}
	if err := c.w.pong(data); err != nil {
		c.terminate(CloseAbnormal)
	}
	return nil
}

// handle serves one client message. The inbound limit comes first: a
// rejected frame costs no UTF-8 check and no decoding.
func (c *Conn) handle(text bool, data []byte) {
	if !c.allowInbound() {
		return
	}
	if !text {
		c.met.FrameIn(metrics.FrameBinary)
		c.Close(CloseUnsupported, "binary frames are not supported; send JSON text frames")
		return
	}
	if !utf8.Valid(data) {
		c.met.FrameIn(metrics.FrameInvalid)
		c.Close(CloseInvalidData, "invalid UTF-8 in text frame")
		return
	}
	f, err := protocol.DecodeClientFrame(data)
	if err != nil {
		c.met.FrameIn(metrics.FrameInvalid)
		var fe *protocol.FrameError
		if errors.As(err, &fe) {
			c.sendError(fe.Code, fe.Message, fe.Room, fe.ID)
		} else {
			c.sendError(protocol.CodeBadRequest, err.Error(), "", "")
		}
		return
	}
	c.met.FrameIn(f.Type)
	switch f.Type {
	case protocol.TypePing:
		c.reply("", protocol.TypePong, protocol.NewPong(f.ID))
		return
	case protocol.TypeWatch:
		c.watch(f) // on the reader: nothing more is read until it is answered
		return
	case protocol.TypeUnwatch:
		c.unwatch(f)
		return
	}
	c.dispatch(f) // at once, or in the room's lane behind its frame in flight
}

// allowInbound takes a token of the inbound bucket for one client frame
// or WebSocket ping (inbound.go). Without one the frame is dropped and
// counted (rate_limited_total); the client gets one rate_limited error
// frame (no room, no id: the frame is not decoded) at most once per
// NoticeInterval, and more than MaxRejectedWindow rejections within the
// abuse window close the connection with 1008. Reader only.
func (c *Conn) allowInbound() bool {
	v := c.inbound.admit(time.Now())
	if v == admitted {
		return true
	}
	c.met.RateLimited.Inc()
	switch v {
	case rejectedAbuse:
		if c.closeWith(ClosePolicy, ClosePolicy, fmt.Sprintf("inbound rate limit: more than %d frames rejected within %s", c.cfg.MaxRejectedWindow, AbuseWindow)) {
			c.met.AbuseCloses.Inc()
		}
	case rejectedNotice:
		c.sendError(protocol.CodeRateLimited, fmt.Sprintf(
			"too many frames: at most %g per second, burst %d; frames over it are dropped, reported at most once per second, and more than %d within %s close the connection (1008)",
			c.cfg.InboundRate, c.cfg.InboundBurst, c.cfg.MaxRejectedWindow, AbuseWindow), "", "")
	}
	return false
}
