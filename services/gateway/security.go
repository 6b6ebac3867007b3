package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/session"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
)

// security holds the gateway-wide defences against hostile clients that
// are not per connection (docs/security.md): the authenticator, the
// connection limits, the per-user snapshot budgets (HTTP, and the
// WebSocket one shared by a user's connections) and their metrics. The
// per-connection limits live in internal/session.
type security struct {
	authn auth.Authenticator
	jwks  *auth.JWKS // nil without ELLIPSIS_JWKS_FILE / ELLIPSIS_JWKS_URL
	conns *connLimiter
	snaps *userBudgets // per-user budget of GET /v1/rooms/{room}/typing (snapshot_budget.go)
	// budgets: per-user snapshot budgets of the WebSocket connections
	// (internal/session/budgets.go).
	budgets *session.Budgets
	met     *metrics.Security
}

// newSecurity builds the authenticator from cfg (reading the JWKS file or
// fetching the JWKS URL, which must hold at least one usable key: the
// gateway fails closed) and the connection limits, and registers the
// security metrics on reg. Stop it with close.
func newSecurity(cfg config.Config, reg prometheus.Registerer, log *zap.Logger) (*security, error) {
	met, err := metrics.NewSecurity(reg)
	if err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	// The connection limit as a gauge, so that alerts and the dashboard
	// compare ellipsis_gateway_connections with it (deploy/monitoring).
	maxConns := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: metrics.Subsystem, Name: "max_connections",
		Help: "The gateway's limit of open WebSocket connections (ELLIPSIS_MAX_CONNS); handshakes beyond it are refused with 503 (handshakes_rejected_total{reason=\"max_conns\"}).",
	})
	maxConns.Set(float64(cfg.MaxConns))
	if err := reg.Register(maxConns); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	s := &security{
		conns: &connLimiter{max: cfg.MaxConns, perUser: cfg.MaxConnsPerUser, users: map[string]int{}},
		snaps: newUserBudgets(cfg.HTTPSnapshotRate, cfg.HTTPSnapshotBurst, cfg.HTTPSnapshotUsers),
		met:   met,
	}
	if s.budgets, err = session.NewBudgets(session.BudgetConfig{
		FreeJoins: cfg.MaxRoomsPerConn, SnapshotRate: cfg.SnapshotRate, SnapshotBurst: cfg.SnapshotBurst, Users: cfg.SnapshotUsers,
		Watches: cfg.MaxWatchedRooms,
	}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	switch cfg.Auth {
	case config.AuthNone:
		s.authn = auth.None{}
	case config.AuthJWT:
		o := auth.JWTOptions{Secret: cfg.JWTSecret, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, Leeway: cfg.JWTLeeway}
		if cfg.JWKSFile != "" || cfg.JWKSURL != "" {
			jo := auth.JWKSOptions{
				File: cfg.JWKSFile, URL: cfg.JWKSURL, Reload: cfg.JWKSReload, Timeout: cfg.JWKSTimeout,
				Log:            log.Named("jwks"),
				OnRefreshError: func(error) { met.JWKSRefreshFailed() },
			}
			if cfg.JWKSCA != "" {
				if jo.RootCAs, err = readCAs(cfg.JWKSCA); err != nil {
					return nil, fmt.Errorf("gateway: ELLIPSIS_JWKS_CA: %w", err)
				}
			}
			// The first read is bounded by ELLIPSIS_JWKS_TIMEOUT.
			if s.jwks, err = auth.NewJWKS(context.Background(), jo); err != nil {
				return nil, fmt.Errorf("gateway: %w", err)
			}
			o.JWKS = s.jwks
		}
		a, err := auth.NewJWT(o)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("gateway: %w", err)
		}
		s.authn = a
	default:
		return nil, fmt.Errorf("gateway: ELLIPSIS_AUTH %q is not none or jwt", cfg.Auth)
	}
	return s, nil
}

// close stops the JWKS refresh (ELLIPSIS_JWKS_URL). Safe to call twice.
func (s *security) close() {
	if s.jwks != nil {
		s.jwks.Close()
	}
}

// readCAs reads a PEM file of CA certificates.
func readCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// authorizer builds the authorisation mode of cfg; req asks the NATS hook
// (authz "nats"). Decisions are counted, and the hook's bad replies logged
// on log (at most once a minute).
func (s *security) authorizer(cfg config.Config, req authz.Requester, subject string, log *zap.Logger) authz.Authorizer {
	var a authz.Authorizer
	switch cfg.Authz {
	case config.AuthzClaims:
		a = authz.Claims{}
	case config.AuthzNATS:
		a = &authz.Cache{
			Next:     &authz.NATS{Requester: req, Subject: subject, Timeout: cfg.AuthzTimeout},
			AllowTTL: cfg.AuthzCacheTTL,
			DenyTTL:  cfg.AuthzDenyCacheTTL,
		}
	default:
		a = authz.AllowAll{}
	}
	return countedAuthorizer{next: a, met: s.met, warn: ratelog.New(log, time.Minute)}
}

// countedAuthorizer counts the decisions of another Authorizer and logs
// the hook's bad replies (a platform bug: every join it answers so is
// denied), rate-limited.
type countedAuthorizer struct {
	next authz.Authorizer
	met  *metrics.Security
	warn *ratelog.Logger
}

func (c countedAuthorizer) Authorize(ctx context.Context, id auth.Identity, room string) (authz.Grant, error) {
	g, err := c.next.Authorize(ctx, id, room)
	switch {
	case err == nil:
		c.met.Authz(metrics.AuthzAllow)
	case errors.Is(err, authz.ErrNoAnswer):
		c.met.Authz(metrics.AuthzNoAnswer)
	case errors.Is(err, authz.ErrBadReply):
		c.met.Authz(metrics.AuthzBadReply)
		c.warn.Warn("authz-bad-reply", "join authoriser sent a reply the gateway cannot read; the join is denied (logged at most once a minute)",
			zap.String("user", id.User), zap.String("room", room), zap.Error(err))
	case errors.Is(err, authz.ErrForbidden):
		c.met.Authz(metrics.AuthzDeny)
	default:
		c.met.Authz(metrics.AuthzError)
	}
	return g, err
}

// Errors of connLimiter.acquire.
var (
	errMaxConns        = errors.New("gateway: connection limit reached")
	errMaxConnsPerUser = errors.New("gateway: per-user connection limit reached")
)

// connLimiter caps open WebSocket connections per gateway
// (ELLIPSIS_MAX_CONNS) and per user on this gateway
// (ELLIPSIS_MAX_CONNS_PER_USER). The per-user count is local: with N
// gateways behind a load balancer a user may hold up to N times the limit.
type connLimiter struct {
	max, perUser int

	mu    sync.Mutex
	total int
	users map[string]int // user -> open connections; no zero entries
}

// full reports whether no connection slot is left (a cheap check before
// spending CPU on a token).
func (l *connLimiter) full() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total >= l.max
}

// acquire takes a slot for user, or fails with errMaxConns or
// errMaxConnsPerUser. release gives the slot back; call it exactly once.
func (l *connLimiter) acquire(user string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total >= l.max:
		return nil, errMaxConns
	case l.users[user] >= l.perUser:
		return nil, errMaxConnsPerUser
	}
	l.total++
	l.users[user]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.users[user]--; l.users[user] <= 0 {
				delete(l.users, user)
			}
		})
	}, nil
}
