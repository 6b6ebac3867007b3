package protocol

// scanClientFrame is the fast path of [DecodeClientFrame] for the frames
// every client sends: a JSON object whose members are only "type", "room",
// "thread", "activity" and "id" (exact lower-case keys), each a string of printable ASCII with
// no escape, with JSON whitespace between tokens. It fills f exactly as
// decodeClientFrameJSON would (a repeated key: the last one wins; thread
// and activity only on the types that take them, takenScope) and reports ok;
// anything else (another key, an escape, a non-ASCII byte, another value
// type, trailing data) returns ok false, and the caller decodes with
// encoding/json, which gives the same answer or the precise error. It
// does not allocate for the type (the known types are interned) and keeps
// the reader goroutine's stack shallow (encoding/json's reflection is
// about 3 KiB of stack deep). FuzzClientFrameScan checks it against
// encoding/json.
func scanClientFrame(data []byte) (f ClientFrame, ok bool) {
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return f, false
	}
	i = skipWS(data, i+1)
	if i < len(data) && data[i] == '}' {
		return takenScope(f), skipWS(data, i+1) == len(data)
	}
	for {
		key, j, ok := scanPlainString(data, i)
		if !ok {
			return f, false
		}
		i = skipWS(data, j)
		if i >= len(data) || data[i] != ':' {
			return f, false
		}
		val, j, ok := scanPlainString(data, skipWS(data, i+1))
		if !ok {
			return f, false
		}
		switch string(key) {
		case "type":
			f.Type = internType(val)
		case "room":
			f.Room = string(val)
		case "thread":
			f.Thread, f.threadSet = string(val), true
		case "activity":
			f.Activity, f.activitySet = string(val), true
		case "id":
			f.ID = string(val)
		default:
			return f, false
		}
		i = skipWS(data, j)
		if i >= len(data) {
			return f, false
		}
		switch data[i] {
		case ',':
			i = skipWS(data, i+1)
		case '}':
			return takenScope(f), skipWS(data, i+1) == len(data)
		default:
			return f, false
		}
	}
}

// skipWS returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipWS(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanPlainString reads a JSON string at data[i] made of printable ASCII
// without '\\': its contents and the index after the closing quote.
func scanPlainString(data []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// internType returns the constant for a known frame type (no allocation),
// else a copy of b.
func internType(b []byte) string {
	for _, t := range [...]string{TypeTypingStart, TypeTypingStop, TypeJoin, TypeLeave, TypeSync, TypePing, TypeUnwatch} {
		if string(b) == t {
			return t
		}
	}
	return string(b)
}

// scanCommand is the fast path of [DecodeCommand] for the commands
// gateways publish (AppendCommand's output): a JSON object whose members
// are known Command fields (exact keys), strings of printable ASCII with
// no escape, whole numbers without sign (v, seq, ts_ms; at most 18
// digits) and "rooms" an array of such strings. It fills c exactly as
// encoding/json would and reports ok; anything else returns ok false and
// the caller decodes with encoding/json. FuzzCommandScan checks it
// against encoding/json.
func scanCommand(data []byte) (c Command, ok bool) {
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return c, false
	}
	i = skipWS(data, i+1)
	if i < len(data) && data[i] == '}' {
		return c, skipWS(data, i+1) == len(data)
	}
	for {
		key, j, ok := scanPlainString(data, i)
		if !ok {
			return c, false
		}
		i = skipWS(data, j)
		if i >= len(data) || data[i] != ':' {
			return c, false
		}
		i = skipWS(data, i+1)
		switch string(key) {
		case "v", "seq", "ts_ms":
			n, j, ok := scanWhole(data, i)
			if !ok {
				return c, false
			}
			switch string(key) {
			case "v":
				c.V = int(n)
			case "seq":
				c.Seq = uint64(n)
			default:
				c.TsMs = n
			}
			i = j
		case "rooms":
			rooms, j, ok := scanPlainStrings(data, i)
			if !ok {
				return c, false
			}
			c.Rooms, i = rooms, j
		default:
			val, j, ok := scanPlainString(data, i)
			if !ok {
				return c, false
			}
			switch string(key) {
			case "op":
				c.Op = internOp(val)
			case "room":
				c.Room = string(val)
			case "user":
				c.User = string(val)
			case "name":
				c.Name = string(val)
			case "conn":
				c.Conn = string(val)
			default:
				return c, false
			}
			i = j
		}
		i = skipWS(data, i)
		if i >= len(data) {
			return c, false
		}
		switch data[i] {
		case ',':
			i = skipWS(data, i+1)
		case '}':
			return c, skipWS(data, i+1) == len(data)
		default:
			return c, false
		}
	}
}

