package deploy

// docs/asyncapi.yaml against the Go protocol types (shared/protocol), so
// that the document and the code cannot drift apart: every message example
// of the document is accepted by the Go decoder of that message, and every
// message the Go constructors produce validates against the document's
// schema for it. The JS tests (clients/js/test/unit/asyncapi.test.js) parse
// the same document with @asyncapi/parser. The payload schemas are AsyncAPI
// Schema objects, a superset of JSON Schema draft-07 (AsyncAPI 3.0.0,
// "Schema Object"), compiled here as draft-07.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// asyncAPIURL is the made-up URL the document is registered under, so that
// its "#/components/..." references resolve inside it.
const asyncAPIURL = "https://ellipsis.invalid/asyncapi.json"

// asyncAPIDoc is docs/asyncapi.yaml read for the tests: the document as
// JSON, and a compiler holding it.
type asyncAPIDoc struct {
	raw      map[string]any
	compiler *jsonschema.Compiler
}

func loadAsyncAPI(t *testing.T) *asyncAPIDoc {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "asyncapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("docs/asyncapi.yaml: %v", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		t.Fatal(err)
	}
	if raw["asyncapi"] != "3.0.0" {
		t.Fatalf("docs/asyncapi.yaml: asyncapi %v, want 3.0.0", raw["asyncapi"])
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	if err := c.AddResource(asyncAPIURL, doc); err != nil {
		t.Fatal(err)
	}
	return &asyncAPIDoc{raw: raw, compiler: c}
}

// messages returns the document's components.messages by id.
func (d *asyncAPIDoc) messages(t *testing.T) map[string]map[string]any {
	t.Helper()
	comps, _ := d.raw["components"].(map[string]any)
	msgs, _ := comps["messages"].(map[string]any)
	if len(msgs) == 0 {
		t.Fatal("docs/asyncapi.yaml: no components.messages")
	}
	out := map[string]map[string]any{}
	for id, m := range msgs {
		mm, ok := m.(map[string]any)
		if !ok {
			t.Fatalf("message %s is not an object", id)
		}
		out[id] = mm
	}
	return out
}

// schema compiles the payload schema of message id.
func (d *asyncAPIDoc) schema(t *testing.T, id string) *jsonschema.Schema {
	t.Helper()
	s, err := d.compiler.Compile(asyncAPIURL + "#/components/messages/" + id + "/payload")
	if err != nil {
		t.Fatalf("message %s: payload schema: %v", id, err)
	}
	return s
}

// validate checks the JSON bytes msg against the payload schema of id.
func (d *asyncAPIDoc) validate(t *testing.T, id string, msg []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(msg))
	if err != nil {
		t.Fatalf("message %s: %s is not JSON: %v", id, msg, err)
	}
	return d.schema(t, id).Validate(inst)
}

// decodeStrict decodes data into v, refusing fields v does not have, so a
// field named differently in the document and in the Go type fails.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	return dec.Decode(v)
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

