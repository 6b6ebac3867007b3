// Package protocol holds the Ellipsis wire contract v1 (docs/protocol.md;
// docs/asyncapi.yaml describes every message with a JSON Schema): the
// WebSocket frames between browsers and the gateway, the NATS commands and
// snapshot messages between gateways (or platform services) and presence
// workers, and the normalized room events on Redis Pub/Sub. Decoders validate
// everything from outside and return errors that name the field and the limit.
package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// Client frame types (client to gateway).
const (
	TypeJoin        = "join"
	TypeLeave       = "leave"
	TypeTypingStart = "typing_start"
	TypeTypingStop  = "typing_stop"
	TypeSync        = "sync"
	TypePing        = "ping"
	TypeWatch       = "watch"
	TypeUnwatch     = "unwatch"
)

// Server event types (gateway to client). typing_start and typing_stop are
// shared with the client frame types above.
const (
	TypeJoined = "joined"
	TypeLeft   = "left"
	TypeTyping = "typing"
	TypePong   = "pong"
	TypeError  = "error"
	// Watching rooms (docs/protocol.md, "Watching rooms").
	TypeWatching  = "watching"
	TypeUnwatched = "unwatched"
	TypeSummary   = "summary"
)

// SummaryTypists is the most typists a summary frame lists ("typing"; its
// "total" counts them all): docs/protocol.md, "Watching rooms".
const SummaryTypists = 3

// Error codes of error frames (docs/protocol.md, "Error codes").
const (
	CodeBadRequest  = "bad_request"
	CodeUnknownType = "unknown_type"
	CodeNotJoined   = "not_joined"
	CodeForbidden   = "forbidden"
	CodeRoomLimit   = "room_limit"
	CodeRateLimited = "rate_limited"
	CodeWatchLimit  = "watch_limit"
	// CodeTooManyThreads: a typing_start in one more thread of a room than
	// ELLIPSIS_MAX_THREADS_PER_USER that the connection types in
	// (docs/protocol.md, "Threads and activities").
	CodeTooManyThreads = "too_many_threads"
	CodeUnavailable    = "unavailable"
	CodeInternal       = "internal"
)

// Stop reasons carried by typing_stop.
const (
	ReasonStopped      = "stopped"
	ReasonExpired      = "expired"
	ReasonDisconnected = "disconnected"
	ReasonLeft         = "left"
)

// ClientFrame is one decoded, validated client frame. Room is set for every
// type but ping, watch and unwatch; ID is the optional request id echoed on
// the reply. Rooms is the rooms of a watch (1 or more) or unwatch (nil: every
// watched room), each a valid room id; the decoder keeps them as sent
// (duplicates included: the gateway takes each once). Unknown JSON fields (a
// "user" field included) are ignored: the user id only ever comes from
// authentication.
//
// Thread (typing_start, typing_stop) is the thread of Room the frame is
// about, an id with the rules of a room ("" = the room itself: the field
// was left out); Activity (typing_start) is a name of [ValidateActivity]'s
// shape ("" = left out, [ActivityTyping]); the gateway checks it against
// its set (the standard activities and ELLIPSIS_ACTIVITIES). Both are
// ignored on the other frame types, whatever their JSON type. A field sent empty ("thread":"") is
// an error, not the room itself (docs/protocol.md, "Threads and
// activities").
//
// Typing is a join's option (docs/protocol.md, "Per-viewer filters"):
// false joins the room without its typing, nil (absent or null) and true
// with it; the decoder reads it on join only (on other frames it is
// ignored, nil).
type ClientFrame struct {
	Type     string   `json:"type"`
	Room     string   `json:"room,omitempty"`
	Thread   string   `json:"thread,omitempty"`
	Activity string   `json:"activity,omitempty"`
	Rooms    []string `json:"rooms,omitempty"`
	ID       string   `json:"id,omitempty"`
	Typing   *bool    `json:"typing,omitempty"`

	// threadSet and activitySet: the field was in the frame (so that an
	// empty one is refused, not read as left out).
	threadSet, activitySet bool
}

