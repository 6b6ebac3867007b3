package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// ecJWK is k's public key as a JWK with "use": "sig" and "alg": "ES256".
func ecJWK(kid string, k *ecdsa.PrivateKey) testkit.JWK {
	j := testkit.ECJWK(kid, &k.PublicKey)
	j["use"], j["alg"] = "sig", "ES256"
	return j
}

// handshakeResp is handshake returning the whole refused response too.
func handshakeResp(t *testing.T, u string, h http.Header) (status int, code, msg string, resp *http.Response) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(u, h)
	if err == nil {
		ws.Close()
		return resp.StatusCode, "", "", resp
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("HTTP %d body %q is not JSON", resp.StatusCode, b)
	}
	code, msg = errorOf(body)
	return resp.StatusCode, code, msg, resp
}

// metric returns the value of one series on the admin /metrics, e.g.
// `ellipsis_gateway_closes_total{code="1013"}`; 0 when absent.
func (e *env) metric(series string) float64 {
	e.t.Helper()
	resp, err := http.Get("http://" + e.srv.AdminAddr() + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// natsSpy records every message on the env's subjects (commands, snapshot
// and authorisation requests), to prove that nothing reached NATS.
type natsSpy struct {
	mu   sync.Mutex
	msgs []string // "subject payload"
}

func (e *env) spyNATS() *natsSpy {
	e.t.Helper()
	s := &natsSpy{}
	if _, err := e.nc.Subscribe(e.cfg.SubjectPrefix+".>", func(m *nats.Msg) {
		s.mu.Lock()
		s.msgs = append(s.msgs, m.Subject+" "+string(m.Data))
		s.mu.Unlock()
	}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// mentioning returns the recorded messages whose payload contains s.
func (s *natsSpy) mentioning(sub string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, m := range s.msgs {
		if strings.Contains(m, sub) {
			out = append(out, m)
		}
	}
	return out
}

// dialSlow opens a WebSocket whose receive buffer is tiny and that never
// reads: the gateway's writes to it stall as soon as a few KB are in
// flight.
func (e *env) dialSlow(u string) *websocket.Conn {
	e.t.Helper()
	d := websocket.Dialer{
		HandshakeTimeout: 5 * time.Second,
		NetDialContext: (&net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
			if err != nil {
				return err
			}
			return serr
		}}).DialContext,
		ReadBufferSize: 1024,
	}
	ws, _, err := d.Dial(u, nil)
	if err != nil {
		e.t.Fatalf("dial %s: %v", u, err)
	}
	e.t.Cleanup(func() { ws.Close() })
	return ws
}

// reader reads a connection in the background (answering the gateway's
// pings, as browsers do) and hands over every frame with its arrival time.
type reader struct {
	frames chan timedFrame
	done   chan struct{}
	err    error
}

type timedFrame struct {
	at   time.Time
	data []byte
}

func readAll(ws *websocket.Conn, buffer int) *reader {
	r := &reader{frames: make(chan timedFrame, buffer), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, b, err := ws.ReadMessage()
			if err != nil {
				r.err = err
				return
			}
			select {
			case r.frames <- timedFrame{time.Now(), b}:
			default: // test buffer full: drop (the test fails on counts)
			}
		}
	}()
	return r
}

// waitFor returns the next frame whose type is typ.
func (r *reader) waitFor(t *testing.T, typ string, within time.Duration) timedFrame {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case f := <-r.frames:
			var v struct{ Type string }
			_ = json.Unmarshal(f.data, &v)
			if v.Type == typ {
				return f
			}
		case <-r.done:
			t.Fatalf("connection ended (%v) while waiting for %s", r.err, typ)
		case <-deadline:
			t.Fatalf("no %s within %s", typ, within)
		}
	}
}

// publishMany publishes payload n times on room's channel in one pipeline.
func (e *env) publishMany(room, payload string, n int) {
	e.t.Helper()
	pipe := e.rdb.Pipeline()
	for i := 0; i < n; i++ {
		pipe.Publish(context.Background(), e.names.RoomChannel(room), payload)
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}