// scanWhole reads a JSON number at data[i] that is a whole number without
// sign, fraction or exponent, of at most 18 digits (no overflow), and
// returns it with the index after it.
func scanWhole(data []byte, i int) (n int64, next int, ok bool) {
	j := i
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		n = n*10 + int64(data[j]-'0')
		j++
	}
	switch {
	case j == i, j-i > 18, data[i] == '0' && j-i > 1:
		return 0, 0, false
	case j < len(data) && (data[j] == '.' || data[j] == 'e' || data[j] == 'E'):
		return 0, 0, false
	}
	return n, j, true
}

// scanPlainStrings reads a JSON array of plain strings (scanPlainString)
// at data[i]; [] gives an empty, non-nil slice, as encoding/json does.
func scanPlainStrings(data []byte, i int) (out []string, next int, ok bool) {
	if i >= len(data) || data[i] != '[' {
		return nil, 0, false
	}
	out = []string{}
	i = skipWS(data, i+1)
	if i < len(data) && data[i] == ']' {
		return out, i + 1, true
	}
	for {
		s, j, ok := scanPlainString(data, i)
		if !ok {
			return nil, 0, false
		}
		out = append(out, string(s))
		i = skipWS(data, j)
		if i >= len(data) {
			return nil, 0, false
		}
		switch data[i] {
		case ',':
			i = skipWS(data, i+1)
		case ']':
			return out, i + 1, true
		default:
			return nil, 0, false
		}
	}
}

// internOp returns the constant for a known command op (no allocation),
// else a copy of b.
func internOp(b []byte) string {
	for _, op := range [...]string{OpStart, OpStop, OpLeave, OpDisconnect} {
		if string(b) == op {
			return op
		}
	}
	return string(b)
}

// scanRoomEvent is the fast path of [DecodeRoomEvent] for the events the
// workers publish: a JSON object of known RoomEvent fields (exact keys),
// plain strings (scanPlainString) and whole numbers (scanWhole). It fills
// ev exactly as encoding/json would and reports ok; anything else returns
// ok false and the caller decodes with encoding/json. The gateway decodes
// every room event once (not per receiver) before its fan-out.
// FuzzRoomEventScan checks it against encoding/json.
func scanRoomEvent(data []byte) (ev RoomEvent, ok bool) {
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return ev, false
	}
	i = skipWS(data, i+1)
	if i < len(data) && data[i] == '}' {
		return ev, skipWS(data, i+1) == len(data)
	}
	for {
		key, j, ok := scanPlainString(data, i)
		if !ok {
			return ev, false
		}
		i = skipWS(data, j)
		if i >= len(data) || data[i] != ':' {
			return ev, false
		}
		i = skipWS(data, i+1)
		switch string(key) {
		case "v", "ttl_ms", "ts_ms":
			n, j, ok := scanWhole(data, i)
			if !ok {
				return ev, false
			}
			switch string(key) {
			case "v":
				ev.V = int(n)
			case "ttl_ms":
				ev.TTLMs = n
			default:
				ev.TsMs = n
			}
			i = j
		default:
			val, j, ok := scanPlainString(data, i)
			if !ok {
				return ev, false
			}
			switch string(key) {
			case "type":
				ev.Type = internType(val)
			case "room":
				ev.Room = string(val)
			case "user":
				ev.User = string(val)
			case "name":
				ev.Name = string(val)
			case "thread":
				ev.Thread = string(val)
			case "activity":
				ev.Activity = string(val)
			case "reason":
				ev.Reason = internReason(val)
			default:
				return ev, false
			}
			i = j
		}
		i = skipWS(data, i)
		if i >= len(data) {
			return ev, false
		}
		switch data[i] {
		case ',':
			i = skipWS(data, i+1)
		case '}':
			return ev, skipWS(data, i+1) == len(data)
		default:
			return ev, false
		}
	}
}

// internReason returns the constant for a known stop reason (no
// allocation), else a copy of b.
func internReason(b []byte) string {
	for _, r := range [...]string{ReasonStopped, ReasonExpired, ReasonDisconnected, ReasonLeft} {
		if string(b) == r {
			return r
		}
	}
	return string(b)
}
