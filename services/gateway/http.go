package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	webclient "github.com/ellipsis-chat/ellipsis/clients/js"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/session"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// ClientConfig is the body of GET /v1/config: the timing a client must use
// (PROTOCOL.md, "Timing"), in milliseconds, and the auth mode ("none": the
// client passes ?user=&name=; "jwt": ?access_token= or a Bearer header).
type ClientConfig struct {
	TTLMs      int64  `json:"ttl_ms"`
	RefreshMs  int64  `json:"refresh_ms"`
	IdleStopMs int64  `json:"idle_stop_ms"`
	Auth       string `json:"auth"`
}

// RoomTyping is the body of a 200 answer of GET /v1/rooms/{room}/typing.
type RoomTyping struct {
	Room  string            `json:"room"`
	Users []protocol.Typist `json:"users"`
}

// apiError is the JSON body of every HTTP error:
// {"error":{"code":"unauthorized","message":"token expired"}}.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// HTTP error codes beyond the protocol's error codes.
const (
	codeUnauthorized = "unauthorized"
	codeNotFound     = "not_found"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var e apiError
	e.Error.Code, e.Error.Message = code, msg
	writeJSON(w, status, e)
}

// publicHandler routes the public listener.
func (s *Server) publicHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ws", s.handleWS)
	mux.HandleFunc("GET /v1/rooms/{room}/typing", s.handleRoomTyping)
	mux.HandleFunc("GET /v1/config", s.handleConfig)
	if s.cfg.DemoPage {
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-cache")
			http.ServeFileFS(w, r, webclient.FS, webclient.IndexPath)
		})
		files := http.FileServerFS(webclient.FS)
		mux.Handle("GET /src/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-cache")
			files.ServeHTTP(w, r)
		}))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// authenticate runs the authenticator and answers 401 (credentials) or 400
// (invalid user id or name) itself; ok is false then.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (auth.Identity, bool) {
	id, err := s.authn.Authenticate(r)
	if err == nil {
		return id, true
	}
	var fe *protocol.FieldError
	if errors.As(err, &fe) {
		writeError(w, http.StatusBadRequest, protocol.CodeBadRequest, fe.Error())
	} else {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ellipsis"`)
		writeError(w, http.StatusUnauthorized, codeUnauthorized, err.Error())
	}
	return auth.Identity{}, false
}

// handleWS serves GET /v1/ws: refuse during shutdown (503), check the Origin
// (403), authenticate (401/400), upgrade, and run the connection until it
// ends.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	if s.shuttingDown.Load() {
		writeError(w, http.StatusServiceUnavailable, protocol.CodeUnavailable, "gateway shutting down; connect to another instance")
		return
	}
	if !s.origins.Allowed(r) {
		writeError(w, http.StatusForbidden, protocol.CodeForbidden, "origin "+strconv.Quote(r.Header.Get("Origin"))+" is not allowed (ELLIPSIS_ALLOWED_ORIGINS)")
		return
	}
	ident, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // gorilla has answered with an HTTP error
	}
	id := s.gatewayID + ":" + strconv.FormatUint(s.connSeq.Add(1), 10)
	c := session.New(ws, id, ident, session.Config{
		MaxFrameBytes:   s.cfg.MaxFrameBytes,
		MaxRooms:        s.cfg.MaxRoomsPerConn,
		InboundRate:     s.cfg.InboundRate,
		InboundBurst:    s.cfg.InboundBurst,
		OutboundQueue:   s.cfg.OutboundQueue,
		SnapshotTimeout: s.cfg.SnapshotTimeout,
	}, session.Deps{
		Hub:        s.hub,
		Backend:    s.pres,
		Authorizer: s.authz,
		Metrics:    s.met,
		Logger:     s.log.Named("conn"),
		Warn:       s.warn,
	})
	if !s.register(c) {
		c.Close(session.CloseGoingAway, "gateway shutting down")
		c.Serve()
		return
	}
	defer s.unregister(c)
	c.Serve()
}

// handleRoomTyping serves GET /v1/rooms/{room}/typing (room path-escaped):
// 200 RoomTyping (self-filtered), 400 invalid room, 401, 403, 503 when the
// workers cannot be asked.
func (s *Server) handleRoomTyping(w http.ResponseWriter, r *http.Request) {
	ident, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	room := r.PathValue("room")
	if err := protocol.ValidateID("room", room); err != nil {
		writeError(w, http.StatusBadRequest, protocol.CodeBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.SnapshotTimeout)
	defer cancel()
	if err := s.authz.Authorize(ctx, ident, room); err != nil {
		if errors.Is(err, authz.ErrForbidden) {
			writeError(w, http.StatusForbidden, protocol.CodeForbidden, "not allowed to read room "+strconv.Quote(room))
		} else {
			writeError(w, http.StatusServiceUnavailable, protocol.CodeUnavailable, "authorisation unavailable; retry")
		}
		return
	}
	users, err := s.pres.Snapshot(ctx, room)
	if err != nil {
		s.log.Debug("snapshot failed", zap.String("room", room), zap.Error(err))
		writeError(w, http.StatusServiceUnavailable, protocol.CodeUnavailable, "typing snapshot unavailable; retry")
		return
	}
	writeJSON(w, http.StatusOK, RoomTyping{Room: room, Users: hub.SelfFilter(users, ident.User)})
}

// handleConfig serves GET /v1/config.
func (s *Server) handleConfig(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, ClientConfig{
		TTLMs:      s.cfg.TypingTTL.Milliseconds(),
		RefreshMs:  s.cfg.TypingRefresh.Milliseconds(),
		IdleStopMs: s.cfg.TypingIdleStop.Milliseconds(),
		Auth:       s.cfg.Auth,
	})
}

// Readiness is the body of /readyz: Ready, and for each dependency "ok" or
// what is wrong; Down lists the failed ones ("nats", "redis", "shutdown").
type Readiness struct {
	Ready  bool              `json:"ready"`
	Down   []string          `json:"down,omitempty"`
	Checks map[string]string `json:"checks"`
}

// adminHandler routes the admin listener.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.handleReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	return mux
}

// handleReady answers 200 only when NATS is connected, Redis answers PING
// and the gateway is not shutting down; 503 otherwise, naming what is down.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	rd := Readiness{Ready: true, Checks: map[string]string{}}
	fail := func(name, why string) {
		rd.Ready = false
		rd.Down = append(rd.Down, name)
		rd.Checks[name] = why
	}
	if s.shuttingDown.Load() {
		fail("shutdown", "shutting down")
	}
	if s.pres.Connected() {
		rd.Checks["nats"] = "ok"
	} else {
		fail("nats", "not connected ("+s.pres.Status()+")")
	}
	ctx, cancel := context.WithTimeout(r.Context(), redisPingTimeout)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		fail("redis", "ping failed: "+err.Error())
	} else {
		rd.Checks["redis"] = "ok"
	}
	status := http.StatusOK
	if !rd.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, rd)
}