// TypingOff reports whether f is a join asking for no typing of its room
// ("typing":false).
func (f ClientFrame) TypingOff() bool { return f.Typing != nil && !*f.Typing }

// clientFrameJSON is the encoding/json form of a client frame: thread and
// activity are kept raw, read only on the frame types that take them
// (elsewhere they are unknown fields, ignored whatever their JSON type),
// and a field left out or null is told from one sent empty; typing is
// kept raw too, so that only a join's typing is checked and a frame of
// another type that happens to carry one is read as before.
type clientFrameJSON struct {
	Type     string          `json:"type"`
	Room     string          `json:"room"`
	Thread   json.RawMessage `json:"thread"`
	Activity json.RawMessage `json:"activity"`
	Rooms    []string        `json:"rooms"`
	ID       string          `json:"id"`
	Typing   json.RawMessage `json:"typing"`
}

// decodeClientFrameJSON decodes data with encoding/json (the slow path of
// [DecodeClientFrame]); on error f holds what was read. A join's typing
// that is not a boolean is a *FieldError.
func decodeClientFrameJSON(data []byte) (ClientFrame, error) {
	var w clientFrameJSON
	err := json.Unmarshal(data, &w)
	f := ClientFrame{Type: w.Type, Room: w.Room, Rooms: w.Rooms, ID: w.ID}
	if err != nil {
		return f, err
	}
	if w.Type == TypeTypingStart || w.Type == TypeTypingStop {
		if f.Thread, f.threadSet, err = optionalString("thread", w.Thread); err != nil {
			return f, err
		}
	}
	if w.Type == TypeTypingStart {
		if f.Activity, f.activitySet, err = optionalString("activity", w.Activity); err != nil {
			return f, err
		}
	}
	if f.Type == TypeJoin {
		f.Typing, err = decodeJoinTyping(w.Typing)
	}
	return f, err
}

// takenScope is f without the thread and activity its type does not take
// (as decodeClientFrameJSON reads them).
func takenScope(f ClientFrame) ClientFrame {
	if f.Type != TypeTypingStart && f.Type != TypeTypingStop {
		f.Thread, f.threadSet = "", false
	}
	if f.Type != TypeTypingStart {
		f.Activity, f.activitySet = "", false
	}
	return f
}

// optionalString decodes field's raw JSON value: set false when it was
// left out or null, else the string; another JSON type is a
// *json.UnmarshalTypeError naming field (decodeErr's "thread: must be a
// string, got number").
func optionalString(field string, raw json.RawMessage) (s string, set bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			te.Field, te.Struct = field, "clientFrameJSON"
			return "", false, te
		}
		return "", false, err
	}
	return s, true, nil
}

// FrameError is a client frame that cannot be served. Code is one of the
// error codes ([CodeBadRequest], [CodeUnknownType]); Room and ID are echoed
// when they could be read.
type FrameError struct {
	Code    string
	Message string
	Room    string
	ID      string
}

func (e *FrameError) Error() string { return e.Code + ": " + e.Message }

// DecodeClientFrame parses and validates one client text frame. On failure
// it returns a *[FrameError] whose Code is [CodeBadRequest] (malformed JSON,
// missing or invalid field) or [CodeUnknownType].
func DecodeClientFrame(data []byte) (ClientFrame, error) {
	f, ok := scanClientFrame(data) // the common frames, without reflection
	if !ok {
		var err error
		if f, err = decodeClientFrameJSON(data); err != nil {
			var fe *FieldError
			if errors.As(err, &fe) && fe.Field == "typing" {
				e := &FrameError{Code: CodeBadRequest, Message: err.Error()}
				if ValidateRequestID(f.ID) == nil {
					e.ID = f.ID
				}
				if ValidateID("room", f.Room) == nil {
					e.Room = f.Room
				}
				return ClientFrame{}, e
			}
			return ClientFrame{}, clientDecodeError(err, f)
		}
	}
	return validateClientFrame(f)
}

