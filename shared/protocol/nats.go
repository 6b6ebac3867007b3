package protocol

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Version is the "v" of every NATS payload and Pub/Sub room event.
const Version = 1

// Command ops (docs/protocol.md, "NATS").
const (
	OpStart      = "start"
	OpStop       = "stop"
	OpLeave      = "leave"
	OpDisconnect = "disconnect"
)

// MaxRoomsPerCommand bounds the rooms list of a disconnect command. A
// gateway never sends more than its rooms-per-connection limit (default
// 100); this is the worker's defence against a huge list from elsewhere.
const MaxRoomsPerCommand = 1000

// Command is a typing command on subject <prefix>.typing.v1.cmd, published
// by a gateway or any platform service to the presence workers' queue group.
//
//   - start: Room, User, Conn required; Name optional.
//   - stop, leave: Room and User required. With Conn, that connection's entry
//     ends; without Conn, every connection of User in Room ends at once (the
//     chat service sends this when the user's message is posted).
//   - disconnect: User, Conn and Rooms (1..[MaxRoomsPerCommand]) required,
//     Room omitted.
//
// Seq increases per connection; a command whose Seq is not above the last one
// applied for that connection and room is stale and ignored. Seq 0 (absent)
// means "unordered": always applied and never recorded. TsMs is the sender's
// wall clock when it sent the command (unix ms, 0 = unknown; every gateway
// sets it). The worker's times come from Redis TIME; it reads TsMs only to
// drop a start that is stale by time: sent more than the typing ttl before
// it is applied, or before the user's last stop without Conn (see the
// worker's README, "Lua design").
type Command struct {
	V     int      `json:"v"`
	Op    string   `json:"op"`
	Room  string   `json:"room,omitempty"`
	Rooms []string `json:"rooms,omitempty"`
	User  string   `json:"user"`
	Name  string   `json:"name,omitempty"`
	Conn  string   `json:"conn,omitempty"`
	Seq   uint64   `json:"seq,omitempty"`
	TsMs  int64    `json:"ts_ms,omitempty"`
}

// Validate checks a command as [DecodeCommand] does and returns a
// *[FieldError] naming the first bad field.
func (c *Command) Validate() error {
	if c.V != Version {
		return &FieldError{"v", fmt.Sprintf("must be %d, got %d", Version, c.V)}
	}
	if err := ValidateID("user", c.User); err != nil {
		return err
	}
	if err := ValidateName("name", c.Name); err != nil {
		return err
	}
	if c.Conn != "" {
		if err := ValidateID("conn", c.Conn); err != nil {
			return err
		}
	}
	switch c.Op {
	case OpStart, OpStop, OpLeave:
		if err := ValidateID("room", c.Room); err != nil {
			return err
		}
		if len(c.Rooms) != 0 {
			return &FieldError{"rooms", "only allowed with op disconnect"}
		}
		if c.Op == OpStart && c.Conn == "" {
			return &FieldError{"conn", "is required for op start"}
		}
	case OpDisconnect:
		if c.Room != "" {
			return &FieldError{"room", "not allowed with op disconnect (use rooms)"}
		}
		if c.Conn == "" {
			return &FieldError{"conn", "is required for op disconnect"}
		}
		if len(c.Rooms) == 0 {
			return &FieldError{"rooms", "is required for op disconnect"}
		}
		if len(c.Rooms) > MaxRoomsPerCommand {
			return &FieldError{"rooms", fmt.Sprintf("must hold at most %d rooms, got %d", MaxRoomsPerCommand, len(c.Rooms))}
		}
		for i, r := range c.Rooms {
			if err := ValidateID("rooms["+strconv.Itoa(i)+"]", r); err != nil {
				return err
			}
		}
	case "":
		return &FieldError{"op", "is required"}
	default:
		op := c.Op
		if len(op) > 32 {
			op = op[:32] + "..."
		}
		return &FieldError{"op", fmt.Sprintf("unknown op %q (want start, stop, leave or disconnect)", op)}
	}
	return nil
}

// DecodeCommand parses and validates a command payload. Errors name the
// field ("json" for malformed payloads).
func DecodeCommand(data []byte) (Command, error) {
	c, ok := scanCommand(data) // the gateways' commands, without reflection
	if !ok {
		c = Command{}
		if err := json.Unmarshal(data, &c); err != nil {
			return Command{}, decodeErr(err)
		}
	}
	if err := c.Validate(); err != nil {
		return Command{}, err
	}
	return c, nil
}

// SnapshotRequest asks the workers (subject <prefix>.typing.v1.snapshot,
// request/reply) who is typing in Room.
type SnapshotRequest struct {
	V    int    `json:"v"`
	Room string `json:"room"`
}

// DecodeSnapshotRequest parses and validates a snapshot request.
func DecodeSnapshotRequest(data []byte) (SnapshotRequest, error) {
	var r SnapshotRequest
	if err := json.Unmarshal(data, &r); err != nil {
		return SnapshotRequest{}, decodeErr(err)
	}
	if r.V != Version {
		return SnapshotRequest{}, &FieldError{"v", fmt.Sprintf("must be %d, got %d", Version, r.V)}
	}
	if err := ValidateID("room", r.Room); err != nil {
		return SnapshotRequest{}, err
	}
	return r, nil
}

