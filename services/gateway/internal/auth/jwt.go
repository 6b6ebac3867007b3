package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Signing algorithms the gateway accepts (docs/protocol.md, "Handshake"). HS256 needs
// a shared secret; the others need a JWKS (file or URL). Every other alg ("none",
// HS384, RS512, PS256, ...) is refused.
const (
	AlgHS256 = "HS256"
	AlgRS256 = "RS256"
	AlgES256 = "ES256"
	AlgEdDSA = "EdDSA"
)

// MaxTokenBytes is the longest token accepted; longer ones are refused
// (401) before any parsing.
const MaxTokenBytes = 16 << 10

// claims are the JWT claims Ellipsis reads: sub (user id, required), exp
// (required), nbf, iss and aud (checked by golang-jwt), name (optional
// display name), share_typing (optional; false means the user opted out of
// sharing typing), rooms (optional; the rooms the user may join with
// authz "claims") and hide_typing_from (optional; the users whose typing
// the connection never gets, kept raw so that a wrong JSON type is
// refused naming the claim rather than as a malformed token).
type claims struct {
	jwt.RegisteredClaims
	Name           string          `json:"name,omitempty"`
	ShareTyping    *bool           `json:"share_typing,omitempty"`
	Rooms          []string        `json:"rooms,omitempty"`
	HideTypingFrom json.RawMessage `json:"hide_typing_from,omitempty"`
}

// JWTOptions configure a [JWT] authenticator. At least one of Secret and
// JWKS is required.
type JWTOptions struct {
	// Secret is the HS256 shared secret (ELLIPSIS_JWT_SECRET). Empty: HS256
	// tokens are refused.
	Secret string
	// JWKS holds the RS256 / ES256 / EdDSA public keys (ELLIPSIS_JWKS_FILE
	// or ELLIPSIS_JWKS_URL).
	// Nil: those tokens are refused.
	JWKS *JWKS
	// Issuer, when not empty, is the only accepted iss; tokens without iss
	// are refused then (ELLIPSIS_JWT_ISSUER).
	Issuer string
	// Audience, when not empty, lists accepted aud values; the token must
	// name at least one (ELLIPSIS_JWT_AUDIENCE).
	Audience []string
	// Leeway is the clock skew allowed on exp and nbf (ELLIPSIS_JWT_LEEWAY).
	// Zero means none.
	Leeway time.Duration
	// Now is the clock; nil means time.Now. For tests.
	Now func() time.Time
}

// JWT authenticates JSON Web Tokens with golang-jwt: HS256 with a shared
// secret and RS256 / ES256 / EdDSA with keys from a JWKS (file or URL). exp is
// required; nbf is checked when present; iss and aud when configured. A
// key is chosen by the token's alg: HS256 only ever verifies with the
// secret and the asymmetric algs only with JWKS keys of the matching type,
// so no token can make the gateway verify with the wrong kind of key
// (alg-confusion).
type JWT struct {
	secret   []byte
	jwks     *JWKS
	algs     []string
	parser   *jwt.Parser
	issuer   string
	audience []string
	leeway   time.Duration
}

var _ Authenticator = (*JWT)(nil)

// NewJWT returns a JWT authenticator; it fails when neither a secret nor a
// JWKS is given.
func NewJWT(o JWTOptions) (*JWT, error) {
	a := &JWT{jwks: o.JWKS, issuer: o.Issuer, audience: o.Audience, leeway: o.Leeway}
	if o.Secret != "" {
		a.secret = []byte(o.Secret)
		a.algs = append(a.algs, AlgHS256)
	}
	if o.JWKS != nil {
		a.algs = append(a.algs, AlgRS256, AlgES256, AlgEdDSA)
	}
	if len(a.algs) == 0 {
		return nil, errors.New("auth: JWT needs a secret (HS256) or a JWKS (RS256 / ES256 / EdDSA)")
	}
	popts := []jwt.ParserOption{jwt.WithValidMethods(a.algs), jwt.WithExpirationRequired(), jwt.WithLeeway(o.Leeway)}
	if o.Issuer != "" {
		popts = append(popts, jwt.WithIssuer(o.Issuer))
	}
	if len(o.Audience) > 0 {
		popts = append(popts, jwt.WithAudience(o.Audience...))
	}
	if o.Now != nil {
		popts = append(popts, jwt.WithTimeFunc(o.Now))
	}
	a.parser = jwt.NewParser(popts...)
	return a, nil
}

// NewHS256 returns a JWT authenticator for HS256 tokens only; secret must
// not be empty.
func NewHS256(secret string) (*JWT, error) {
	if secret == "" {
		return nil, errors.New("auth: HS256 needs a non-empty secret")
	}
	return NewJWT(JWTOptions{Secret: secret})
}

