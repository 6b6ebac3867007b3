// Package joinauthz is a join authoriser: the NATS responder that a
// gateway with ELLIPSIS_AUTHZ=nats asks before a user joins a room (or
// reads its snapshot over HTTP) (docs/protocol.md, "Join authorisation
// hook"). The gateway requests "<prefix>.authz.v1.join" with
//
//	{"v":1,"user":"alice","room":"42"}
//
// and allows the join only on the reply {"allow":true}. Anything else, and
// no reply within ELLIPSIS_AUTHZ_TIMEOUT (1 s), is a denial, so the policy
// must answer fast: look the membership up in memory or a local cache, not
// in a slow database call per join. The gateway caches allows for
// ELLIPSIS_AUTHZ_CACHE_TTL (30 s) and denials for
// ELLIPSIS_AUTHZ_DENY_CACHE_TTL (2 s).
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

// Reply is the answer; only {"allow":true} allows.
type Reply struct {
	Allow bool `json:"allow"`
}

// Policy decides whether user may join room. It runs on the subscription's
// goroutine, one request at a time: it must be quick (well under the
// gateway's 1 s timeout) and safe to call from that goroutine.
type Policy func(user, room string) bool

// Serve answers "<subjectPrefix>.authz.v1.join" ("" = "ellipsis") in queue
// group [QueueGroup] with policy's verdict. A request that is not valid
// JSON, has a "v" other than 1 or an invalid user or room id is denied
// without asking the policy. Unsubscribe (or Drain) the returned
// subscription to stop.
func Serve(nc *nats.Conn, subjectPrefix string, policy Policy) (*nats.Subscription, error) {
	subject := names.New("", subjectPrefix).AuthzJoinSubject()
	allow, _ := json.Marshal(Reply{Allow: true})
	deny, _ := json.Marshal(Reply{Allow: false})
	sub, err := nc.QueueSubscribe(subject, QueueGroup, func(m *nats.Msg) {
		var req Request
		ok := json.Unmarshal(m.Data, &req) == nil && req.V == protocol.Version &&
			protocol.ValidateID("user", req.User) == nil && protocol.ValidateID("room", req.Room) == nil &&
			policy(req.User, req.Room)
		if ok {
			_ = m.Respond(allow)
		} else {
			_ = m.Respond(deny)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("join authoriser: subscribe %s: %w", subject, err)
	}
	return sub, nil
}