// decodeJoinTyping reads a join's raw "typing": nil when absent or null,
// else a boolean; another JSON type is a *FieldError naming the field.
func decodeJoinTyping(raw json.RawMessage) (*bool, error) {
	switch v := string(bytes.TrimSpace(raw)); v {
	case "", "null":
		return nil, nil
	case "true", "false":
		on := v == "true"
		return &on, nil
	}
	return nil, &FieldError{"typing", "must be a boolean (true or false), got " + shortJSON(raw)}
}

// clientDecodeError is the FrameError of a frame encoding/json refused.
func clientDecodeError(err error, f ClientFrame) error {
	fe := &FrameError{Code: CodeBadRequest, Message: decodeErr(err).Error()}
	// A wrong type in one field still decodes the others: echo the id.
	if _, typeErr := err.(*json.UnmarshalTypeError); typeErr && ValidateRequestID(f.ID) == nil {
		fe.ID = f.ID
	}
	return fe
}

// validateClientFrame checks a decoded client frame.
func validateClientFrame(f ClientFrame) (ClientFrame, error) {
	if err := ValidateRequestID(f.ID); err != nil {
		return ClientFrame{}, &FrameError{Code: CodeBadRequest, Message: err.Error()}
	}
	switch f.Type {
	case TypePing:
		f.Room, f.Typing = "", nil
		return f, nil
	case TypeJoin, TypeLeave, TypeTypingStart, TypeTypingStop, TypeSync:
		f.Rooms = nil
		if f.Type != TypeJoin {
			f.Typing = nil
		}
		if err := ValidateID("room", f.Room); err != nil {
			e := &FrameError{Code: CodeBadRequest, Message: err.Error(), ID: f.ID}
			return ClientFrame{}, e
		}
		return validateScope(f)
	case TypeWatch, TypeUnwatch:
		if f.Room != "" && f.Rooms == nil && f.Type == TypeUnwatch {
			// join's key by mistake: read as "no rooms", it would end
			// every watch.
			return ClientFrame{}, &FrameError{Code: CodeBadRequest, Message: "room: not a field of unwatch; give rooms (an array of room ids), or neither to unwatch every room", ID: f.ID}
		}
		f.Room, f.Typing = "", nil
		switch {
		case f.Rooms != nil && len(f.Rooms) == 0 && f.Type == TypeUnwatch:
			return ClientFrame{}, &FrameError{Code: CodeBadRequest, Message: "rooms: must hold 1 or more room ids, got []; leave it out to unwatch every room", ID: f.ID}
		case len(f.Rooms) == 0 && f.Type == TypeWatch:
			msg := "rooms: is required (an array of 1 or more room ids)"
			if f.Rooms != nil {
				msg = "rooms: must hold 1 or more room ids, got []"
			}
			return ClientFrame{}, &FrameError{Code: CodeBadRequest, Message: msg, ID: f.ID}
		}
		if f.Type == TypeUnwatch {
			// Nothing to refuse one by one: an invalid id is the frame's error.
			for i, r := range f.Rooms {
				if err := ValidateID(fmt.Sprintf("rooms[%d]", i), r); err != nil {
					return ClientFrame{}, &FrameError{Code: CodeBadRequest, Message: err.Error(), ID: f.ID}
				}
			}
			return f, nil
		}
		// A watch's room ids are checked one by one by the gateway, which
		// refuses an invalid one (bad_request) and serves the others.
		return f, nil
	case "":
		return ClientFrame{}, &FrameError{Code: CodeBadRequest, Message: "type: is required", ID: f.ID}
	default:
		t := f.Type
		if len(t) > 64 {
			t = t[:64] + "..."
		}
		return ClientFrame{}, &FrameError{Code: CodeUnknownType, Message: fmt.Sprintf("type: unknown type %q", t), ID: f.ID}
	}
}

