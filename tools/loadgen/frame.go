package loadgen

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// parseFrame reads a server frame: Type, Room, User, Reason, TsMs of a room
// event, and the whole frame otherwise. Room events (typing_start,
// typing_stop: flat objects, forwarded by the gateway exactly as the worker
// published them) take a fast path that looks the few fields up without
// decoding the whole object: the load generator reads every frame of every
// connection on the same CPUs as the stack it measures, so its own cost is
// kept small. Anything else, or a room event whose strings hold escapes,
// goes through encoding/json.
func parseFrame(b []byte) (protocol.ServerFrame, bool) {
	t, ok := stringField(b, `"type":"`)
	if ok && (t == "typing_start" || t == "typing_stop") {
		ev := protocol.ServerFrame{Type: t}
		var okRoom, okUser bool
		ev.Room, okRoom = stringField(b, `"room":"`)
		ev.User, okUser = stringField(b, `"user":"`)
		if t == "typing_stop" {
			ev.Reason, _ = stringField(b, `"reason":"`)
		}
		ev.TsMs = intField(b, `"ts_ms":`)
		if okRoom && okUser {
			return ev, true
		}
	}
	var ev protocol.ServerFrame
	if err := json.Unmarshal(b, &ev); err != nil {
		return protocol.ServerFrame{}, false
	}
	return ev, true
}

// stringField returns the value of the first `"key":"` in b when it holds
// no escape (ok false otherwise). In JSON text a quote inside a string is
// always escaped, so the key pattern only ever matches a real key; frames
// of this shape are flat, so it is the top-level one.
func stringField(b []byte, key string) (string, bool) {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return "", false
	}
	v := b[i+len(key):]
	j := bytes.IndexByte(v, '"')
	if j < 0 || bytes.IndexByte(v[:j], '\\') >= 0 {
		return "", false
	}
	return string(v[:j]), true
}

// intField returns the non-negative integer after key, 0 when absent.
func intField(b []byte, key string) int64 {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0
	}
	v := b[i+len(key):]
	j := 0
	for j < len(v) && j < 19 && v[j] >= '0' && v[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(string(v[:j]), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
