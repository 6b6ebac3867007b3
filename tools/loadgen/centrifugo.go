package loadgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/tools/demo"
)

// The Centrifugo client: Centrifugo v6's JSON protocol over WebSocket
// (client protocol "Bidirectional, JSON" of centrifugal/protocol v0.19,
// https://centrifugal.dev/docs/transports/client_protocol), the minimum a
// typing indicator needs, set up as Centrifugo's docs give it: every
// member subscribes to the room's channel and publishes its typing
// changes into it (namespace option allow_publish_for_subscriber or
// allow_publish_for_client; the config is in tools/loadgen/peers.sh).
//
// Framing: a WebSocket text message holds one or more JSON objects, one
// per line (the server batches pushes and replies into one message).
//
//	client -> {"id":1,"connect":{"token":"<JWT>","name":"ellipsis-loadgen"}}
//	server <- {"id":1,"connect":{"client":"…","version":"…","ping":25,"pong":true}}
//	client -> {"id":2,"subscribe":{"channel":"typing:<room>"}}
//	server <- {"id":2,"subscribe":{}}
//	client -> {"id":3,"publish":{"channel":"typing:<room>","data":{"type":"typing_start"}}}
//	server <- {"id":3,"publish":{}}
//	server <- {"push":{"channel":"typing:<room>","pub":{"data":{"type":"typing_start"},"info":{"user":"<sub>","client":"…"}}}}
//	server <- {}      a ping: the client answers {} (pong) within pong_timeout (8 s)
//	server <- {"id":4,"error":{"code":103,"message":"permission denied"}}
//	server <- {"push":{"disconnect":{"code":3501,"reason":"…"}}}
//
// (As Centrifugo v6.9.1 sends them, checked against the real server; at
// the publisher the echo of its publication comes before the publish
// reply.)
//
// The publisher is the connection's user, from the token's sub claim,
// which Centrifugo puts in the publication's info.user: the receiver
// matches the event to that user's send log exactly as for Ellipsis.
// Centrifugo delivers a publication to every subscriber of the channel,
// the publisher included: those echoes are counted (Result.Delivered.
// Echoes) and neither delivered nor lost.
//
// There is no refresh or expiry on Centrifugo's side: a typing_start
// while the burst is on (a refresh, in rate mode only when a burst
// outlasts the refresh interval) is published like any other.

// DefaultCentrifugoURL is Centrifugo's WebSocket endpoint on its default
// port.
const DefaultCentrifugoURL = "ws://127.0.0.1:8000/connection/websocket"

// DefaultCentrifugoNamespace is the channel namespace of the rooms:
// room R is channel "typing:R".
const DefaultCentrifugoNamespace = "typing"

// centrifugoDriver speaks Centrifugo's JSON protocol; see above.
type centrifugoDriver struct{}

// channel is the Centrifugo channel of c's room.
func (centrifugoDriver) channel(c *client) string {
	return c.r.opts.CentrifugoNamespace + ":" + c.room
}

// dialTarget: the JWT travels in the connect command, not the handshake.
func (centrifugoDriver) dialTarget(c *client) (string, http.Header, error) {
	return c.url, http.Header{}, nil
}

// join connects (token), then subscribes to the room's channel, each
// command answered before the next; pings meanwhile are answered.
func (d centrifugoDriver) join(c *client) error {
	o := &c.r.opts
	tok, err := demo.MintHS256([]byte(o.JWTSecret), c.user, c.user, time.Now(), o.Duration+time.Hour)
	if err != nil {
		return &kindError{"dial:token", err}
	}
	deadline := time.Now().Add(o.DialTimeout)
	connect, _ := json.Marshal(cfCommand{ID: 1, Connect: &cfConnect{Token: tok, Name: "ellipsis-loadgen"}})
	if err := d.roundTrip(c, connect, 1, deadline); err != nil {
		return err
	}
	sub, _ := json.Marshal(cfCommand{ID: 2, Subscribe: &cfSubscribe{Channel: d.channel(c)}})
	if err := d.roundTrip(c, sub, 2, deadline); err != nil {
		return err
	}
	c.cmdID = 2
	return nil
}

