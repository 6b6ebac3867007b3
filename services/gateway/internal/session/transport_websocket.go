package session

import (
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// WebSocket is the [Transport] of an upgraded gorilla connection; its
// WriteTexts writes frame by frame (see [Upgrade] for one write per
// drain).
func WebSocket(ws *websocket.Conn) Transport { return wsTransport{ws: ws} }

// Upgrade upgrades the request with u (gorilla answers a failed upgrade
// itself, and its error is returned) and returns the connection's
// [Transport], whose WriteTexts sends the frames of one writer drain in
// one socket write (corkConn).
func Upgrade(u *websocket.Upgrader, w http.ResponseWriter, r *http.Request) (Transport, error) {
	cw := &corkingWriter{ResponseWriter: w}
	ws, err := u.Upgrade(cw, r, nil)
	if err != nil {
		return nil, err
	}
	return wsTransport{ws: ws, cork: cw.conn}, nil
}

type wsTransport struct {
	ws   *websocket.Conn
	cork *corkConn // nil: frames are written one by one
}

func (t wsTransport) SetReadLimit(n int64)              { t.ws.SetReadLimit(n) }
func (t wsTransport) SetReadDeadline(d time.Time) error { return t.ws.SetReadDeadline(d) }

func (t wsTransport) HandleControl(ping func([]byte) error, pong func() error) {
	t.ws.SetPingHandler(func(data string) error { return ping([]byte(data)) })
	t.ws.SetPongHandler(func(string) error { return pong() })
}

func (t wsTransport) ReadFrame() (bool, []byte, error) {
	mt, data, err := t.ws.ReadMessage()
	if err != nil {
		var ce *websocket.CloseError
		switch {
		case errors.As(err, &ce):
			return false, nil, &PeerClose{Code: ce.Code} // gorilla has answered it
		case errors.Is(err, websocket.ErrReadLimit):
			return false, nil, ErrFrameTooBig // gorilla has sent 1009
		}
		return false, nil, err
	}
	return mt == websocket.TextMessage, data, nil
}

func (t wsTransport) WriteTexts(frames [][]byte, deadline time.Time) error {
	_ = t.ws.SetWriteDeadline(deadline)
	corked := len(frames) > 1 && t.cork != nil
	if corked {
		t.cork.cork()
	}
	var err error
	for _, f := range frames {
		if err = t.ws.WriteMessage(websocket.TextMessage, f); err != nil {
			break
		}
	}
	if corked {
		if ferr := t.cork.flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func (t wsTransport) WritePing(deadline time.Time) error {
	return t.ws.WriteControl(websocket.PingMessage, nil, deadline)
}

func (t wsTransport) WritePong(data []byte, deadline time.Time) error {
	err := t.ws.WriteControl(websocket.PongMessage, data, deadline)
	if errors.Is(err, websocket.ErrCloseSent) {
		return nil
	}
	return err
}

func (t wsTransport) WriteClose(code int, reason string, deadline time.Time) error {
	return t.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), deadline)
}

// CutWrites sets the socket's write deadline; gorilla re-arms it before
// each write from the deadline it is given, so a write begun just after
// may still wait its own (the writer's hard stop bounds that).
func (t wsTransport) CutWrites(by time.Time) { _ = t.conn().SetWriteDeadline(by) }
func (t wsTransport) Abort()                 { _ = t.conn().Close() }
func (t wsTransport) Close() error           { return t.ws.Close() }
func (t wsTransport) conn() net.Conn         { return t.ws.UnderlyingConn() }
