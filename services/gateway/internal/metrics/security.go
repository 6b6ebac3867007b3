package metrics

import "github.com/prometheus/client_golang/prometheus"

// Security holds the metrics of the gateway's defences against hostile
// clients (docs/security.md); the per-connection limits are counted by
// [Metrics] (rate_limited_total, slow_consumer_closes_total, closes_total,
// errors_total).
type Security struct {
	handshakesRejected *prometheus.CounterVec // label reason
	authz              *prometheus.CounterVec // label result
	jwksRefreshFailed  prometheus.Counter
}

// Handshake rejection reasons (label reason of
// ellipsis_gateway_handshakes_rejected_total).
const (
	RejectShutdown        = "shutdown"           // 503, gateway shutting down
	RejectOrigin          = "origin"             // 403, Origin not allowed
	RejectUnauthorized    = "unauthorized"       // 401, credentials
	RejectBadIdentity     = "bad_request"        // 400, invalid user id or name in valid credentials
	RejectMaxConns        = "max_conns"          // 503, ELLIPSIS_MAX_CONNS
	RejectMaxConnsPerUser = "max_conns_per_user" // 429, ELLIPSIS_MAX_CONNS_PER_USER
)

// Authorisation results (label result of ellipsis_gateway_authz_total).
const (
	AuthzAllow    = "allow"
	AuthzDeny     = "deny"
	AuthzNoAnswer = "no_answer" // authz nats: no answer in time (denied, fail closed)
	AuthzError    = "error"     // the decision could not be made (unavailable)
	AuthzBadReply = "bad_reply" // authz nats: a reply the gateway cannot read, e.g. an invalid hide_typing_from (denied, fail closed)
)

// NewSecurity creates the security metrics and registers them on reg.
func NewSecurity(reg prometheus.Registerer) (*Security, error) {
	s := &Security{
		handshakesRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem, Name: "handshakes_rejected_total",
			Help: "WebSocket handshakes refused before the upgrade, by reason (shutdown, origin, unauthorized, bad_request, max_conns, max_conns_per_user).",
		}, []string{"reason"}),
		authz: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem, Name: "authz_total",
			Help: "Room authorisation decisions (join, watch and HTTP snapshot), by result (allow, deny, no_answer, bad_reply, error); cached answers included.",
		}, []string{"result"}),
		jwksRefreshFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem, Name: "jwks_refresh_failures_total",
			Help: "Failed re-reads of the JWKS (ELLIPSIS_JWKS_FILE or ELLIPSIS_JWKS_URL: unreachable, timed out, not a JWK Set, no usable key); the previous keys stay in use.",
		}),
	}
	for _, c := range []prometheus.Collector{s.handshakesRejected, s.authz, s.jwksRefreshFailed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every series from the start, at zero: an alert on increase() sees
	// the first refusal too (a series born at 1 has no increase).
	for _, r := range []string{RejectShutdown, RejectOrigin, RejectUnauthorized, RejectBadIdentity, RejectMaxConns, RejectMaxConnsPerUser} {
		s.handshakesRejected.WithLabelValues(r)
	}
	for _, r := range []string{AuthzAllow, AuthzDeny, AuthzNoAnswer, AuthzBadReply, AuthzError} {
		s.authz.WithLabelValues(r)
	}
	return s, nil
}

// HandshakeRejected counts one refused handshake; reason is one of the
// Reject* constants.
func (s *Security) HandshakeRejected(reason string) {
	s.handshakesRejected.WithLabelValues(reason).Inc()
}

// Authz counts one authorisation decision; result is one of the Authz*
// constants.
func (s *Security) Authz(result string) { s.authz.WithLabelValues(result).Inc() }

// JWKSRefreshFailed counts one failed re-read of the JWKS.
func (s *Security) JWKSRefreshFailed() { s.jwksRefreshFailed.Inc() }
