// Package auth authenticates WebSocket handshakes and HTTP API calls
// (docs/protocol.md, "Handshake"): it turns a request into an [Identity] or an error.
//
// Implementations side by side: [None] (development, ?user=&name=) and
// [JWT] (HS256 with a shared secret, RS256 / ES256 / EdDSA with keys from a
// JWKS file re-read when it changes or a JWKS URL refreshed periodically,
// see [JWKS]).
package auth

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Identity is who a connection or request acts as.
type Identity struct {
	// User is the user id (1..256 bytes, protocol.ValidateID).
	User string
	// Name is the optional display name passed through on events.
	Name string
	// ShareTyping is false when the user opted out (JWT claim
	// share_typing:false): the gateway then publishes none of their typing
	// commands.
	ShareTyping bool
	// Expires is when the credentials stop being valid (JWT exp plus the
	// configured leeway); the zero value means never. A WebSocket is closed
	// with 1008 at that time.
	Expires time.Time
	// Rooms is the JWT's rooms claim: exact room ids and "prefix*"
	// patterns the user may join (authz "claims"). Nil without the claim.
	Rooms []string
	// HideTypingFrom is the users whose typing the connection never gets
	// (JWT claim hide_typing_from, or ?hide_typing_from= with auth none;
	// at most protocol.MaxHideTypingFrom ids): docs/protocol.md,
	// "Per-viewer filters". Empty without the claim.
	HideTypingFrom filter.Set
}

// Authenticator checks the credentials of a request.
//
// Authenticate returns an error wrapping [ErrUnauthorized] (answer 401) when
// credentials are missing, malformed, expired or badly signed, and a
// *protocol.FieldError (answer 400) when they are valid but carry an invalid
// user id or name. Messages name the reason and never echo a secret.
type Authenticator interface {
	Authenticate(r *http.Request) (Identity, error)
}

// ErrUnauthorized is wrapped by every credential failure.
var ErrUnauthorized = errors.New("unauthorized")

// unauthorized returns an error wrapping ErrUnauthorized whose message is msg.
func unauthorized(msg string) error { return &authError{msg} }

type authError struct{ msg string }

func (e *authError) Error() string        { return e.msg }
func (e *authError) Is(target error) bool { return target == ErrUnauthorized }

