package protocol

import (
	"encoding/json"
	"errors"
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
//
// Thread, Activity and TTLMs are the optional fields of issue 24
// (docs/protocol.md, "Threads and activities"): Thread (start, stop) names
// the thread of Room the command is about ("" = the room itself);
// Activity (start) is what the user does ("" = [ActivityTyping]); TTLMs
// (start, platform services only: a gateway never sets it) is the
// entry's own ttl in ms (0 = the standard ttl). DecodeCommand checks their
// shape; the worker checks Activity against its configured set and TTLMs
// against ELLIPSIS_SERVICE_MAX_TTL.
type Command struct {
	V        int      `json:"v"`
	Op       string   `json:"op"`
	Room     string   `json:"room,omitempty"`
	Thread   string   `json:"thread,omitempty"`
	Rooms    []string `json:"rooms,omitempty"`
	User     string   `json:"user"`
	Name     string   `json:"name,omitempty"`
	Activity string   `json:"activity,omitempty"`
	Conn     string   `json:"conn,omitempty"`
	Seq      uint64   `json:"seq,omitempty"`
	TsMs     int64    `json:"ts_ms,omitempty"`
	TTLMs    int64    `json:"ttl_ms,omitempty"`
}

// Activities (docs/protocol.md, "Threads and activities"): the standard
// set; an operator adds others with ELLIPSIS_ACTIVITIES, each matching
// [ValidateActivity].
const (
	ActivityTyping         = "typing"
	ActivityThinking       = "thinking"
	ActivityRecordingAudio = "recording_audio"
	ActivityRecordingVideo = "recording_video"
	ActivityUploading      = "uploading"
)

// StandardActivities lists the standard activities, [ActivityTyping] first.
func StandardActivities() []string {
	return []string{ActivityTyping, ActivityThinking, ActivityRecordingAudio, ActivityRecordingVideo, ActivityUploading}
}

// MaxActivityBytes is the longest activity name, in bytes.
const MaxActivityBytes = 32

// MaxCommandTTLMs bounds a command's ttl_ms whatever the worker's
// ELLIPSIS_SERVICE_MAX_TTL (24 h, the longest a client's setTimeout holds
// comfortably: docs/protocol.md, "Timing").
const MaxCommandTTLMs = 24 * 60 * 60 * 1000

// ValidateActivity checks an activity name's shape: 1..[MaxActivityBytes]
// bytes of a-z and '_'. field names it in the error.
func ValidateActivity(field, a string) error {
	if len(a) == 0 || len(a) > MaxActivityBytes {
		return &FieldError{field, fmt.Sprintf("must be 1..%d bytes of a-z and _, got %d bytes", MaxActivityBytes, len(a))}
	}
	for i := 0; i < len(a); i++ {
		if c := a[i]; (c < 'a' || c > 'z') && c != '_' {
			return &FieldError{field, fmt.Sprintf("must be 1..%d bytes of a-z and _, got byte 0x%02X at %d", MaxActivityBytes, c, i)}
		}
	}
	return nil
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
	if c.Thread != "" {
		if c.Op != OpStart && c.Op != OpStop {
			return &FieldError{"thread", "only allowed with op start or stop"}
		}
		if err := ValidateID("thread", c.Thread); err != nil {
			return err
		}
	}
	if c.Activity != "" {
		if c.Op != OpStart {
			return &FieldError{"activity", "only allowed with op start"}
		}
		if err := ValidateActivity("activity", c.Activity); err != nil {
			return err
		}
	}
	if c.TTLMs != 0 {
		if c.Op != OpStart {
			return &FieldError{"ttl_ms", "only allowed with op start"}
		}
		if c.TTLMs < 1 || c.TTLMs > MaxCommandTTLMs {
			return &FieldError{"ttl_ms", fmt.Sprintf("must be 1..%d ms, got %d", MaxCommandTTLMs, c.TTLMs)}
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
// number of visible typists, see [Snapshot]) of the room itself, with
// Activities and Threads (docs/protocol.md, "Threads and activities"), or
// Error. On the wire each entry of "users" carries its "activity" when it
// is not typing, and "threads" lists the thread scopes; a reader that
// ignores both reads the room scope exactly as before.
type SnapshotReply struct {
	V          int               `json:"v"`
	Room       string            `json:"room,omitempty"`
	Users      []Typist          `json:"-"`
	Activities map[string]string `json:"-"`
	Total      int               `json:"total,omitempty"`
	Threads    []ThreadSnapshot  `json:"threads,omitempty"`
	Error      *ReplyError       `json:"error,omitempty"`
}

// Snapshot returns the reply's scopes.
func (r SnapshotReply) Snapshot() Snapshot {
	return Snapshot{Users: r.Users, Total: r.Total, Activities: r.Activities, Threads: r.Threads}
}

// MarshalJSON keeps "users" present (as []) on a successful reply.
func (r SnapshotReply) MarshalJSON() ([]byte, error) {
	if r.Error != nil {
		return json.Marshal(struct {
			V     int         `json:"v"`
			Error *ReplyError `json:"error"`
		}{r.V, r.Error})
	}
	type ok struct {
		V       int              `json:"v"`
		Room    string           `json:"room"`
		Users   []scopeEntry     `json:"users"`
		Total   int              `json:"total"`
		Threads []ThreadSnapshot `json:"threads,omitempty"`
	}
	return json.Marshal(ok{V: r.V, Room: r.Room, Users: entries(r.Users, r.Activities), Total: r.Total, Threads: r.Threads})
}

// DecodeSnapshotReply parses a reply; a reply carrying an error is returned
// as that *[ReplyError]. A reply without "total" (a worker older than the
// field) gets Total = len(Users), in each scope; a negative total or
// entry ttl_ms is an error.
func DecodeSnapshotReply(data []byte) (SnapshotReply, error) {
	var r SnapshotReply
	if err := json.Unmarshal(data, &r); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return SnapshotReply{}, fe
		}
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
	if err := checkTTLs("users.ttl_ms", r.Users); err != nil {
		return SnapshotReply{}, err
	}
	r.Total = max(r.Total, len(r.Users))
	return r, nil
}

// UnmarshalJSON reads the wire form MarshalJSON writes (entries with
// their activity), without checking it: see [DecodeSnapshotReply].
func (r *SnapshotReply) UnmarshalJSON(data []byte) error {
	var w struct {
		V       int              `json:"v"`
		Room    string           `json:"room"`
		Users   []scopeEntry     `json:"users"`
		Total   int              `json:"total"`
		Threads []ThreadSnapshot `json:"threads"`
		Error   *ReplyError      `json:"error"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*r = SnapshotReply{V: w.V, Room: w.Room, Total: w.Total, Error: w.Error}
	if len(w.Threads) > 0 {
		r.Threads = w.Threads
	}
	if w.Users != nil {
		r.Users, r.Activities = fromEntries(w.Users)
	}
	return nil
}

// ThreadSnapshot is who is typing in one thread of a room (a snapshot
// reply's "threads"): as the room scope of [Snapshot], Users sorted by
// user, at most the cap, Total >= len(Users), Activities by user for
// those not typing.
type ThreadSnapshot struct {
	Thread     string
	Users      []Typist
	Activities map[string]string
	Total      int
}

// MarshalJSON writes {"thread":T,"users":[...],"total":n}, users never
// null, each entry with its "activity" unless typing and its "ttl_ms"
// when set.
func (t ThreadSnapshot) MarshalJSON() ([]byte, error) {
	return json.Marshal(threadWire{Thread: t.Thread, Users: entries(t.Users, t.Activities), Total: t.Total})
}

// UnmarshalJSON reads what MarshalJSON writes; a negative total or entry
// ttl_ms is an error, a missing total is len(users).
func (t *ThreadSnapshot) UnmarshalJSON(data []byte) error {
	var w threadWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	if w.Total < 0 {
		return &FieldError{"threads.total", fmt.Sprintf("must be >= 0, got %d", w.Total)}
	}
	users, acts := fromEntries(w.Users)
	if err := checkTTLs("threads.users.ttl_ms", users); err != nil {
		return err
	}
	*t = ThreadSnapshot{Thread: w.Thread, Users: users, Activities: acts, Total: max(w.Total, len(users))}
	return nil
}

type threadWire struct {
	Thread string       `json:"thread"`
	Users  []scopeEntry `json:"users"`
	Total  int          `json:"total"`
}

// scopeEntry is a snapshot entry on NATS: a [Typist] with its activity
// ("" = typing, left out) and its ttl_ms (0 = the standard ttl, left out).
type scopeEntry struct {
	User     string `json:"user"`
	Name     string `json:"name,omitempty"`
	Activity string `json:"activity,omitempty"`
	TTLMs    int64  `json:"ttl_ms,omitempty"`
}

// entries builds the wire entries of users, never nil.
func entries(users []Typist, acts map[string]string) []scopeEntry {
	out := make([]scopeEntry, len(users))
	for i, u := range users {
		out[i] = scopeEntry{User: u.User, Name: u.Name, Activity: acts[u.User], TTLMs: u.TTLMs}
	}
	return out
}

// checkTTLs returns a *[FieldError] named field for the first of users
// with a negative TTLMs (0 is the standard ttl), nil when there is none.
func checkTTLs(field string, users []Typist) error {
	for _, u := range users {
		if u.TTLMs < 0 {
			return &FieldError{field, fmt.Sprintf("must be >= 0, got %d", u.TTLMs)}
		}
	}
	return nil
}

// fromEntries splits wire entries into typists and their activities (nil
// when every entry types); "typing" is never kept.
func fromEntries(es []scopeEntry) ([]Typist, map[string]string) {
	users := make([]Typist, len(es))
	var acts map[string]string
	for i, e := range es {
		users[i] = Typist{User: e.User, Name: e.Name, TTLMs: e.TTLMs}
		if e.Activity != "" && e.Activity != ActivityTyping {
			if acts == nil {
				acts = map[string]string{}
			}
			acts[e.User] = e.Activity
		}
	}
	return users, acts
}

// RoomEvent is a normalized event on a room's Pub/Sub channel
// (chat:room:{enc(room)}): the server frame exactly as sent to clients, plus
// V and TsMs (Redis TIME when the worker published it, unix ms).
//
//	{"v":1,"type":"typing_start","room":"42","user":"alice","name":"Alice","ttl_ms":5000,"ts_ms":1764480000000}
//	{"v":1,"type":"typing_stop","room":"42","user":"alice","reason":"stopped","ts_ms":1764480000000}
//
// Thread is the thread of Room the event is about ("" = the room itself);
// Activity (typing_start) is what the user does ("" = typing); TTLMs is
// the entry's ttl, a platform service's own when it gave one
// (docs/protocol.md, "Threads and activities"). The worker's scripts
// build expiry stops from the bytes up to "user", then "thread", then
// "reason": keep that field order.
type RoomEvent struct {
	V        int    `json:"v"`
	Type     string `json:"type"`
	Room     string `json:"room"`
	User     string `json:"user"`
	Thread   string `json:"thread,omitempty"`
	Name     string `json:"name,omitempty"`
	Activity string `json:"activity,omitempty"`
	TTLMs    int64  `json:"ttl_ms,omitempty"`
	Reason   string `json:"reason,omitempty"`
	TsMs     int64  `json:"ts_ms"`
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
	if ev.Thread != "" {
		if err := ValidateID("thread", ev.Thread); err != nil {
			return RoomEvent{}, err
		}
	}
	return ev, nil
}