// Authenticate implements [Authenticator]: the token comes from
// [BearerToken].
func (a *JWT) Authenticate(r *http.Request) (Identity, error) {
	tok, err := BearerToken(r)
	if err != nil {
		return Identity{}, err
	}
	if tok == "" {
		return Identity{}, unauthorized("missing token: send Authorization: Bearer <JWT>, Sec-WebSocket-Protocol: " + ProtocolV1 + ", " + ProtocolBearerPrefix + "<JWT>, or ?access_token=<JWT> (deprecated)")
	}
	return a.Verify(tok)
}

// keyFor picks the verification key by the token's alg (already checked
// against a.algs by the parser).
func (a *JWT) keyFor(t *jwt.Token) (any, error) {
	if t.Method.Alg() == AlgHS256 {
		if a.secret == nil {
			return nil, errAlgNotAccepted
		}
		return a.secret, nil
	}
	if a.jwks == nil {
		return nil, errAlgNotAccepted
	}
	return a.jwks.Key(t)
}

var errAlgNotAccepted = errors.New("auth: alg not accepted")

// Verify checks one token and returns its identity; errors are as for
// [Authenticator.Authenticate], and each 401 message names the reason. A
// signed token whose rooms or hide_typing_from claim is invalid (not an
// array of ids, over protocol.MaxHideTypingFrom ids, an invalid id) is a
// *protocol.FieldError naming the claim (400).
func (a *JWT) Verify(tok string) (Identity, error) {
	if len(tok) > MaxTokenBytes {
		return Identity{}, unauthorized(fmt.Sprintf("token is too long (%d bytes, at most %d)", len(tok), MaxTokenBytes))
	}
	var c claims
	t, err := a.parser.ParseWithClaims(tok, &c, a.keyFor)
	if err != nil {
		return Identity{}, a.reason(t, &c, err)
	}
	if c.Subject == "" {
		return Identity{}, unauthorized("token has no sub claim")
	}
	id := Identity{User: c.Subject, Name: c.Name, ShareTyping: c.ShareTyping == nil || *c.ShareTyping}
	if c.ExpiresAt != nil {
		id.Expires = c.ExpiresAt.Add(a.leeway)
	}
	if c.Rooms != nil {
		for i, r := range c.Rooms {
			if err := protocol.ValidateID("rooms["+strconv.Itoa(i)+"]", r); err != nil {
				return Identity{}, err
			}
		}
		id.Rooms = c.Rooms
	}
	hide, err := protocol.DecodeUserIDs(protocol.HideTypingFrom, c.HideTypingFrom)
	if err != nil {
		return Identity{}, err
	}
	id.HideTypingFrom = filter.NewSet(hide)
	return validate(id)
}

// reason turns a golang-jwt error into a 401 naming why the token was
// refused. t and c are what the parser could read before failing.
func (a *JWT) reason(t *jwt.Token, c *claims, err error) error {
	alg := ""
	if t != nil {
		if s, ok := t.Header["alg"].(string); ok {
			alg = s
		}
	}
	var uk *unknownKeyError
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		// golang-jwt names what is wrong ("token is malformed: could not
		// JSON decode claim: ..."); it never holds the token itself.
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		if !strings.HasPrefix(msg, "token is malformed") {
			msg = "token is malformed: " + msg
		}
		return unauthorized(msg)
	case t != nil && !slices.Contains(a.algs, alg), errors.Is(err, errAlgNotAccepted):
		return unauthorized(fmt.Sprintf("token algorithm %s is not accepted (accepted: %s)", quoteShort(alg), strings.Join(a.algs, ", ")))
	case errors.As(err, &uk):
		return unauthorized(uk.Error())
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return unauthorized("token cannot be verified: no usable key")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return unauthorized("token signature is invalid")
	case errors.Is(err, jwt.ErrTokenExpired):
		return unauthorized("token expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return unauthorized("token not valid yet (nbf)")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		switch {
		case c.ExpiresAt == nil:
			return unauthorized("token has no exp claim")
		case a.issuer != "" && c.Issuer == "":
			return unauthorized("token has no iss claim (ELLIPSIS_JWT_ISSUER is set)")
		default:
			return unauthorized("token has no aud claim (ELLIPSIS_JWT_AUDIENCE is set)")
		}
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return unauthorized("token issuer " + quoteShort(c.Issuer) + " is not accepted")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return unauthorized("token audience is not accepted")
	default:
		return unauthorized("token is invalid")
	}
}

// quoteShort quotes an attacker-chosen string for an error message, cut to
// 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.Quote(s)
}