// validate checks the user id and display name of an identity.
func validate(id Identity) (Identity, error) {
	if err := protocol.ValidateID("user", id.User); err != nil {
		return Identity{}, err
	}
	if err := protocol.ValidateName("name", id.Name); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// None is development mode (ELLIPSIS_AUTH=none): the user id comes from
// ?user=<id>, the display name from the optional &name=, and the hide
// list (the JWT claim hide_typing_from's stand-in) from the optional
// &hide_typing_from=<id>, one parameter per user id, repeated (ids may
// hold commas). Anyone can be anyone; the gateway logs a warning at start.
type None struct{}

var _ Authenticator = None{}

// Authenticate implements [Authenticator]. An invalid hide list (more than
// protocol.MaxHideTypingFrom ids, an invalid id) is a *protocol.FieldError
// naming hide_typing_from (400), as an invalid user id is.
func (None) Authenticate(r *http.Request) (Identity, error) {
	q := r.URL.Query()
	if !q.Has("user") {
		return Identity{}, unauthorized("missing user query parameter (auth=none: ?user=<id>&name=<display name>)")
	}
	hide := q[protocol.HideTypingFrom]
	if err := protocol.ValidateUserIDs(protocol.HideTypingFrom, hide); err != nil {
		return Identity{}, err
	}
	return validate(Identity{User: q.Get("user"), Name: q.Get("name"), ShareTyping: true, HideTypingFrom: filter.NewSet(hide)})
}

// Subprotocol names of the WebSocket handshake (docs/protocol.md,
// "Where the token travels"). A browser cannot set headers on a WebSocket, so the SDK
// offers Sec-WebSocket-Protocol: ellipsis.v1, ellipsis.bearer.<JWT> (the
// pattern of Kubernetes' base64url.bearer.authorization.k8s.io.<token>; a
// JWT's characters are all RFC 7230 token characters). The gateway selects
// ProtocolV1 and never echoes the token entry.
const (
	ProtocolV1           = "ellipsis.v1"
	ProtocolBearerPrefix = "ellipsis.bearer."
)

// BearerToken returns the token of a request, from
// "Authorization: Bearer <token>", else a Sec-WebSocket-Protocol entry
// "ellipsis.bearer.<token>", else ?access_token= (deprecated: access logs keep
// URLs; the subprotocol is read only on a WebSocket handshake). Precedence is
// that order, but two sources carrying different tokens are an error
// wrapping [ErrUnauthorized] naming both, as are an Authorization header of
// another scheme when no source carries a token (with one, such a header,
// e.g. a browser's Basic credentials, is ignored), two bearer subprotocol entries, an empty token and a
// token over [MaxTokenBytes]; a bearer entry without ellipsis.v1 offered is
// a *protocol.FieldError (400). It returns "" and no error when there is none.
// Messages never echo a token.
func BearerToken(r *http.Request) (string, error) {
	type found struct{ src, tok string }
	var got []found
	// An Authorization header of another scheme (Basic credentials a
	// browser resends to a staging site behind a password, or a proxy's)
	// is not ours: it is ignored when another source carries the token, and
	// named in the error when none does.
	foreign := false
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			got = append(got, found{"Authorization header", strings.TrimSpace(tok)})
		} else {
			foreign = true
		}
	}
	var proto []string
	v1 := false
	// Subprotocols exist only on a WebSocket handshake (RFC 6455 4.1).
	var protos []string
	if websocket.IsWebSocketUpgrade(r) {
		protos = websocketProtocols(r)
	}
	for _, p := range protos {
		if tok, ok := strings.CutPrefix(p, ProtocolBearerPrefix); ok {
			proto = append(proto, tok)
		}
		v1 = v1 || p == ProtocolV1
	}
	switch {
	case len(proto) > 0 && !v1:
		// The gateway selects ellipsis.v1; without it offered it selects
		// nothing and a browser fails the connection (RFC 6455 4.1).
		return "", &protocol.FieldError{Field: "Sec-WebSocket-Protocol", Reason: "offer " + ProtocolV1 + " with " + ProtocolBearerPrefix + "<JWT>"}
	case len(proto) > 1:
		return "", unauthorized("Sec-WebSocket-Protocol: more than one " + ProtocolBearerPrefix + "<JWT> entry")
	case len(proto) == 1:
		got = append(got, found{"Sec-WebSocket-Protocol " + ProtocolBearerPrefix + "<JWT>", proto[0]})
	}
	if q := r.URL.Query(); q.Has("access_token") {
		got = append(got, found{"?access_token=", q.Get("access_token")})
	}
	if len(got) == 0 {
		if foreign {
			return "", unauthorized("Authorization header: want \"Bearer <JWT>\"")
		}
		return "", nil
	}
	for _, f := range got {
		if f.tok == "" {
			return "", unauthorized(f.src + ": empty token")
		}
		if len(f.tok) > MaxTokenBytes {
			return "", unauthorized(f.src + ": token is too long (" + strconv.Itoa(len(f.tok)) + " bytes, at most " + strconv.Itoa(MaxTokenBytes) + ")")
		}
	}
	for _, f := range got[1:] {
		if f.tok != got[0].tok {
			return "", unauthorized("conflicting tokens in " + got[0].src + " and " + f.src + ": send one")
		}
	}
	return got[0].tok, nil
}

// websocketProtocols returns the entries of every Sec-WebSocket-Protocol
// header (a comma-separated list, RFC 6455 section 4.1), trimmed.
func websocketProtocols(r *http.Request) []string {
	var out []string
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}
