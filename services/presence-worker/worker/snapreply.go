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
// not guessed from its length. Threads lose their lists first (each keeps
// its thread and total), then the last threads go while the others alone
// do not fit, then the room's list is cut (docs/protocol.md, "Snapshot
// request/reply"). The error says the reply does not fit even without
// typists and threads (a max_payload below a hundred bytes or so).
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
	// Threads whose entries alone do not fit (up to twice the snapshot cap
	// plus 128 of them, each up to about 1.6 KB with an id of 256 '<') are
	// left out from the end (the list is sorted by thread) until they do:
	// the reply stays a success with the room's total.
	if len(empty) > maxPayload && len(reply.Threads) > 0 {
		if reply.Threads, err = fitThreads(reply.Threads, len(empty)-maxPayload); err != nil {
			return nil, 0, err
		}
		for { // once, unless the sizes in fitThreads were ever off
			if empty, err = json.Marshal(reply); err != nil {
				return nil, 0, fmt.Errorf("encoding snapshot reply: %w", err)
			}
			if len(empty) <= maxPayload || len(reply.Threads) == 0 {
				break
			}
			reply.Threads = reply.Threads[:len(reply.Threads)-1]
		}
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

// fitThreads returns the longest prefix of threads (bare: without their
// lists) whose encoding is at least over bytes shorter than all of them in
// a reply: each thread's share is its own encoding and a comma, and the
// last one's the whole "threads" member, which is left out when empty.
func fitThreads(threads []protocol.ThreadSnapshot, over int) ([]protocol.ThreadSnapshot, error) {
	n := len(threads)
	for over > 0 && n > 0 {
		b, err := json.Marshal(threads[n-1])
		if err != nil {
			return nil, fmt.Errorf("encoding snapshot reply: %w", err)
		}
		over -= len(b) + 1 // its comma, or for the only one the member's brackets
		if n == 1 {
			over -= len(`,"threads":`) + 1
		}
		n--
	}
	return threads[:n], nil
}
