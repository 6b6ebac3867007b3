package protocol

import (
	"encoding/json"
	"strconv"
)

// AppendCommand appends c's JSON encoding to dst and returns it: byte for
// byte what json.Marshal(c) gives (field order, omitempty), without
// reflection. Strings of printable ASCII other than '"', '\\', '<', '>'
// and '&' (which json.Marshal escapes) are copied as they are; a command
// with any other string is encoded by json.Marshal. The gateway encodes
// one command per typing frame with it (BenchmarkEncodeCommand);
// FuzzAppendCommand checks it against json.Marshal.
func AppendCommand(dst []byte, c *Command) ([]byte, error) {
	plain := isPlain(c.Op) && isPlain(c.Room) && isPlain(c.Thread) && isPlain(c.User) && isPlain(c.Name) && isPlain(c.Activity) && isPlain(c.Conn)
	for _, r := range c.Rooms {
		plain = plain && isPlain(r)
	}
	if !plain {
		b, err := json.Marshal(c)
		return append(dst, b...), err
	}
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(c.V), 10)
	dst = append(dst, `,"op":"`...)
	dst = append(dst, c.Op...)
	dst = append(dst, '"')
	if c.Room != "" {
		dst = append(dst, `,"room":"`...)
		dst = append(dst, c.Room...)
		dst = append(dst, '"')
	}
	if c.Thread != "" {
		dst = append(dst, `,"thread":"`...)
		dst = append(dst, c.Thread...)
		dst = append(dst, '"')
	}
	if len(c.Rooms) > 0 {
		dst = append(dst, `,"rooms":[`...)
		for i, r := range c.Rooms {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '"')
			dst = append(dst, r...)
			dst = append(dst, '"')
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"user":"`...)
	dst = append(dst, c.User...)
	dst = append(dst, '"')
	if c.Name != "" {
		dst = append(dst, `,"name":"`...)
		dst = append(dst, c.Name...)
		dst = append(dst, '"')
	}
	if c.Activity != "" {
		dst = append(dst, `,"activity":"`...)
		dst = append(dst, c.Activity...)
		dst = append(dst, '"')
	}
	if c.Conn != "" {
		dst = append(dst, `,"conn":"`...)
		dst = append(dst, c.Conn...)
		dst = append(dst, '"')
	}
	if c.Seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, c.Seq, 10)
	}
	if c.TsMs != 0 {
		dst = append(dst, `,"ts_ms":`...)
		dst = strconv.AppendInt(dst, c.TsMs, 10)
	}
	if c.TTLMs != 0 {
		dst = append(dst, `,"ttl_ms":`...)
		dst = strconv.AppendInt(dst, c.TTLMs, 10)
	}
	return append(dst, '}'), nil
}

// isPlain reports whether json.Marshal writes s as it is between quotes.
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
