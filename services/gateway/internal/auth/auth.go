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
	"strings"
	"time"

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
// ?user=<id> and the display name from the optional &name=. Anyone can be
// anyone; the gateway logs a warning at start.
type None struct{}

var _ Authenticator = None{}

// Authenticate implements [Authenticator].
func (None) Authenticate(r *http.Request) (Identity, error) {
	q := r.URL.Query()
	if !q.Has("user") {
		return Identity{}, unauthorized("missing user query parameter (auth=none: ?user=<id>&name=<display name>)")
	}
	return validate(Identity{User: q.Get("user"), Name: q.Get("name"), ShareTyping: true})
}

// BearerToken returns the token from "Authorization: Bearer <token>" or, for
// browsers that cannot set headers on a WebSocket, from ?access_token=. The
// header wins. It returns "" when there is none.
func BearerToken(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	return r.URL.Query().Get("access_token")
}
