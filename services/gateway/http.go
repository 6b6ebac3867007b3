package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	webclient "github.com/ellipsis-chat/ellipsis/clients/js"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/backend"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/session"
	"github.com/ellipsis-chat/ellipsis/shared/admin"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// RoomTyping is the body of a 200 answer of GET /v1/rooms/{room}/typing.
type RoomTyping struct {
	Room  string            `json:"room"`
	Users []protocol.Typist `json:"users"`
	// Total is the number of visible typists (self filtered); Users lists
	// at most the snapshot cap of them. Both are the room itself.
	Total int `json:"total"`
	// Threads lists the room's threads with a typist, as on joined and
	// typing frames (left out when none; protocol.ThreadTypists).
	Threads []protocol.ThreadTypists `json:"threads,omitempty"`
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
	codeUnauthorized       = "unauthorized"
	codeNotFound           = "not_found"
	codeTooManyConnections = "too_many_connections" // 429, ELLIPSIS_MAX_CONNS_PER_USER
)

// retryAfterSeconds is the Retry-After of 503 and 429 handshake answers.
const retryAfterSeconds = "5"

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
	routeSDK(mux)
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
		if s.demoChat != nil {
			mux.Handle("/demo/chat/", http.StripPrefix("/demo/chat", s.demoChat))
		}
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return s.withCORS(mux)
}

