package session

import (
	"errors"
	"net"
	"time"

	"github.com/gorilla/websocket"
)

// WebSocket is the [Transport] of an upgraded gorilla connection.
func WebSocket(ws *websocket.Conn) Transport { return wsTransport{ws} }

type wsTransport struct{ ws *websocket.Conn }

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

func (t wsTransport) WriteText(frame []byte, deadline time.Time) error {
	_ = t.ws.SetWriteDeadline(deadline)
	return t.ws.WriteMessage(websocket.TextMessage, frame)
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
