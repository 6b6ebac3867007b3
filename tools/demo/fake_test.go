package demo

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// fakeGateway is a minimal in-test stand-in for the gateway's WebSocket
// contract (docs/protocol.md): join/joined with a snapshot, typing_start and
// typing_stop fanned out to the room's other users with ttl_ms, a stop on
// disconnect, and GET /v1/config. With secret set it wants an HS256 Bearer
// token and takes the user from its sub.
type fakeGateway struct {
	t      *testing.T
	cfg    protocol.ClientConfig
	secret string

	mu     sync.Mutex
	conns  map[*fakeConn]bool
	frames map[string][]string // user -> frame types received
	srv    *httptest.Server
}

type fakeConn struct {
	ws     *websocket.Conn
	wmu    sync.Mutex
	user   string
	name   string
	room   string
	typing bool
}

func (c *fakeConn) write(v any) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.WriteJSON(v)
}

func newFakeGateway(t *testing.T, cfg protocol.ClientConfig, secret string) *fakeGateway {
	g := &fakeGateway{t: t, cfg: cfg, secret: secret, conns: map[*fakeConn]bool{}, frames: map[string][]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/config", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(g.cfg)
	})
	mux.HandleFunc("GET /v1/ws", g.serveWS)
	g.srv = httptest.NewServer(mux)
	t.Cleanup(g.srv.Close)
	return g
}

func (g *fakeGateway) wsURL() string { return "ws" + strings.TrimPrefix(g.srv.URL, "http") + "/v1/ws" }

func (g *fakeGateway) auth(r *http.Request) (user, name string, ok bool) {
	if g.secret == "" {
		return r.URL.Query().Get("user"), r.URL.Query().Get("name"), r.URL.Query().Get("user") != ""
	}
	tok, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	parts := strings.Split(tok, ".")
	if !found || len(parts) != 3 {
		return "", "", false
	}
	mac := hmac.New(sha256.New, []byte(g.secret))
	mac.Write([]byte(parts[0] + "." + parts[1]))
	if base64.RawURLEncoding.EncodeToString(mac.Sum(nil)) != parts[2] {
		return "", "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", "", false
	}
	var c struct{ Sub, Name string }
	if json.Unmarshal(raw, &c) != nil || c.Sub == "" {
		return "", "", false
	}
	return c.Sub, c.Name, true
}

func (g *fakeGateway) serveWS(w http.ResponseWriter, r *http.Request) {
	user, name, ok := g.auth(r)
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"bad token"}}`))
		return
	}
	up := websocket.Upgrader{}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := &fakeConn{ws: ws, user: user, name: name}
	g.mu.Lock()
	g.conns[c] = true
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.conns, c)
		wasTyping := c.typing
		g.mu.Unlock()
		if wasTyping {
			g.broadcast(c, map[string]any{"type": "typing_stop", "room": c.room, "user": c.user, "reason": "disconnected"})
		}
		ws.Close()
	}()
	for {
		var f struct{ Type, Room, ID string }
		if err := ws.ReadJSON(&f); err != nil {
			return
		}
		g.mu.Lock()
		g.frames[user] = append(g.frames[user], f.Type)
		g.mu.Unlock()
		switch f.Type {
		case "join":
			g.mu.Lock()
			c.room = f.Room
			typing := []map[string]string{}
			for o := range g.conns {
				if o != c && o.room == f.Room && o.typing && o.user != user {
					typing = append(typing, map[string]string{"user": o.user, "name": o.name})
				}
			}
			g.mu.Unlock()
			c.write(map[string]any{"type": "joined", "room": f.Room, "typing": typing, "id": f.ID})
		case "typing_start":
			g.mu.Lock()
			c.typing = true
			g.mu.Unlock()
			g.broadcast(c, map[string]any{"type": "typing_start", "room": c.room, "user": user, "name": name, "ttl_ms": g.cfg.TTLMs})
		case "typing_stop":
			g.mu.Lock()
			c.typing = false
			g.mu.Unlock()
			g.broadcast(c, map[string]any{"type": "typing_stop", "room": c.room, "user": user, "reason": "stopped"})
		}
	}
}

// broadcast sends ev to every other user's connections in from's room.
func (g *fakeGateway) broadcast(from *fakeConn, ev map[string]any) {
	g.mu.Lock()
	var to []*fakeConn
	for o := range g.conns {
		if o != from && o.room == from.room && o.user != from.user {
			to = append(to, o)
		}
	}
	g.mu.Unlock()
	for _, o := range to {
		o.write(ev)
	}
}

func (g *fakeGateway) received(user string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.frames[user]...)
}

func mustRequest(t *testing.T, token string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://example/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}