// authenticate runs the authenticator and answers 401 (credentials) or 400
// (invalid user id or name) itself; it returns that status, or 0 when the
// request is authenticated.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (auth.Identity, int) {
	id, err := s.authn.Authenticate(r)
	if err == nil {
		return id, 0
	}
	var fe *protocol.FieldError
	if errors.As(err, &fe) {
		writeError(w, http.StatusBadRequest, protocol.CodeBadRequest, fe.Error())
		return auth.Identity{}, http.StatusBadRequest
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="ellipsis"`)
	writeError(w, http.StatusUnauthorized, codeUnauthorized, err.Error())
	return auth.Identity{}, http.StatusUnauthorized
}

// handleWS serves GET /v1/ws. Every check answers before the upgrade, with
// a JSON error body, cheapest first: shutdown (503), Origin (403), the
// gateway's connection limit (503, ELLIPSIS_MAX_CONNS), credentials (401,
// or 400 for an invalid user id or name), the user's connection limit
// (429, ELLIPSIS_MAX_CONNS_PER_USER). Then it upgrades, registers the
// connection and returns; the connection runs in its own goroutine until it
// ends, and its slot is given back then.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	ident, release, ok := s.admitWS(w, r)
	if !ok {
		return
	}
	tr, err := session.Upgrade(&s.upgrader, w, r)
	if err != nil {
		release()
		return // gorilla has answered with an HTTP error
	}
	id := s.gatewayID + ":" + strconv.FormatUint(s.connSeq.Add(1), 10)
	s.runConn(session.New(tr, id, ident, s.sessionConfig(), s.sessionDeps()), release)
}

// admitWS runs handleWS's checks before the upgrade, cheapest first, and
// answers a refused request itself (ok false). When admitted it returns
// the identity and the release of the connection slot taken for it.
func (s *Server) admitWS(w http.ResponseWriter, r *http.Request) (ident auth.Identity, release func(), ok bool) {
	reject := func(reason string, status int, code, msg string) {
		s.sec.met.HandshakeRejected(reason)
		if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", retryAfterSeconds)
		}
		writeError(w, status, code, msg)
	}
	if s.shuttingDown.Load() {
		reject(metrics.RejectShutdown, http.StatusServiceUnavailable, protocol.CodeUnavailable, "gateway shutting down; connect to another instance")
		return ident, nil, false
	}
	if !s.origins.Allowed(r) {
		reject(metrics.RejectOrigin, http.StatusForbidden, protocol.CodeForbidden, "origin "+quoteShort(r.Header.Get("Origin"))+" is not allowed (ELLIPSIS_ALLOWED_ORIGINS)")
		return ident, nil, false
	}
	maxConnsMsg := "gateway is at its connection limit (" + strconv.Itoa(s.cfg.MaxConns) + "); retry later or another instance"
	if s.sec.conns.full() {
		reject(metrics.RejectMaxConns, http.StatusServiceUnavailable, protocol.CodeUnavailable, maxConnsMsg)
		return ident, nil, false
	}
	ident, status := s.authenticate(w, r)
	switch status {
	case 0:
	case http.StatusBadRequest:
		s.sec.met.HandshakeRejected(metrics.RejectBadIdentity)
		return ident, nil, false
	default:
		s.sec.met.HandshakeRejected(metrics.RejectUnauthorized)
		return ident, nil, false
	}
	release, err := s.sec.conns.acquire(ident.User)
	switch {
	case errors.Is(err, errMaxConns):
		reject(metrics.RejectMaxConns, http.StatusServiceUnavailable, protocol.CodeUnavailable, maxConnsMsg)
		return ident, nil, false
	case errors.Is(err, errMaxConnsPerUser):
		reject(metrics.RejectMaxConnsPerUser, http.StatusTooManyRequests, codeTooManyConnections,
			"user "+quoteShort(ident.User)+" has "+strconv.Itoa(s.cfg.MaxConnsPerUser)+" connections open on this gateway already; close one first")
		return ident, nil, false
	}
	return ident, release, true
}

// sessionConfig is every connection's limits, from the gateway's settings.
func (s *Server) sessionConfig() session.Config {
	return session.Config{
		MaxFrameBytes:     s.cfg.MaxFrameBytes,
		MaxRooms:          s.cfg.MaxRoomsPerConn,
		MaxWatched:        s.cfg.MaxWatchedRooms,
		InboundRate:       s.cfg.InboundRate,
		InboundBurst:      s.cfg.InboundBurst,
		OutboundQueue:     s.cfg.OutboundQueue,
		ConflateRoomCap:   s.cfg.SnapshotMax,
		SnapshotTimeout:   s.cfg.SnapshotTimeout,
		PongWait:          s.cfg.PongWait,
		WriteWait:         s.cfg.WriteWait,
		WriteStall:        s.cfg.WriteStall,
		MaxRejectedWindow: s.cfg.InboundMaxRejected,
		Activities:        s.cfg.AcceptedActivities(),
		MaxThreads:        s.cfg.MaxThreadsPerUser,
		TypingTTL:         s.cfg.TypingTTL,
	}
}

// sessionDeps is the gateway-wide collaborators of every connection.
func (s *Server) sessionDeps() session.Deps {
	return session.Deps{
		Hub:        s.hub,
		Backend:    s.pres,
		Authorizer: s.authz,
		Metrics:    s.met,
		Logger:     s.connLog,
		Warn:       s.warn,
		Budgets:    s.sec.budgets,
	}
}

// runConn serves c in its own goroutine and gives its slot back (release)
// when it ends; a connection made while Shutdown began is closed with 1001
// at once.
//
// The handler returns meanwhile: the connection is hijacked, so net/http
// drops its per-request state (its bufio reader and writer, ~10 KiB per
// idle connection) instead of holding it for the connection's lifetime.
// The server's connection registry (register, Shutdown), not
// http.Server, tracks it from here.
func (s *Server) runConn(c *session.Conn, release func()) {
	if !s.register(c) {
		c.Close(session.CloseGoingAway, "gateway shutting down")
		go func() {
			defer release()
			c.Serve()
		}()
		return
	}
	go func() {
		defer release()
		defer s.unregister(c)
		c.Serve()
	}()
}

// handleRoomTyping serves GET /v1/rooms/{room}/typing (room path-escaped):
// 200 RoomTyping (self-filtered, and without the users the token's and
// the authoriser's hide lists name), 400 invalid room, 401, 429 rate_limited
// with Retry-After (whole seconds) when the user is over its snapshot
// budget (snapshot_budget.go; checked before authorisation, so a refused
// request costs no backend call), 403, 503 when the workers cannot be
// asked. The snapshot is shared with concurrent askers of the room
// (hub.Hub.Snapshot).
func (s *Server) handleRoomTyping(w http.ResponseWriter, r *http.Request) {
	ident, status := s.authenticate(w, r)
	if status != 0 {
		return
	}
	room := r.PathValue("room")
	if err := protocol.ValidateID("room", room); err != nil {
		writeError(w, http.StatusBadRequest, protocol.CodeBadRequest, err.Error())
		return
	}
	if ok, retry := s.sec.snaps.take(ident.User, time.Now()); !ok {
		s.met.Snapshot(metrics.SnapshotRateLimited)
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(retry.Seconds()))), 10))
		writeError(w, http.StatusTooManyRequests, protocol.CodeRateLimited, fmt.Sprintf(
			"user %s asked too many snapshots: at most %g per second, burst %d (ELLIPSIS_HTTP_SNAPSHOT_RATE, ELLIPSIS_HTTP_SNAPSHOT_BURST); retry in %d ms",
			quoteShort(ident.User), s.cfg.HTTPSnapshotRate, s.cfg.HTTPSnapshotBurst, int64(math.Ceil(float64(retry)/float64(time.Millisecond)))))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.SnapshotTimeout)
	defer cancel()
	grant, err := s.authz.Authorize(ctx, ident, room)
	if err != nil {
		if errors.Is(err, authz.ErrForbidden) {
			writeError(w, http.StatusForbidden, protocol.CodeForbidden, "not allowed to read room "+strconv.Quote(room))
		} else {
			writeError(w, http.StatusServiceUnavailable, protocol.CodeUnavailable, "authorisation unavailable; retry")
		}
		return
	}
	users, err := s.hub.Snapshot(ctx, room)
	if errors.Is(err, hub.ErrClosed) {
		w.Header().Set("Retry-After", retryAfterSeconds)
		writeError(w, http.StatusServiceUnavailable, protocol.CodeUnavailable, "gateway shutting down; retry on another instance")
		return
	} else if err != nil {
		s.log.Debug("snapshot failed", zap.String("room", room), zap.Error(err))
		writeError(w, http.StatusServiceUnavailable, protocol.CodeUnavailable, "typing snapshot unavailable ("+backend.Reason(err)+"); retry")
		return
	}
	// The user's hide lists apply here too (docs/protocol.md, "Per-viewer filters").
	own, _ := filter.New(ident.HideTypingFrom, grant.HideTypingFrom, true).Snapshot(users.WithoutUser(ident.User))
	snap := protocol.NewTypingSnapshot(room, own, "")
	writeJSON(w, http.StatusOK, RoomTyping{Room: room, Users: snap.Users, Total: snap.Total, Threads: snap.Threads})
}

// handleConfig serves GET /v1/config.
func (s *Server) handleConfig(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, protocol.ClientConfig{
		TTLMs:      s.cfg.TypingTTL.Milliseconds(),
		RefreshMs:  s.cfg.TypingRefresh.Milliseconds(),
		IdleStopMs: s.cfg.TypingIdleStop.Milliseconds(),
		Auth:       s.cfg.Auth,

		MaxFrameBytes:   s.cfg.MaxFrameBytes,
		MaxWatchedRooms: s.cfg.MaxWatchedRooms,
		WatchIntervalMs: s.cfg.WatchInterval.Milliseconds(),

		Activities:        s.cfg.AcceptedActivities(),
		MaxThreadsPerUser: s.cfg.MaxThreadsPerUser,
	})
}

// newAdmin builds the admin listener (package admin): /readyz is 200 only
// when NATS is connected and every Redis Pub/Sub link of the hub is up
// (cached state, no I/O: the links are PINGed every
// ELLIPSIS_PUBSUB_PING_INTERVAL, so /readyz answers at once whatever Redis
// does), and 503 "shutdown" at once when Shutdown began (the lame duck).
func (s *Server) newAdmin() *admin.Server {
	return admin.New(admin.Options{
		Gatherer: s.reg,
		Checks: []admin.Check{
			{Name: "nats", Probe: func(context.Context) error {
				if !s.pres.Connected() {
					return errors.New("not connected (" + s.pres.Status() + ")")
				}
				return nil
			}},
			{Name: "redis", Probe: func(context.Context) error {
				if h := s.hub.Health(); !h.OK {
					return errors.New("pubsub link down: " + formatDown(h.Down))
				}
				return nil
			}},
		},
		ShuttingDown:   s.shuttingDown.Load,
		ShutdownReason: "shutting down (lame duck)",
		Logger:         s.log,
		Pprof:          s.cfg.Pprof,
	})
}

// formatDown lists down links as "link: error; ...", sorted.
func formatDown(down map[string]string) string {
	parts := make([]string, 0, len(down))
	for l, why := range down {
		parts = append(parts, l+": "+why)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// quoteShort quotes a client-chosen string for an error message, cut to 64
// bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.Quote(s)
}
