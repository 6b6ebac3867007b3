package store

import (
	"strconv"
)

// EventSink receives the room events the store published on Redis Pub/Sub,
// after the script that published them returned: room is the room id,
// event the exact bytes of the Pub/Sub message (a typing_start or
// typing_stop JSON object). RoomEvent must not block (the store calls it
// on the command path and in the sweep) and must not keep event after it
// returns unless it owns it: each call gets a fresh slice.
//
// Events a sink gets come in the order the store applied them per caller
// (one shard, or the sweeper); callers run concurrently. An event whose
// script reply was lost (a Redis call retried after a dropped connection)
// is published on Redis but never reported here.
type EventSink interface {
	RoomEvent(room string, event []byte)
}

// eventsFlag is the sweep script's ARGV[8]: "1" when an [EventSink] wants
// the events back, else "0" (the script then keeps nothing).
func (st *engine) eventsFlag() string {
	if st.events != nil {
		return "1"
	}
	return "0"
}

// emitCommands reports to st.events the events published by start and
// stop script calls (one room each): a call whose outcome published one
// (started, refreshed, stopped) published cmdArgs.Event followed by the
// reply's now_ms and "}" (scripts/start.lua), which is rebuilt here byte
// for byte. Failed calls and calls that published nothing are skipped.
func (st *engine) emitCommands(calls []scriptCall, rooms []string, res []any, errs []error) {
	if st.events == nil {
		return
	}
	for i, c := range calls {
		if errs[i] != nil {
			continue
		}
		reply, _ := res[i].([]any)
		st.emitList(rooms[i], reply, 3) // a leave's threads' stops
		out, err := outcomeOf(res[i])
		if err != nil || publishedBy(out) == "" {
			continue
		}
		if len(reply) < 2 {
			continue
		}
		now, ok := reply[1].(int64)
		if !ok {
			continue
		}
		prefix, ok := c.args[argEvent].([]byte)
		if !ok {
			continue
		}
		ev := make([]byte, 0, len(prefix)+16)
		ev = strconv.AppendInt(append(ev, prefix...), now, 10)
		st.events.RoomEvent(rooms[i], append(ev, '}'))
	}
}

// emitSweep reports to st.events the events a sweep of room published: the
// sixth element of its reply (scripts/sweep.lua, with eventsFlag "1"), in
// the order the script published them.
func (st *engine) emitSweep(room string, reply []any) {
	if st.events == nil {
		return
	}
	st.emitList(room, reply, 5)
}

// emitList reports the payloads listed at reply[i], if any, in order.
func (st *engine) emitList(room string, reply []any, i int) {
	if len(reply) <= i {
		return
	}
	evs, _ := reply[i].([]any)
	for _, e := range evs {
		if s, ok := e.(string); ok {
			st.events.RoomEvent(room, []byte(s))
		}
	}
}