// goDecoders says how the Go code reads each message of the document. A
// message the Go code reads with a decoder goes through it; a message the
// Go code only writes is decoded strictly into its Go type and must
// re-encode to the same JSON. The authorisation hook's messages are the
// gateway's internals (services/gateway/internal/authz), checked there.
var goDecoders = map[string]func(t *testing.T, example []byte) error{
	"join":               clientFrame(protocol.TypeJoin),
	"leave":              clientFrame(protocol.TypeLeave),
	"typingStartCommand": clientFrame(protocol.TypeTypingStart),
	"typingStopCommand":  clientFrame(protocol.TypeTypingStop),
	"sync":               clientFrame(protocol.TypeSync),
	"ping":               clientFrame(protocol.TypePing),
	"watch":              clientFrame(protocol.TypeWatch),
	"unwatch":            clientFrame(protocol.TypeUnwatch),
	"watching":           serverFrame[protocol.Watching](protocol.TypeWatching),
	"unwatched":          serverFrame[protocol.Unwatched](protocol.TypeUnwatched),
	"summary":            serverFrame[protocol.Summary](protocol.TypeSummary),
	"typingStart":        roomEvent(protocol.TypeTypingStart),
	"typingStop":         roomEvent(protocol.TypeTypingStop),
	"natsTypingStart":    roomEvent(protocol.TypeTypingStart),
	"natsTypingStop":     roomEvent(protocol.TypeTypingStop),
	"joined":             serverFrame[protocol.Joined](protocol.TypeJoined),
	"left":               serverFrame[protocol.Left](protocol.TypeLeft),
	"typing":             serverFrame[protocol.TypingSnapshot](protocol.TypeTyping),
	"pong":               serverFrame[protocol.Pong](protocol.TypePong),
	"error":              serverFrame[protocol.ErrorFrame](protocol.TypeError),
	"command": func(t *testing.T, ex []byte) error {
		c, err := protocol.DecodeCommand(ex)
		if err != nil {
			return err
		}
		return roundTrip(t, c, ex)
	},
	"commandBatch": func(t *testing.T, ex []byte) error {
		cmds, errs, err := protocol.DecodeCommands(ex)
		if err != nil {
			return err
		}
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		if len(cmds) < 2 {
			return errors.New("a batch example should hold several commands")
		}
		return nil
	},
	"snapshotRequest": func(t *testing.T, ex []byte) error {
		r, err := protocol.DecodeSnapshotRequest(ex)
		if err != nil {
			return err
		}
		return roundTrip(t, r, ex)
	},
	"snapshotReply": func(t *testing.T, ex []byte) error {
		r, err := protocol.DecodeSnapshotReply(ex)
		var re *protocol.ReplyError
		if errors.As(err, &re) {
			return roundTrip(t, r, ex) // an error reply, as the worker sends it
		}
		if err != nil {
			return err
		}
		return roundTrip(t, r, ex)
	},
	"authzRequest": nil,
	"authzReply":   nil,
}

func clientFrame(typ string) func(*testing.T, []byte) error {
	return func(t *testing.T, ex []byte) error {
		f, err := protocol.DecodeClientFrame(ex)
		if err != nil {
			return err
		}
		if f.Type != typ {
			return errors.New("decoded as type " + f.Type + ", want " + typ)
		}
		return nil
	}
}

func roomEvent(typ string) func(*testing.T, []byte) error {
	return func(t *testing.T, ex []byte) error {
		ev, err := protocol.DecodeRoomEvent(ex)
		if err != nil {
			return err
		}
		if ev.Type != typ {
			return errors.New("decoded as type " + ev.Type + ", want " + typ)
		}
		return roundTrip(t, ev, ex)
	}
}

func serverFrame[T any](typ string) func(*testing.T, []byte) error {
	return func(t *testing.T, ex []byte) error {
		var v T
		if err := decodeStrict(ex, &v); err != nil {
			return err
		}
		if got := reflect.ValueOf(v).FieldByName("Type").String(); got != typ {
			return errors.New("type " + got + ", want " + typ)
		}
		return roundTrip(t, v, ex)
	}
}

// roundTrip checks that v, decoded from ex, encodes back to the same JSON:
// no field of the example was dropped or renamed by the Go type.
func roundTrip(t *testing.T, v any, ex []byte) error {
	t.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if !sameJSON(t, out, ex) {
		return errors.New("re-encodes as " + string(out))
	}
	return nil
}

func TestAsyncAPIExamplesDecodeInGo(t *testing.T) {
	doc := loadAsyncAPI(t)
	msgs := doc.messages(t)
	for id := range goDecoders {
		if _, ok := msgs[id]; !ok {
			t.Errorf("docs/asyncapi.yaml has no message %s", id)
		}
	}
	for id, m := range msgs {
		decode, known := goDecoders[id]
		if !known {
			t.Errorf("message %s: no Go decoder in goDecoders (a new message needs one)", id)
			continue
		}
		examples, _ := m["examples"].([]any)
		if len(examples) == 0 {
			t.Errorf("message %s has no example", id)
		}
		for i, e := range examples {
			em, _ := e.(map[string]any)
			name, _ := em["name"].(string)
			payload, ok := em["payload"]
			if !ok {
				t.Errorf("message %s example %d has no payload", id, i)
				continue
			}
			ex, err := json.Marshal(payload)
			if err != nil {
				t.Fatal(err)
			}
			if err := doc.validate(t, id, ex); err != nil {
				t.Errorf("message %s example %s does not validate against its own schema: %v", id, name, err)
			}
			if decode == nil {
				continue
			}
			if err := decode(t, ex); err != nil {
				t.Errorf("message %s example %s (%s): the Go decoder refuses it: %v", id, name, ex, err)
			}
		}
	}
}

