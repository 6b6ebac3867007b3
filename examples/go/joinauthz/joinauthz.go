// Package joinauthz is a join authoriser: the NATS responder that a
// gateway with ELLIPSIS_AUTHZ=nats asks before a user joins a room (or
// reads its snapshot over HTTP) (docs/protocol.md, "Join authorisation
// hook"). The gateway requests "<prefix>.authz.v1.join" with
//
//	{"v":1,"user":"alice","room":"42"}
//
// and allows the join only on a reply with "allow" true. An allow may
// carry "hide_typing_from", the users whose typing the user never gets in
// that room (docs/protocol.md, "Per-viewer filters"):
//
//	{"allow":true}
//	{"allow":true,"hide_typing_from":["bob","carol"]}
//
// Anything else ({"allow":false}, a reply the gateway cannot read, an
// allow whose list is not at most 1,000 valid user ids) and no reply
// within ELLIPSIS_AUTHZ_TIMEOUT (1 s) is a denial, so the policy must
// answer fast: look the membership up in memory or a local cache, not in
// a slow database call per join. The gateway caches allows, with their
// list, for ELLIPSIS_AUTHZ_CACHE_TTL (30 s) and denials for
// ELLIPSIS_AUTHZ_DENY_CACHE_TTL (2 s); a connection keeps the list it got
// at its join until it leaves the room.
package joinauthz

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// QueueGroup lets several replicas of the authoriser share the requests:
// each request goes to one of them.
const QueueGroup = "join-authz"

// Request is the gateway's question.
type Request struct {
	V    int    `json:"v"`
	User string `json:"user"`
	Room string `json:"room"`
}

// Reply is the answer: Allow true allows; HideTypingFrom (only with an
// allow; omitted when empty) lists the users whose typing the user does
// not get in the room.
type Reply struct {
	Allow          bool     `json:"allow"`
	HideTypingFrom []string `json:"hide_typing_from,omitempty"`
}

// Decision is a [Policy]'s verdict on one (user, room).
type Decision struct {
	// Allow lets the user join the room.
	Allow bool
	// HideTypingFrom, with Allow, hides these users' typing from the user
	// in the room: at most protocol.MaxHideTypingFrom (1,000) user ids,
	// each valid by protocol.ValidateID (duplicates count). nil or empty:
	// none hidden.
	HideTypingFrom []string
}

// Allow is the decision that allows, hiding the typing of hide (none when
// empty).
func Allow(hide ...string) Decision { return Decision{Allow: true, HideTypingFrom: hide} }

// Deny is the decision that denies.
var Deny = Decision{}

// Policy decides whether user may join room, and whose typing they do not
// get there. It runs on the subscription's goroutine, one request at a
// time: it must be quick (well under the gateway's 1 s timeout) and safe
// to call from that goroutine.
type Policy func(user, room string) Decision

// Serve answers "<subjectPrefix>.authz.v1.join" ("" = "ellipsis") in queue
// group [QueueGroup] with policy's decision. A request that is not valid
// JSON, has a "v" other than 1 or an invalid user or room id is denied
// without asking the policy. An allow whose HideTypingFrom breaks the
// rules of protocol.ValidateUserIDs is answered as a denial, which is how
// the gateway would take that reply (fail closed: an allow without the
// list would show typing the user must not see); check a configured list
// at start with protocol.ValidateUserIDs, as the join-authz command does.
// Unsubscribe (or Drain) the returned subscription to stop.
func Serve(nc *nats.Conn, subjectPrefix string, policy Policy) (*nats.Subscription, error) {
	subject := names.New("", subjectPrefix).AuthzJoinSubject()
	deny, _ := json.Marshal(Reply{Allow: false})
	sub, err := nc.QueueSubscribe(subject, QueueGroup, func(m *nats.Msg) {
		_ = m.Respond(answer(m.Data, policy, deny))
	})
	if err != nil {
		return nil, fmt.Errorf("join authoriser: subscribe %s: %w", subject, err)
	}
	return sub, nil
}

// answer is the reply to the request data: policy's decision as JSON, or
// deny.
func answer(data []byte, policy Policy, deny []byte) []byte {
	var req Request
	if json.Unmarshal(data, &req) != nil || req.V != protocol.Version ||
		protocol.ValidateID("user", req.User) != nil || protocol.ValidateID("room", req.Room) != nil {
		return deny
	}
	d := policy(req.User, req.Room)
	if !d.Allow || protocol.ValidateUserIDs(protocol.HideTypingFrom, d.HideTypingFrom) != nil {
		return deny
	}
	out, err := json.Marshal(Reply{Allow: true, HideTypingFrom: d.HideTypingFrom})
	if err != nil {
		return deny
	}
	return out
}