// validateScope checks the thread and activity of a frame whose room is
// valid, and drops them from the frame types that do not take them.
func validateScope(f ClientFrame) (ClientFrame, error) {
	typing := f.Type == TypeTypingStart || f.Type == TypeTypingStop
	if !typing {
		f.Thread, f.threadSet = "", false
	}
	if f.Type != TypeTypingStart {
		f.Activity, f.activitySet = "", false
	}
	bad := func(msg string) (ClientFrame, error) {
		return ClientFrame{}, &FrameError{Code: CodeBadRequest, Message: msg, Room: f.Room, ID: f.ID}
	}
	if f.threadSet {
		if f.Thread == "" {
			return bad(fmt.Sprintf("thread: must be 1..%d bytes, got 0 (leave it out for the room itself)", MaxIDBytes))
		}
		if err := ValidateID("thread", f.Thread); err != nil {
			return bad(err.Error())
		}
	}
	if f.activitySet {
		if err := ValidateActivity("activity", f.Activity); err != nil {
			return bad(err.Error())
		}
	}
	f.threadSet, f.activitySet = false, false // checked: the zero value again, as a frame without them
	return f, nil
}

// decodeErr turns a json.Unmarshal error into a *FieldError: a wrong type
// names its field ("id: must be a string, got number"), anything else is
// field "json" ("malformed: ...").
func decodeErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		want := "a string"
		if te.Type != nil {
			switch te.Type.Kind() {
			case reflect.String:
			case reflect.Slice:
				want = "an array of strings"
			case reflect.Int, reflect.Int64, reflect.Uint64:
				want = "a whole number"
				if te.Type.Kind() == reflect.Uint64 {
					want = "a whole number >= 0"
				}
			default:
				want = "a " + te.Type.String()
			}
		}
		if te.Field == "rooms" && te.Struct == "clientFrameJSON" {
			want = "an array of room id strings" // the element's type otherwise
		}
		return &FieldError{te.Field, fmt.Sprintf("must be %s, got %s", want, te.Value)}
	}
	return &FieldError{"json", "malformed: " + jsonErrText(err)}
}