func TestAsyncAPISchemasAcceptGoMessages(t *testing.T) {
	doc := loadAsyncAPI(t)
	long := strings.Repeat("é", protocol.MaxIDBytes/2) // 256 bytes, 128 characters
	odd := []string{"42", "room:42", "!abc:matrix.org", "a*b?c[d]", "{x}", "café ☕", "a b", ".", long}
	snaps := []protocol.Snapshot{
		{},
		{Users: []protocol.Typist{{User: "alice", Name: "Alice"}}, Total: 1},
		{Users: []protocol.Typist{{User: "bob"}, {User: long, Name: `<b>&"`}}, Total: 250},
		{Users: []protocol.Typist{{User: "alice"}, {User: "bot", Name: "Assistant"}}, Total: 2, Activities: map[string]string{"bot": protocol.ActivityThinking},
			Threads: []protocol.ThreadSnapshot{{Thread: long, Users: []protocol.Typist{{User: "alice"}}, Total: 4, Activities: map[string]string{"alice": "custom_act"}}, {Thread: "t", Users: []protocol.Typist{}, Total: 1}}},
	}
	m := &goMessages{t: t}
	for _, room := range odd {
		for _, id := range []string{"", "c1"} {
			m.addWebSocketFrames(room, id, snaps)
		}
		m.add("error", m.enc(protocol.NewError(protocol.CodeRateLimited, "too many frames", "", "")))
		m.addRoomEvents(room, long)
		m.addNATSPayloads(room, snaps)
	}
	for _, code := range []string{protocol.CodeBadRequest, protocol.CodeUnavailable, protocol.CodeInternal} {
		m.add("snapshotReply", m.enc(protocol.SnapshotReply{V: protocol.Version, Error: &protocol.ReplyError{Code: code, Message: "typing state unavailable, retry"}}))
	}

	seen := map[string]bool{}
	for _, p := range m.all {
		seen[p.id] = true
		if err := doc.validate(t, p.id, p.msg); err != nil {
			t.Errorf("message %s: %s does not validate against docs/asyncapi.yaml: %v", p.id, p.msg, err)
		}
	}
	for id, decode := range goDecoders {
		if decode != nil && !seen[id] {
			t.Errorf("message %s: no Go-produced message checked against its schema", id)
		}
	}
}

// producedMessage is one message the Go code builds, with the AsyncAPI
// message id whose schema it must match.
type producedMessage struct {
	id  string
	msg []byte
}

// goMessages collects, in order, the messages the Go code produces.
type goMessages struct {
	t   *testing.T
	all []producedMessage
}

func (m *goMessages) add(id string, msg []byte) { m.all = append(m.all, producedMessage{id, msg}) }

// enc is protocol.Encode, failing the test on an error.
func (m *goMessages) enc(v any) []byte {
	m.t.Helper()
	b, err := protocol.Encode(v)
	if err != nil {
		m.t.Fatal(err)
	}
	return b
}

