// Package authz decides whether an authenticated user may join a room (and
// read its typing snapshot over HTTP). docs/protocol.md ("Handshake"): ELLIPSIS_AUTHZ is none,
// claims or nats; the three modes are side by side here behind one
// [Authorizer] interface: [AllowAll] (none), [Claims] (the token's rooms
// claim) and [NATS] (a request/reply hook, fail closed), the latter wrapped
// in a [Cache].
//
// The gateway asks before anything reaches NATS (commands, snapshots) or
// Redis (the room's subscription): a denied join costs only the decision.
package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// ErrForbidden is returned when the user may not join the room (error code
// forbidden, HTTP 403).
var ErrForbidden = errors.New("authz: forbidden")

// ErrBadReply is returned (wrapped together with [ErrForbidden]) by [NATS]
// when the hook's reply is not one it understands: not a JSON object with
// a boolean allow, or an allow whose hide_typing_from is not a valid hide
// list (protocol.DecodeUserIDs). The join is denied, as any reply but an
// allow is (fail closed: an allow without its hide list would show the
// user typing they must not see), and the denial is cached like one.
var ErrBadReply = errors.New("authz: bad reply")

// ErrNoAnswer is returned (wrapped together with [ErrForbidden]) by [NATS]
// when the hook did not answer in time or could not be asked: the join is
// denied (fail closed), but the denial is not cached.
var ErrNoAnswer = errors.New("authz: no answer")

// Authorizer decides room access. Authorize returns the grant and nil
// (allowed), an error wrapping [ErrForbidden] (denied), or another error
// when the decision could not be made (the caller answers unavailable).
type Authorizer interface {
	Authorize(ctx context.Context, id auth.Identity, room string) (Grant, error)
}

// Grant is what an allowed decision says beyond yes (docs/protocol.md,
// "Join authorisation hook"): HideTypingFrom, the users whose typing the
// user must not get in that room (the hook reply's hide_typing_from;
// empty from the other modes). Immutable: a cached grant is shared by
// every join it answers.
type Grant struct {
	HideTypingFrom filter.Set
}

// AllowAll allows every user into every room (ELLIPSIS_AUTHZ=none).
type AllowAll struct{}

var _ Authorizer = AllowAll{}

// Authorize implements [Authorizer].
func (AllowAll) Authorize(context.Context, auth.Identity, string) (Grant, error) {
	return Grant{}, nil
}

// Claims allows a user into the rooms listed in their token's rooms claim
// (ELLIPSIS_AUTHZ=claims; auth.Identity.Rooms). An entry is an exact room id
// ("42", "room:42"), or a pattern ending in '*' that matches every room
// starting with what precedes it ("team-7/*" matches "team-7/general";
// "*" alone matches every room). A '*' anywhere else is literal, since
// room ids may contain it; a room id that ends in '*' can therefore only
// be granted through the prefix it starts with. No claim, or an empty
// one, allows no room.
type Claims struct{}

var _ Authorizer = Claims{}

// Authorize implements [Authorizer]. It never does I/O.
func (Claims) Authorize(_ context.Context, id auth.Identity, room string) (Grant, error) {
	if MatchRooms(id.Rooms, room) {
		return Grant{}, nil
	}
	return Grant{}, fmt.Errorf("%w: room not in the token's rooms claim", ErrForbidden)
}

// MatchRooms reports whether room is granted by one of patterns (see
// [Claims]).
func MatchRooms(patterns []string, room string) bool {
	for _, p := range patterns {
		if p == room {
			return true
		}
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(room, prefix) {
			return true
		}
	}
	return false
}

// Requester sends one request and returns the reply payload; the NATS
// connection of the gateway implements it.
type Requester interface {
	Request(ctx context.Context, subject string, data []byte) ([]byte, error)
}

// DefaultTimeout bounds a [NATS] request when its Timeout is zero:
// ELLIPSIS_AUTHZ_TIMEOUT's default (shared/config's table;
// TestPackageDefaultsAreTheTable in services/gateway holds them equal).
const DefaultTimeout = time.Second

// NATS asks a platform service (ELLIPSIS_AUTHZ=nats): it requests Subject
// with {"v":1,"user":"alice","room":"42"} and expects {"allow":true},
// optionally with "hide_typing_from": an array of at most
// protocol.MaxHideTypingFrom user ids hidden from the user in that room
// ([Grant]). {"allow":false}, or any other reply, is a denial (a reply
// that is not a JSON object with a boolean allow, or an allow with an
// invalid hide_typing_from: [ErrBadReply]); no answer within Timeout (or
// the caller's ctx), or NATS being down, is a denial too ([ErrNoAnswer];
// fail closed).
type NATS struct {
	Requester Requester
	Subject   string        // names.AuthzJoinSubject()
	Timeout   time.Duration // ELLIPSIS_AUTHZ_TIMEOUT; zero: DefaultTimeout
}

var _ Authorizer = (*NATS)(nil)

// Authorize implements [Authorizer].
func (a *NATS) Authorize(ctx context.Context, id auth.Identity, room string) (Grant, error) {
	req, _ := json.Marshal(struct {
		V    int    `json:"v"`
		User string `json:"user"`
		Room string `json:"room"`
	}{protocol.Version, id.User, room})
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	data, err := a.Requester.Request(ctx, a.Subject, req)
	if err != nil {
		return Grant{}, fmt.Errorf("%w: %w: %v", ErrForbidden, ErrNoAnswer, err)
	}
	var reply struct {
		Allow          bool            `json:"allow"`
		HideTypingFrom json.RawMessage `json:"hide_typing_from"`
	}
	if err := json.Unmarshal(data, &reply); err != nil {
		return Grant{}, fmt.Errorf("%w: %w: not a JSON object with a boolean allow: %v", ErrForbidden, ErrBadReply, err)
	}
	if !reply.Allow {
		return Grant{}, ErrForbidden
	}
	hide, err := protocol.DecodeUserIDs(protocol.HideTypingFrom, reply.HideTypingFrom)
	if err != nil {
		return Grant{}, fmt.Errorf("%w: %w: %w", ErrForbidden, ErrBadReply, err)
	}
	return Grant{HideTypingFrom: filter.NewSet(hide)}, nil
}
