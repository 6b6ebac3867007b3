package protocol

// scanClientFrame is the fast path of [DecodeClientFrame] for the frames
// every client sends: a JSON object whose members are only "type", "room"
// and "id" (exact lower-case keys), each a string of printable ASCII with
// no escape, with JSON whitespace between tokens. It fills f exactly as
// encoding/json would (a repeated key: the last one wins) and reports ok;
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
		return f, skipWS(data, i+1) == len(data)
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
			return f, skipWS(data, i+1) == len(data)
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
	for _, t := range [...]string{TypeTypingStart, TypeTypingStop, TypeJoin, TypeLeave, TypeSync, TypePing} {
		if string(b) == t {
			return t
		}
	}
	return string(b)
}