// addWebSocketFrames adds the server frames the gateway writes for room
// and request id, and the client frames a Go client (the load generator,
// tests) writes.
func (m *goMessages) addWebSocketFrames(room, id string, snaps []protocol.Snapshot) {
	m.t.Helper()
	for _, s := range snaps {
		m.add("joined", m.enc(protocol.NewJoined(room, s, id)))
		m.add("typing", m.enc(protocol.NewTypingSnapshot(room, s, id)))
		m.add("joined", m.enc(protocol.NewJoined(room, s.WithoutUser("alice"), id)))
	}
	m.add("left", m.enc(protocol.NewLeft(room, id)))
	m.add("pong", m.enc(protocol.NewPong(id)))
	for _, code := range []string{protocol.CodeBadRequest, protocol.CodeUnknownType, protocol.CodeNotJoined,
		protocol.CodeForbidden, protocol.CodeRoomLimit, protocol.CodeUnavailable, protocol.CodeInternal} {
		m.add("error", m.enc(protocol.NewError(code, "room: must be 1..256 bytes, got 300", room, id)))
	}
	for typ, msgID := range map[string]string{protocol.TypeJoin: "join", protocol.TypeLeave: "leave",
		protocol.TypeTypingStart: "typingStartCommand", protocol.TypeTypingStop: "typingStopCommand", protocol.TypeSync: "sync"} {
		m.add(msgID, m.enc(protocol.ClientFrame{Type: typ, Room: room, ID: id}))
	}
	m.add("typingStartCommand", m.enc(protocol.ClientFrame{Type: protocol.TypeTypingStart, Room: room, Thread: room, Activity: protocol.ActivityUploading, ID: id}))
	m.add("typingStopCommand", m.enc(protocol.ClientFrame{Type: protocol.TypeTypingStop, Room: room, Thread: room, ID: id}))
	m.add("error", m.enc(protocol.NewError(protocol.CodeTooManyThreads, "at most 5 threads", room, id)))
	m.add("ping", m.enc(protocol.ClientFrame{Type: protocol.TypePing, ID: id}))
	m.add("watch", m.enc(protocol.ClientFrame{Type: protocol.TypeWatch, Rooms: []string{room, "lobby"}, ID: id}))
	m.add("unwatch", m.enc(protocol.ClientFrame{Type: protocol.TypeUnwatch, Rooms: []string{room}, ID: id}))
	m.add("unwatch", m.enc(protocol.ClientFrame{Type: protocol.TypeUnwatch, ID: id}))
	m.add("watching", m.enc(protocol.NewWatching(id, []string{room}, nil, 1)))
	for _, code := range []string{protocol.CodeBadRequest, protocol.CodeForbidden, protocol.CodeWatchLimit, protocol.CodeRateLimited, protocol.CodeUnavailable} {
		m.add("watching", m.enc(protocol.NewWatching(id, nil, []protocol.Refusal{{Room: room, Code: code, Message: "no"}, {Room: "", Code: protocol.CodeBadRequest, Message: "room: is required"}}, 0)))
	}
	m.add("unwatched", m.enc(protocol.NewUnwatched(id, []string{room, ""}, 0)))
	m.add("unwatched", m.enc(protocol.NewUnwatched(id, nil, 3)))
	for _, s := range snaps {
		m.add("summary", m.enc(protocol.NewSummary(room, s)))
		m.add("summary", m.enc(protocol.NewSummary(room, s.WithoutUser("alice"))))
	}
	m.add("summary", m.enc(protocol.NewSummary(room, protocol.Snapshot{Users: []protocol.Typist{{User: "a"}, {User: "b"}, {User: "c"}, {User: "d"}}, Total: 4})))
}

// addRoomEvents adds room's events: the worker's prefix, then Redis TIME
// and "}" (the Lua scripts append them). The NATS room events
// (ELLIPSIS_NATS_EVENTS) are the same bytes.
func (m *goMessages) addRoomEvents(room, long string) {
	event := func(ev protocol.RoomEvent) []byte {
		return append(strconv.AppendInt(protocol.RoomEventPrefix(ev), 1764480000123, 10), '}')
	}
	for _, name := range []string{"", "Alice", long} {
		ev := event(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: room, User: "alice", Name: name, TTLMs: 5000})
		m.add("typingStart", ev)
		m.add("natsTypingStart", ev)
	}
	for _, reason := range []string{protocol.ReasonStopped, protocol.ReasonExpired, protocol.ReasonDisconnected, protocol.ReasonLeft} {
		ev := event(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: room, User: long, Reason: reason})
		m.add("typingStop", ev)
		m.add("natsTypingStop", ev)
	}
}

