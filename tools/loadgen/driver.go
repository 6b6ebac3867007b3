package loadgen

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/tools/demo"
)

// Systems the load generator drives (Options.System).
const (
	// SystemEllipsis: an Ellipsis gateway (docs/protocol): join a room,
	// send typing_start / typing_stop, read room events.
	SystemEllipsis = "ellipsis"
	// SystemCentrifugo: a Centrifugo v6 server over its JSON protocol on
	// WebSocket (centrifugo.go): connect with a JWT, subscribe to the
	// room's channel, publish typing changes into it.
	SystemCentrifugo = "centrifugo"
)

// driver is the wire protocol of one system under test. Everything else
// (pacing, the send log, matching events to sends, latency, statistics)
// is shared, so that every system is measured the same way: the send time
// is taken right before the frame's write (client.send), the receive time
// right after the WebSocket read that returned the message (readLoop).
// A driver holds no per-connection state of its own: that lives in the
// client (under c.wmu for the writer side, owned by the reader goroutine
// for the reader side).
type driver interface {
	// dialTarget returns the WebSocket URL and handshake header of c
	// (authentication included). Errors are *kindError.
	dialTarget(c *client) (string, http.Header, error)
	// join runs once on the fresh connection, before the reader starts:
	// it joins c's room and reads until the server confirms it, within
	// Options.DialTimeout. Errors are *kindError; the caller closes the
	// connection.
	join(c *client) error
	// frame returns the typing frame of kind k for c; called with c.wmu
	// held, the result is valid until it is released.
	frame(c *client, k kind) []byte
	// handle processes one WebSocket message read at now (ns of the run's
	// clock): it counts frames, feeds typing events to c.onEvent and
	// counts errors. Called by c's reader goroutine only.
	handle(c *client, data []byte, now int64)
}

// newDriver returns the driver of a system named in Options.System.
func newDriver(system string) driver {
	if system == SystemCentrifugo {
		return centrifugoDriver{}
	}
	return ellipsisDriver{}
}

// ellipsisDriver speaks the Ellipsis gateway protocol (docs/protocol).
type ellipsisDriver struct{}

func (ellipsisDriver) dialTarget(c *client) (string, http.Header, error) {
	o := &c.r.opts
	target, err := url.Parse(c.url)
	if err != nil {
		return "", nil, &kindError{"dial:url", err}
	}
	h := http.Header{}
	if o.JWTSecret != "" {
		tok, err := demo.MintHS256([]byte(o.JWTSecret), c.user, c.user, time.Now(), o.Duration+time.Hour)
		if err != nil {
			return "", nil, &kindError{"dial:token", err}
		}
		h.Set("Authorization", "Bearer "+tok)
	} else {
		q := target.Query()
		q.Set("user", c.user)
		target.RawQuery = q.Encode()
	}
	return target.String(), h, nil
}

// join writes the join frame and reads until its answer (nothing else can
// arrive before it: the room was not joined).
func (ellipsisDriver) join(c *client) error {
	ws := c.ws
	_ = ws.SetWriteDeadline(time.Now().Add(writeWait))
	join, _ := json.Marshal(map[string]string{"type": "join", "room": c.room, "id": "j"})
	if err := ws.WriteMessage(websocket.TextMessage, join); err != nil {
		return &kindError{"join:write", err}
	}
	_ = ws.SetReadDeadline(time.Now().Add(c.r.opts.DialTimeout))
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return &kindError{"join:read", err}
		}
		ev, ok := parseFrame(data)
		if !ok {
			continue
		}
		if ev.Type == "joined" && ev.ID == "j" {
			if c.view != nil && c.r.roomTypists != nil { // a rejoin (client.rejoin)
				c.trackRoom(c.roomIdx, ev.Typing, ev.Total, c.r.clock.mono())
			}
			break
		}
		if ev.Type == "error" && ev.ID == "j" {
			return &kindError{"join:" + ev.Code, errors.New(string(data))}
		}
	}
	c.startFrame, _ = json.Marshal(map[string]string{"type": "typing_start", "room": c.room})
	c.stopFrame, _ = json.Marshal(map[string]string{"type": "typing_stop", "room": c.room})
	return nil
}

func (ellipsisDriver) frame(c *client, k kind) []byte {
	if k == kindStop {
		return c.stopFrame
	}
	return c.startFrame
}

func (ellipsisDriver) handle(c *client, data []byte, now int64) {
	st := c.r.st
	st.c.framesIn.Add(1)
	ev, ok := parseFrame(data)
	if !ok {
		st.fail("bad_frame")
		return
	}
	switch ev.Type {
	case "typing_start", "typing_stop":
		if c.view != nil {
			c.trackEvent(ev, now)
		}
		if c.matchEvents {
			c.onEvent(ev, now)
		}
	case "error":
		st.fail("error_frame:" + ev.Code)
	case "typing":
		st.c.snapshots.Add(1)
		if c.view != nil && ev.Room == c.room {
			c.trackRoom(c.roomIdx, ev.Users, ev.Total, now)
		}
	}
}
