// Package roomevents follows the typing events of rooms on NATS
// (docs/protocol.md, "Room events on NATS"; opt-in on the presence
// workers with ELLIPSIS_NATS_EVENTS=true). Every typing_start and
// typing_stop, expired ones included, is published on
//
//	<prefix>.typing.v1.room.<token>
//
// where <token> is the room id with every byte outside [A-Za-z0-9_-]
// written as %XX (upper-case hex), e.g. "room:42" → "room%3A42"; the
// payload is the same bytes as the room's Redis Pub/Sub event:
//
//	{"v":1,"type":"typing_start","room":"42","user":"alice","name":"Alice","ttl_ms":5000,"ts_ms":1764480000000}
//
// Follow one room with [RoomSubject], every room with [AllRoomsSubject].
// Delivery is NATS core, at most once. The events of one user's
// connection arrive in order; across users, the order is only per worker
// shard (docs/protocol.md, "Order"). For the current state after a gap,
// ask the snapshot (package whoistyping).
package roomevents

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Token is the room's subject token ([names.RoomToken]): every byte
// outside [A-Za-z0-9_-] becomes %XX (upper-case hex), so the token never
// holds ".", "*", ">" or white space, and two rooms never share one.
// "café ☕" → "caf%C3%A9%20%E2%98%95".
func Token(room string) string { return names.RoomToken(room) }

// RoomSubject is one room's event subject, "<prefix>.typing.v1.room.<token>"
// (subjectPrefix "" = "ellipsis"; [names.Names.RoomEventSubject]).
func RoomSubject(subjectPrefix, room string) string {
	return names.New("", subjectPrefix).RoomEventSubject(room)
}

// AllRoomsSubject matches the events of every room,
// "<prefix>.typing.v1.room.>" ([names.Names.RoomEventsWildcard]).
func AllRoomsSubject(subjectPrefix string) string {
	return names.New("", subjectPrefix).RoomEventsWildcard()
}

// Follow subscribes subject (from [RoomSubject] or [AllRoomsSubject]) and
// calls fn with each decoded event, one at a time on the subscription's
// goroutine. A payload that does not decode is passed to bad (when not
// nil) and skipped. Unsubscribe the returned subscription to stop. The
// NATS client buffers at most 65536 messages (64 MiB) for a slow fn, then
// drops and reports nats.ErrSlowConsumer on the connection's error
// handler.
func Follow(nc *nats.Conn, subject string, fn func(protocol.RoomEvent), bad func(data []byte, err error)) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		ev, err := protocol.DecodeRoomEvent(m.Data)
		if err != nil {
			if bad != nil {
				bad(m.Data, err)
			}
			return
		}
		fn(ev)
	})
	if err != nil {
		return nil, fmt.Errorf("room events: subscribe %s: %w", subject, err)
	}
	return sub, nil
}