// addNATSPayloads adds the NATS payloads for room as the gateway and the
// worker build them.
func (m *goMessages) addNATSPayloads(room string, snaps []protocol.Snapshot) {
	m.t.Helper()
	var batch []protocol.Command
	for _, c := range []protocol.Command{
		{V: protocol.Version, Op: protocol.OpStart, Room: room, User: "alice", Name: "Alice", Conn: "gw-a1b2-5f3c:17", Seq: 1, TsMs: 1764480000000},
		{V: protocol.Version, Op: protocol.OpStop, Room: room, User: "alice", Conn: "gw-a1b2-5f3c:17", Seq: 1<<64 - 1, TsMs: 1764480000000},
		{V: protocol.Version, Op: protocol.OpLeave, Room: room, User: "alice", Conn: "gw:1", Seq: 3},
		{V: protocol.Version, Op: protocol.OpStop, Room: room, User: "alice"},
		{V: protocol.Version, Op: protocol.OpDisconnect, Rooms: []string{room, "lobby"}, User: "alice", Conn: "gw:1", Seq: 4},
	} {
		if err := c.Validate(); err != nil {
			m.t.Fatalf("test command %+v: %v", c, err)
		}
		m.add("command", m.enc(c))
		batch = append(batch, c)
	}
	// The same commands as a gateway batches them (AppendBatchHead, ',', AppendBatchTail).
	b := protocol.AppendBatchHead(nil)
	for i := range batch {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = protocol.AppendCommand(b, &batch[i]); err != nil {
			m.t.Fatal(err)
		}
	}
	m.add("commandBatch", protocol.AppendBatchTail(b))
	m.add("snapshotRequest", m.enc(protocol.SnapshotRequest{V: protocol.Version, Room: room}))
	for _, s := range snaps {
		m.add("snapshotReply", m.enc(protocol.SnapshotReply{V: protocol.Version, Room: room, Users: s.Users, Total: s.Total}))
	}
}

// TestAsyncAPISchemasRefuse makes sure the checks above can fail: what the
// Go decoders refuse, the schemas refuse too.
func TestAsyncAPISchemasRefuse(t *testing.T) {
	doc := loadAsyncAPI(t)
	for _, c := range []struct {
		id, msg string
		decode  func([]byte) error
	}{
		{"join", `{"type":"join"}`, func(b []byte) error { _, err := protocol.DecodeClientFrame(b); return err }},
		{"join", `{"type":"join","room":"a\u0007b"}`, func(b []byte) error { _, err := protocol.DecodeClientFrame(b); return err }},
		{"watch", `{"type":"watch","rooms":[]}`, func(b []byte) error { _, err := protocol.DecodeClientFrame(b); return err }},
		{"watch", `{"type":"watch"}`, func(b []byte) error { _, err := protocol.DecodeClientFrame(b); return err }},
		{"watch", `{"type":"watch","rooms":[42]}`, func(b []byte) error { _, err := protocol.DecodeClientFrame(b); return err }},
		{"unwatch", `{"type":"unwatch","rooms":[]}`, func(b []byte) error { _, err := protocol.DecodeClientFrame(b); return err }},
		{"command", `{"v":1,"op":"start","room":"42","user":"alice"}`, func(b []byte) error { _, err := protocol.DecodeCommand(b); return err }},
		{"command", `{"v":1,"op":"disconnect","room":"42","user":"alice","conn":"c"}`, func(b []byte) error { _, err := protocol.DecodeCommand(b); return err }},
		{"command", `{"v":2,"op":"stop","room":"42","user":"alice"}`, func(b []byte) error { _, err := protocol.DecodeCommand(b); return err }},
		{"snapshotRequest", `{"v":1,"room":""}`, func(b []byte) error { _, err := protocol.DecodeSnapshotRequest(b); return err }},
		{"snapshotReply", `{"v":1,"room":"42","users":[],"total":-1}`, func(b []byte) error { _, err := protocol.DecodeSnapshotReply(b); return err }},
		{"typingStart", `{"v":1,"type":"typing_start","room":"42","user":"","ttl_ms":5000,"ts_ms":1}`, func(b []byte) error { _, err := protocol.DecodeRoomEvent(b); return err }},
	} {
		if c.decode([]byte(c.msg)) == nil {
			t.Errorf("the Go decoder accepts %s (test case is wrong)", c.msg)
		}
		if doc.validate(t, c.id, []byte(c.msg)) == nil {
			t.Errorf("message %s: the schema accepts %s, which the Go decoder refuses", c.id, c.msg)
		}
	}
	// The error codes and stop reasons of the document are those of the code.
	comps := doc.raw["components"].(map[string]any)["schemas"].(map[string]any)
	enum := func(name string) []string {
		var out []string
		for _, v := range comps[name].(map[string]any)["enum"].([]any) {
			out = append(out, v.(string))
		}
		slices.Sort(out)
		return out
	}
	codes := []string{protocol.CodeBadRequest, protocol.CodeUnknownType, protocol.CodeNotJoined, protocol.CodeForbidden,
		protocol.CodeRoomLimit, protocol.CodeRateLimited, protocol.CodeUnavailable, protocol.CodeInternal, protocol.CodeWatchLimit, protocol.CodeTooManyThreads}
	slices.Sort(codes)
	if got := enum("errorCode"); !slices.Equal(got, codes) {
		t.Errorf("errorCode enum %v, want the protocol's codes %v", got, codes)
	}
	reasons := []string{protocol.ReasonStopped, protocol.ReasonExpired, protocol.ReasonDisconnected, protocol.ReasonLeft}
	slices.Sort(reasons)
	if got := enum("stopReason"); !slices.Equal(got, reasons) {
		t.Errorf("stopReason enum %v, want the protocol's reasons %v", got, reasons)
	}
}

