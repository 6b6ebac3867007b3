// Package whoistyping asks the presence workers who is typing in a room
// (docs/protocol.md, "Snapshot request/reply"): a NATS request on
// "<prefix>.typing.v1.snapshot" with
//
//	{"v":1,"room":"42"}
//
// answered by one worker of the queue group with
//
//	{"v":1,"room":"42","users":[{"user":"alice","name":"Alice"}],"total":1}
//
// or {"v":1,"error":{"code":"unavailable","message":"..."}}. No self
// filter: the worker does not know who asks.
package whoistyping

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// DefaultTimeout bounds [Ask] when ctx has no deadline: the gateway's
// default, ELLIPSIS_SNAPSHOT_TIMEOUT's (TestDefaultTimeoutIsTheGateways
// holds them equal).
const DefaultTimeout = 2 * time.Second

// Ask returns who is typing in room: the reply's Users (at most the
// workers' ELLIPSIS_SNAPSHOT_MAX, sorted by user id) and Total (every
// typist; Total > len(Users) means the list was cut). subjectPrefix ""
// means "ellipsis". Errors: an invalid room (names the field), no worker
// answering (nats.ErrNoResponders) or the deadline, and a worker's error
// reply as a *protocol.ReplyError whose Code is "unavailable" (retry with
// backoff), "bad_request" or "internal".
func Ask(ctx context.Context, nc *nats.Conn, subjectPrefix, room string) (protocol.SnapshotReply, error) {
	if err := protocol.ValidateID("room", room); err != nil {
		return protocol.SnapshotReply{}, fmt.Errorf("who is typing: %w", err)
	}
	req, _ := json.Marshal(protocol.SnapshotRequest{V: protocol.Version, Room: room})
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	subject := names.New("", subjectPrefix).SnapshotSubject()
	msg, err := nc.RequestWithContext(ctx, subject, req)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return protocol.SnapshotReply{}, fmt.Errorf("who is typing: no presence worker listens on %s: %w", subject, err)
		}
		return protocol.SnapshotReply{}, fmt.Errorf("who is typing: request on %s: %w", subject, err)
	}
	reply, err := protocol.DecodeSnapshotReply(msg.Data)
	if err != nil {
		return protocol.SnapshotReply{}, fmt.Errorf("who is typing in %q: %w", room, err)
	}
	return reply, nil
}
