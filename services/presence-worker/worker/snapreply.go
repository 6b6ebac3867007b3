package worker

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// defaultMaxPayload is nats-server's default max_payload, 1 MiB (NATS
// server configuration docs), assumed while the connection has not yet
// learned the server's (nc.MaxPayload is 0 before the first INFO).
const defaultMaxPayload = 1 << 20

// maxReplyBytes is the largest payload the server accepts from nc, in
// bytes: its INFO's max_payload, or defaultMaxPayload when unknown.
func maxReplyBytes(nc *nats.Conn) int {
	if nc != nil {
		if n := nc.MaxPayload(); n > 0 {
			return int(n)
		}
	}
	return defaultMaxPayload
}

// encodeSnapshotReply encodes the successful [protocol.SnapshotReply] of
// room's snap in at most maxPayload bytes: when the whole list does not
// fit, typists are dropped from the end of it (the list is sorted by
// user, so a reply is still a prefix of the room's) until it does, and
// Total is kept, so clients show "N people are typing". It returns the
// encoding and how many typists it lists. Go's JSON escapes <, > and & to
// six bytes each, so a typist's share is measured on its own encoding,
// not guessed from its length. The error says the reply does not fit even
// without typists (a max_payload below a hundred bytes or so).
func encodeSnapshotReply(room string, snap protocol.Snapshot, maxPayload int) ([]byte, int, error) {
	reply := protocol.SnapshotReply{V: protocol.Version, Room: room, Users: snap.Users, Activities: snap.Activities, Total: snap.Total, Threads: snap.Threads}
	data, err := json.Marshal(reply)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding snapshot reply: %w", err)
	}
	if len(data) <= maxPayload {
		return data, len(snap.Users), nil
	}
	// Too big: the threads' lists go first (each keeps its thread and
	// total), then the room's list is cut as below.
	if len(reply.Threads) > 0 {
		bare := make([]protocol.ThreadSnapshot, len(reply.Threads))
		for i, t := range reply.Threads {
			bare[i] = protocol.ThreadSnapshot{Thread: t.Thread, Users: []protocol.Typist{}, Total: t.Total}
		}
		reply.Threads = bare
		if data, err = json.Marshal(reply); err != nil {
			return nil, 0, fmt.Errorf("encoding snapshot reply: %w", err)
		}
		if len(data) <= maxPayload {
			return data, len(snap.Users), nil
		}
	}
	// Size of the reply with an empty list, plus each typist's encoding and
	// a comma between two: exact, since encoding/json writes a slice's
	// elements as it writes them alone (HTML-escaped either way).
	reply.Users = []protocol.Typist{}
	empty, err := json.Marshal(reply)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding snapshot reply: %w", err)
	}
	size, n := len(empty), 0
	for _, t := range snap.Users {
		b, err := json.Marshal(t)
		if err != nil {
			return nil, 0, fmt.Errorf("encoding snapshot reply: %w", err)
		}
		add := len(b)
		if a := snap.Activities[t.User]; a != "" {
			add += len(`,"activity":""`) + len(a) // a-z and _ only
		}
		if n > 0 {
			add++ // the comma
		}
		if size+add > maxPayload {
			break
		}
		size += add
		n++
	}
	for ; n >= 0; n-- { // once, unless the sum above were ever off
		reply.Users = snap.Users[:n]
		if data, err = json.Marshal(reply); err != nil {
			return nil, 0, fmt.Errorf("encoding snapshot reply: %w", err)
		}
		if len(data) <= maxPayload {
			return data, n, nil
		}
	}
	return nil, 0, fmt.Errorf("snapshot reply of room %q: %d bytes without typists, over the NATS max_payload of %d bytes", room, len(empty), maxPayload)
}