// roundTrip writes one command and reads until the reply with its id.
func (centrifugoDriver) roundTrip(c *client, cmd []byte, id uint32, deadline time.Time) error {
	ws := c.ws
	_ = ws.SetWriteDeadline(time.Now().Add(writeWait))
	if err := ws.WriteMessage(websocket.TextMessage, cmd); err != nil {
		return &kindError{"join:write", err}
	}
	_ = ws.SetReadDeadline(deadline)
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return &kindError{"join:read", err}
		}
		for line := range lines(data) {
			if isPing(line) {
				_ = ws.SetWriteDeadline(time.Now().Add(writeWait))
				if err := ws.WriteMessage(websocket.TextMessage, pong); err != nil {
					return &kindError{"join:write", err}
				}
				continue
			}
			var rep cfReply
			if err := json.Unmarshal(line, &rep); err != nil {
				return &kindError{"join:bad_frame", fmt.Errorf("%w: %q", err, line)}
			}
			if rep.Push != nil && rep.Push.Disconnect != nil {
				return &kindError{"join:cf_disconnect_" + strconv.Itoa(int(rep.Push.Disconnect.Code)), errors.New(rep.Push.Disconnect.Reason)}
			}
			if rep.ID != id {
				continue
			}
			if rep.Error != nil {
				return &kindError{"join:cf_error_" + strconv.Itoa(int(rep.Error.Code)), errors.New(rep.Error.Message)}
			}
			return nil
		}
	}
}

// frame builds a publish command with the next id into c.wbuf. Room
// names are [a-z0-9-] (runner.prepare) and the namespace a plain word,
// so the channel needs no JSON escaping.
func (d centrifugoDriver) frame(c *client, k kind) []byte {
	c.cmdID++
	b := append(c.wbuf[:0], `{"id":`...)
	b = strconv.AppendUint(b, uint64(c.cmdID), 10)
	b = append(b, `,"publish":{"channel":"`...)
	b = append(b, d.channel(c)...)
	if k == kindStop {
		b = append(b, `","data":{"type":"typing_stop"}}}`...)
	} else {
		b = append(b, `","data":{"type":"typing_start"}}}`...)
	}
	c.wbuf = b
	return b
}

// pong is the client's answer to a server ping ({} both ways in v6's
// JSON protocol).
var pong = []byte("{}")

func (d centrifugoDriver) handle(c *client, data []byte, now int64) {
	st := c.r.st
	for line := range lines(data) {
		if isPing(line) {
			st.c.pings.Add(1)
			c.wmu.Lock()
			_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
			err := c.ws.WriteMessage(websocket.TextMessage, pong)
			c.wmu.Unlock()
			if err != nil && !c.r.closing.Load() {
				st.fail("write")
			}
			continue
		}
		st.c.framesIn.Add(1)
		ev, f := parseCentrifugo(line)
		switch f {
		case cfPublication:
			c.onEvent(ev, now)
		case cfReplyOK:
			st.c.replies.Add(1)
		case cfReplyError:
			st.fail("error_frame:cf_" + ev.Code)
		case cfDisconnect:
			st.fail("cf_disconnect:" + ev.Code)
		case cfOther:
		default:
			st.fail("bad_frame")
		}
	}
}

// Kinds of Centrifugo frames (parseCentrifugo).
const (
	cfBad = iota
	cfPublication
	cfReplyOK
	cfReplyError
	cfDisconnect
	cfOther // another push (join, leave, …): not used by this setup
)