func jsonErrText(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// Typist is one entry of a snapshot: a user who is typing, with the display
// name from their token when there is one. Activity is what the user does
// when it is not typing ("" = [ActivityTyping]), on the gateway's frames
// (joined, typing, summary, the HTTP snapshot); a [Snapshot] and a
// [SnapshotReply] keep activities in their Activities maps instead.
//
// TTLMs (ms) is set only for a typist whose entry was started with a ttl
// other than the standard ttl (a platform service's ttl_ms, at most
// ELLIPSIS_SERVICE_MAX_TTL): that entry's ttl, which receivers treat as a
// typing_start's ttl_ms (shown until ttl_ms from now unless refreshed or
// stopped); 0, left out, is the standard ttl (GET /v1/config ttl_ms).
// docs/protocol.md, "Threads and activities".
type Typist struct {
	User     string `json:"user"`
	Name     string `json:"name,omitempty"`
	Activity string `json:"activity,omitempty"`
	TTLMs    int64  `json:"ttl_ms,omitempty"`
}

// ThreadTypists is one thread of a room in a gateway's snapshot frame
// (joined, typing, the HTTP snapshot): who types in it, at most the
// snapshot cap of typists in all threads together, sorted by user, and
// Total, its typists (>= len(Users)). Threads are listed sorted by thread
// and only when they have a typist.
type ThreadTypists struct {
	Thread string   `json:"thread"`
	Users  []Typist `json:"users"`
	Total  int      `json:"total"`
}

// withActivities returns users with each one's activity of acts set, a
// copy when there is one to set (users may be shared), never nil.
func withActivities(users []Typist, acts map[string]string) []Typist {
	if users == nil {
		return []Typist{}
	}
	if len(acts) == 0 {
		return users
	}
	out := make([]Typist, len(users))
	for i, u := range users {
		if a := acts[u.User]; a != "" && a != ActivityTyping {
			u.Activity = a
		}
		out[i] = u
	}
	return out
}

// ScopeThreads is the "threads" of a gateway's snapshot frame for s: its
// threads with a typist, each entry with its activity; nil when there is
// none (the field is left out).
func ScopeThreads(s Snapshot) []ThreadTypists {
	var out []ThreadTypists
	for _, t := range s.Threads {
		if t.Total <= 0 && len(t.Users) == 0 {
			continue
		}
		out = append(out, ThreadTypists{Thread: t.Thread, Users: withActivities(t.Users, t.Activities), Total: max(t.Total, len(t.Users))})
	}
	return out
}

// Joined answers join with the snapshot of who is typing (self filtered).
// Typing is always present, [] when nobody types, and lists at most the
// snapshot cap of typists; Total is the number of visible typists, which
// is larger than len(Typing) when the list was cut. Both are the room
// itself; Threads lists the room's threads with a typist (left out when
// none: [ThreadTypists]).
type Joined struct {
	Type    string          `json:"type"` // "joined"
	Room    string          `json:"room"`
	Typing  []Typist        `json:"typing"`
	Total   int             `json:"total"`
	Threads []ThreadTypists `json:"threads,omitempty"`
	ID      string          `json:"id,omitempty"`
}

// Left answers leave.
type Left struct {
	Type string `json:"type"` // "left"
	Room string `json:"room"`
	ID   string `json:"id,omitempty"`
}

// TypingSnapshot answers sync, and is pushed unasked after a resync. Users is
// always present and lists at most the snapshot cap of typists; Total is
// the number of visible typists (see [Joined]).
type TypingSnapshot struct {
	Type    string          `json:"type"` // "typing"
	Room    string          `json:"room"`
	Users   []Typist        `json:"users"`
	Total   int             `json:"total"`
	Threads []ThreadTypists `json:"threads,omitempty"`
	ID      string          `json:"id,omitempty"`
}

// Pong answers ping.
type Pong struct {
	Type string `json:"type"` // "pong"
	ID   string `json:"id,omitempty"`
}

// ErrorFrame reports a failed client frame.
type ErrorFrame struct {
	Type    string `json:"type"` // "error"
	Code    string `json:"code"`
	Message string `json:"message"`
	Room    string `json:"room,omitempty"`
	ID      string `json:"id,omitempty"`
}

// ServerFrame is any server frame as a client reads it: the union of the
// fields of [Joined] (Typing, Total), [Left], [TypingSnapshot] (Users,
// Total), [Pong], [ErrorFrame] (Code, Message), [Watching] and
// [Unwatched] (Rooms, Refused, Watched), [Summary] (Typing, Total) and the
// room events
// typing_start and typing_stop, which the gateway forwards exactly as the
// worker published them ([RoomEvent]: V, User, Thread, Name, Activity,
// TTLMs, Reason, TsMs), and Threads of joined and typing.
// Type tells which fields are set; a field a frame does not carry is zero.
type ServerFrame struct {
	V        int             `json:"v,omitempty"`
	Type     string          `json:"type"`
	Room     string          `json:"room,omitempty"`
	User     string          `json:"user,omitempty"`
	Thread   string          `json:"thread,omitempty"`
	Name     string          `json:"name,omitempty"`
	Activity string          `json:"activity,omitempty"`
	Threads  []ThreadTypists `json:"threads,omitempty"`
	TTLMs    int64           `json:"ttl_ms,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	TsMs     int64           `json:"ts_ms,omitempty"`
	Typing   []Typist        `json:"typing,omitempty"`
	Users    []Typist        `json:"users,omitempty"`
	Total    int             `json:"total,omitempty"`
	Code     string          `json:"code,omitempty"`
	Message  string          `json:"message,omitempty"`
	Rooms    []string        `json:"rooms,omitempty"`
	Refused  []Refusal       `json:"refused,omitempty"`
	Watched  int             `json:"watched,omitempty"`
	ID       string          `json:"id,omitempty"`
}

// NewJoined, NewLeft, NewTypingSnapshot, NewPong and NewError fill Type.

// NewJoined and NewTypingSnapshot list s's room scope with each typist's
// activity, and its threads ([ScopeThreads]).

func NewJoined(room string, s Snapshot, id string) Joined {
	return Joined{Type: TypeJoined, Room: room, Typing: withActivities(s.Users, s.Activities), Total: s.Total, Threads: ScopeThreads(s), ID: id}
}

func NewLeft(room, id string) Left { return Left{Type: TypeLeft, Room: room, ID: id} }

func NewTypingSnapshot(room string, s Snapshot, id string) TypingSnapshot {
	return TypingSnapshot{Type: TypeTyping, Room: room, Users: withActivities(s.Users, s.Activities), Total: s.Total, Threads: ScopeThreads(s), ID: id}
}

func NewPong(id string) Pong { return Pong{Type: TypePong, ID: id} }

func NewError(code, message, room, id string) ErrorFrame {
	return ErrorFrame{Type: TypeError, Code: code, Message: message, Room: room, ID: id}
}

// Encode marshals a server frame. The frame types above cannot fail to
// marshal; a failure is a programming error and is returned as is.
func Encode(v any) ([]byte, error) { return json.Marshal(v) }

// Refusal is one room of a watch frame that is not watched, with the error
// code saying why ([CodeBadRequest] for an invalid room id,
// [CodeForbidden], [CodeWatchLimit], [CodeRateLimited], [CodeUnavailable])
// and a message for people.
type Refusal struct {
	Room    string `json:"room"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Watching answers watch (docs/protocol.md, "Watching rooms"): Rooms are
// the frame's rooms now watched (those watched already included), Refused
// the others (always present, [] when none), Watched the number of rooms
// the connection watches after the frame.
type Watching struct {
	Type    string    `json:"type"` // "watching"
	ID      string    `json:"id,omitempty"`
	Rooms   []string  `json:"rooms"`
	Refused []Refusal `json:"refused"`
	Watched int       `json:"watched"`
}

// Unwatched answers unwatch: Rooms are the rooms no longer watched (rooms
// that were not watched are listed too), Watched the count after.
type Unwatched struct {
	Type    string   `json:"type"` // "unwatched"
	ID      string   `json:"id,omitempty"`
	Rooms   []string `json:"rooms"`
	Watched int      `json:"watched"`
}

// Summary is who is typing in a watched room: Typing the first
// [SummaryTypists] typists of the room's snapshot (self filtered; always
// present, [] when nobody types; each with its activity), Total all the
// room's visible typists. Both are the room itself: a summary counts no
// thread (docs/protocol.md, "Watching rooms").
type Summary struct {
	Type   string   `json:"type"` // "summary"
	Room   string   `json:"room"`
	Typing []Typist `json:"typing"`
	Total  int      `json:"total"`
}

// NewWatching, NewUnwatched and NewSummary fill Type and turn nil lists
// into [].

func NewWatching(id string, rooms []string, refused []Refusal, watched int) Watching {
	if rooms == nil {
		rooms = []string{}
	}
	if refused == nil {
		refused = []Refusal{}
	}
	return Watching{Type: TypeWatching, ID: id, Rooms: rooms, Refused: refused, Watched: watched}
}

func NewUnwatched(id string, rooms []string, watched int) Unwatched {
	if rooms == nil {
		rooms = []string{}
	}
	return Unwatched{Type: TypeUnwatched, ID: id, Rooms: rooms, Watched: watched}
}

// NewSummary makes room's summary from s, a snapshot already self
// filtered (Snapshot.WithoutUser): the first [SummaryTypists] typists of
// its room scope, with their activities, and its total.
func NewSummary(room string, s Snapshot) Summary {
	typing := s.Users
	if len(typing) > SummaryTypists {
		typing = typing[:SummaryTypists]
	}
	typing = withActivities(typing, s.Activities)
	return Summary{Type: TypeSummary, Room: room, Typing: typing, Total: max(s.Total, len(s.Users))}
}
