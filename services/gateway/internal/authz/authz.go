// Package authz decides whether an authenticated user may join a room (and
// read its typing snapshot). PROTOCOL.md: ELLIPSIS_AUTHZ is none, claims or
// nats. [AllowAll] (none) and [NATS] (request/reply hook) live here; a
// claims-based Authorizer plugs in the same way.
package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// ErrForbidden is returned when the user may not join the room (error code
// forbidden, HTTP 403).
var ErrForbidden = errors.New("authz: forbidden")

// Authorizer decides room access. Authorize returns nil (allowed), an error
// wrapping [ErrForbidden] (denied), or another error when the decision could
// not be made (the caller answers unavailable).
type Authorizer interface {
	Authorize(ctx context.Context, id auth.Identity, room string) error
}

// AllowAll allows every user into every room (ELLIPSIS_AUTHZ=none).
type AllowAll struct{}

var _ Authorizer = AllowAll{}

// Authorize implements [Authorizer].
func (AllowAll) Authorize(context.Context, auth.Identity, string) error { return nil }

// Requester sends one request and returns the reply payload; the NATS
// connection of the gateway implements it.
type Requester interface {
	Request(ctx context.Context, subject string, data []byte) ([]byte, error)
}

// NATS asks a platform service (ELLIPSIS_AUTHZ=nats): it requests Subject
// with {"v":1,"user":"alice","room":"42"} and expects {"allow":true}. No
// answer in time, an error or anything else means deny (fail closed).
type NATS struct {
	Requester Requester
	Subject   string // names.AuthzJoinSubject()
}

var _ Authorizer = (*NATS)(nil)

// Authorize implements [Authorizer]. The caller bounds ctx.
func (a *NATS) Authorize(ctx context.Context, id auth.Identity, room string) error {
	req, _ := json.Marshal(struct {
		V    int    `json:"v"`
		User string `json:"user"`
		Room string `json:"room"`
	}{protocol.Version, id.User, room})
	data, err := a.Requester.Request(ctx, a.Subject, req)
	if err != nil {
		return fmt.Errorf("%w: no authorisation answer: %v", ErrForbidden, err)
	}
	var reply struct {
		Allow bool `json:"allow"`
	}
	if json.Unmarshal(data, &reply) != nil || !reply.Allow {
		return ErrForbidden
	}
	return nil
}