// parseCentrifugo reads one line of a server message. A publication of
// the typing namespace becomes an event like Ellipsis's (Type
// typing_start or typing_stop, Room the room, User the publisher, Reason
// "stopped" for a stop, no ts_ms); an error reply or a disconnect push
// carries its code in Code. Publications take a fast path, as Ellipsis
// room events do in parseFrame: the keys are looked up without decoding
// (in a publication the only "type" key is the data's and the only "user"
// key is info's; "channel" comes first in the push).
func parseCentrifugo(line []byte) (protocol.ServerFrame, int) {
	if bytes.HasPrefix(line, []byte(`{"push":{"channel":"`)) && bytes.Contains(line, []byte(`"pub":`)) {
		ch, ok1 := stringField(line, `"channel":"`)
		t, ok2 := stringField(line, `"type":"`)
		u, ok3 := stringField(line, `"user":"`)
		if ok1 && ok2 && ok3 && (t == "typing_start" || t == "typing_stop") {
			return pubEvent(ch, t, u), cfPublication
		}
	}
	var rep cfReply
	if err := json.Unmarshal(line, &rep); err != nil {
		return protocol.ServerFrame{}, cfBad
	}
	switch {
	case rep.Error != nil:
		return protocol.ServerFrame{Code: strconv.Itoa(int(rep.Error.Code))}, cfReplyError
	case rep.Push != nil && rep.Push.Disconnect != nil:
		return protocol.ServerFrame{Code: strconv.Itoa(int(rep.Push.Disconnect.Code))}, cfDisconnect
	case rep.Push != nil && rep.Push.Pub != nil:
		p := rep.Push.Pub
		var data struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(p.Data, &data) != nil || p.Info == nil || (data.Type != "typing_start" && data.Type != "typing_stop") {
			return protocol.ServerFrame{}, cfBad
		}
		return pubEvent(rep.Push.Channel, data.Type, p.Info.User), cfPublication
	case rep.Push != nil:
		return protocol.ServerFrame{}, cfOther
	case rep.ID != 0:
		return protocol.ServerFrame{ID: strconv.FormatUint(uint64(rep.ID), 10)}, cfReplyOK
	}
	return protocol.ServerFrame{}, cfBad
}

// pubEvent is the event of a typing publication in channel ch ("ns:room").
func pubEvent(ch, typ, user string) protocol.ServerFrame {
	ev := protocol.ServerFrame{Type: typ, Room: ch, User: user}
	if i := strings.IndexByte(ch, ':'); i >= 0 {
		ev.Room = ch[i+1:]
	}
	if typ == "typing_stop" {
		ev.Reason = "stopped"
	}
	return ev
}

// isPing reports whether a line is the server's ping, an empty object.
func isPing(line []byte) bool { return bytes.Equal(bytes.TrimSpace(line), pong) }

// lines yields the non-empty lines of a message (Centrifugo's JSON
// framing: one object per line).
func lines(data []byte) func(yield func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for len(data) > 0 {
			line := data
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				line, data = data[:i], data[i+1:]
			} else {
				data = nil
			}
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			if !yield(line) {
				return
			}
		}
	}
}

// cfCommand is the part of a Centrifugo command this client sends.
type cfCommand struct {
	ID        uint32       `json:"id"`
	Connect   *cfConnect   `json:"connect,omitempty"`
	Subscribe *cfSubscribe `json:"subscribe,omitempty"`
}

type cfConnect struct {
	Token string `json:"token"`
	Name  string `json:"name,omitempty"`
}

type cfSubscribe struct {
	Channel string `json:"channel"`
}

// cfReply is the part of a Centrifugo reply (or push) this client reads.
type cfReply struct {
	ID    uint32 `json:"id"`
	Error *struct {
		Code    uint32 `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Push *struct {
		Channel string `json:"channel"`
		Pub     *struct {
			Data json.RawMessage `json:"data"`
			Info *struct {
				User string `json:"user"`
			} `json:"info"`
		} `json:"pub"`
		Disconnect *struct {
			Code   uint32 `json:"code"`
			Reason string `json:"reason"`
		} `json:"disconnect"`
	} `json:"push"`
}