// ReplyError is the error of a failed snapshot (or other request/reply).
type ReplyError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *ReplyError) Error() string { return e.Code + ": " + e.Message }

// SnapshotReply answers a [SnapshotRequest]: either Users (always present,
// possibly empty, at most the snapshot cap of typists) and Total (the
// number of visible typists, see [Snapshot]), or Error.
type SnapshotReply struct {
	V     int         `json:"v"`
	Room  string      `json:"room,omitempty"`
	Users []Typist    `json:"users,omitempty"`
	Total int         `json:"total,omitempty"`
	Error *ReplyError `json:"error,omitempty"`
}

// Snapshot returns the reply's users and total.
func (r SnapshotReply) Snapshot() Snapshot { return Snapshot{Users: r.Users, Total: r.Total} }

// MarshalJSON keeps "users" present (as []) on a successful reply.
func (r SnapshotReply) MarshalJSON() ([]byte, error) {
	type plain SnapshotReply
	if r.Error != nil {
		return json.Marshal(plain(r))
	}
	type ok struct {
		V     int      `json:"v"`
		Room  string   `json:"room"`
		Users []Typist `json:"users"`
		Total int      `json:"total"`
	}
	u := r.Users
	if u == nil {
		u = []Typist{}
	}
	return json.Marshal(ok{V: r.V, Room: r.Room, Users: u, Total: r.Total})
}

// DecodeSnapshotReply parses a reply; a reply carrying an error is returned
// as that *[ReplyError]. A reply without "total" (a worker older than the
// field) gets Total = len(Users); a negative total is an error.
func DecodeSnapshotReply(data []byte) (SnapshotReply, error) {
	var r SnapshotReply
	if err := json.Unmarshal(data, &r); err != nil {
		return SnapshotReply{}, &FieldError{"json", "malformed: " + jsonErrText(err)}
	}
	if r.Error != nil {
		return r, r.Error
	}
	if r.V != Version {
		return SnapshotReply{}, &FieldError{"v", fmt.Sprintf("must be %d, got %d", Version, r.V)}
	}
	if r.Total < 0 {
		return SnapshotReply{}, &FieldError{"total", fmt.Sprintf("must be >= 0, got %d", r.Total)}
	}
	if r.Total < len(r.Users) {
		r.Total = len(r.Users)
	}
	return r, nil
}

// RoomEvent is a normalized event on a room's Pub/Sub channel
// (chat:room:{enc(room)}): the server frame exactly as sent to clients, plus
// V and TsMs (Redis TIME when the worker published it, unix ms).
//
//	{"v":1,"type":"typing_start","room":"42","user":"alice","name":"Alice","ttl_ms":5000,"ts_ms":1764480000000}
//	{"v":1,"type":"typing_stop","room":"42","user":"alice","reason":"stopped","ts_ms":1764480000000}
type RoomEvent struct {
	V      int    `json:"v"`
	Type   string `json:"type"`
	Room   string `json:"room"`
	User   string `json:"user"`
	Name   string `json:"name,omitempty"`
	TTLMs  int64  `json:"ttl_ms,omitempty"`
	Reason string `json:"reason,omitempty"`
	TsMs   int64  `json:"ts_ms"`
}

// RoomEventPrefix returns the JSON of ev up to and including `"ts_ms":`, so
// that the worker's Lua script appends Redis TIME and "}" and publishes
// atomically with the state change. ev.V and ev.TsMs are ignored: the
// prefix always carries [Version]. "ts_ms" is RoomEvent's last field and
// has no omitempty, so the encoding of the event with TsMs 0 ends in
// `"ts_ms":0}`, and the prefix is that encoding without its last two bytes.
func RoomEventPrefix(ev RoomEvent) []byte {
	ev.V, ev.TsMs = Version, 0
	b, _ := json.Marshal(ev)
	return b[:len(b)-len("0}")]
}

// DecodeRoomEvent parses and validates a room event from Pub/Sub.
func DecodeRoomEvent(data []byte) (RoomEvent, error) {
	ev, ok := scanRoomEvent(data) // the workers' events, without reflection
	if !ok {
		ev = RoomEvent{}
		if err := json.Unmarshal(data, &ev); err != nil {
			return RoomEvent{}, &FieldError{"json", "malformed: " + jsonErrText(err)}
		}
	}
	if ev.V != Version {
		return RoomEvent{}, &FieldError{"v", fmt.Sprintf("must be %d, got %d", Version, ev.V)}
	}
	switch ev.Type {
	case TypeTypingStart, TypeTypingStop:
	default:
		return RoomEvent{}, &FieldError{"type", fmt.Sprintf("must be typing_start or typing_stop, got %q", ev.Type)}
	}
	if err := ValidateID("room", ev.Room); err != nil {
		return RoomEvent{}, err
	}
	if err := ValidateID("user", ev.User); err != nil {
		return RoomEvent{}, err
	}
	return ev, nil
}
