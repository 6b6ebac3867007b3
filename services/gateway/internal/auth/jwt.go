package auth

import (
	"errors"
	"net/http"

	"github.com/golang-jwt/jwt/v5"
)

// claims are the JWT claims Ellipsis reads: sub (user id, required), exp
// (required), name (optional display name) and share_typing (optional;
// false means the user opted out of sharing typing).
type claims struct {
	jwt.RegisteredClaims
	Name        string `json:"name,omitempty"`
	ShareTyping *bool  `json:"share_typing,omitempty"`
}

// HS256 authenticates JWTs signed with HMAC-SHA256 and a shared secret
// (ELLIPSIS_JWT_SECRET). Tokens with any other alg are refused, so a token
// with alg "none" or an asymmetric alg never passes.
type HS256 struct {
	secret []byte
	parser *jwt.Parser
}

var _ Authenticator = (*HS256)(nil)

// NewHS256 returns an HS256 authenticator; secret must not be empty.
func NewHS256(secret string) (*HS256, error) {
	if secret == "" {
		return nil, errors.New("auth: HS256 needs a non-empty secret")
	}
	return &HS256{
		secret: []byte(secret),
		parser: jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired()),
	}, nil
}

// Authenticate implements [Authenticator]: the token comes from
// [BearerToken].
func (a *HS256) Authenticate(r *http.Request) (Identity, error) {
	tok := BearerToken(r)
	if tok == "" {
		return Identity{}, unauthorized("missing token: send Authorization: Bearer <JWT> or ?access_token=<JWT>")
	}
	return a.Verify(tok)
}

// Verify checks one token and returns its identity; errors are as for
// [Authenticator.Authenticate].
func (a *HS256) Verify(tok string) (Identity, error) {
	var c claims
	_, err := a.parser.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return a.secret, nil })
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrTokenExpired):
		return Identity{}, unauthorized("token expired")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return Identity{}, unauthorized("token signature is invalid")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return Identity{}, unauthorized("token has no exp claim")
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return Identity{}, unauthorized("token algorithm not accepted (want HS256)")
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return Identity{}, unauthorized("token not valid yet (nbf)")
	case errors.Is(err, jwt.ErrTokenMalformed):
		return Identity{}, unauthorized("token is malformed")
	default:
		return Identity{}, unauthorized("token is invalid: " + err.Error())
	}
	if c.Subject == "" {
		return Identity{}, unauthorized("token has no sub claim")
	}
	id := Identity{User: c.Subject, Name: c.Name, ShareTyping: c.ShareTyping == nil || *c.ShareTyping}
	if c.ExpiresAt != nil {
		id.Expires = c.ExpiresAt.Time
	}
	return validate(id)
}