// TestAsyncAPIAddresses checks the document's channel addresses against the
// names the code builds (shared/names), for the default prefixes and for
// others.
func TestAsyncAPIAddresses(t *testing.T) {
	doc := loadAsyncAPI(t)
	channels, _ := doc.raw["channels"].(map[string]any)
	address := func(ch string, params map[string]string) string {
		c, ok := channels[ch].(map[string]any)
		if !ok {
			t.Fatalf("docs/asyncapi.yaml has no channel %s", ch)
		}
		a, _ := c["address"].(string)
		for k, v := range params {
			a = strings.ReplaceAll(a, "{"+k+"}", v)
		}
		return a
	}
	// The parameter defaults are the code's defaults.
	params := doc.raw["components"].(map[string]any)["parameters"].(map[string]any)
	if got := params["subjectPrefix"].(map[string]any)["default"]; got != names.DefaultSubjectPrefix {
		t.Errorf("subjectPrefix default %v, want %s", got, names.DefaultSubjectPrefix)
	}
	for _, prefix := range [][2]string{{"", names.DefaultSubjectPrefix}, {"dev:", "acme"}} {
		n := names.New(prefix[0], prefix[1])
		subj := map[string]string{"subjectPrefix": n.SubjectPrefix()}
		for ch, want := range map[string]string{
			"typingCommands": n.CommandSubject(),
			"typingSnapshot": n.SnapshotSubject(),
			"authzJoin":      n.AuthzJoinSubject(),
		} {
			if got := address(ch, subj); got != want {
				t.Errorf("channel %s: address %q, want %q (shared/names)", ch, got, want)
			}
		}
		for _, room := range []string{"42", "room:42", "{x}", "café ☕"} {
			got := address("roomEvents", map[string]string{"keyPrefix": n.KeyPrefix(), "roomTag": names.RoomTag(room)})
			if want := n.RoomChannel(room); got != want {
				t.Errorf("channel roomEvents, room %q: address %q, want %q (shared/names)", room, got, want)
			}
		}
	}
	if got := address("websocket", nil); got != "/v1/ws" {
		t.Errorf("channel websocket: address %q, want /v1/ws", got)
	}
}
