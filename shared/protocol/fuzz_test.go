package protocol

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeClientFrame: the decoder never panics, and whatever it accepts is
// a valid frame that survives an encode/decode round trip.
func FuzzDecodeClientFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"join","room":"42","id":"c1"}`, `{"type":"typing_start","room":"café ☕"}`,
		`{"type":"ping"}`, `{"type":"x"}`, `{`, `[]`, `null`, `{"type":"join","room":"\u0000"}`,
		`{"type":"sync","room":"a*b?c[d]","id":"\ud800"}`,
		`{"type":"watch","rooms":["42","43"],"id":"w1"}`, `{"type":"watch","rooms":[]}`,
		`{"type":"watch","rooms":"42"}`, `{"type":"watch","rooms":[42]}`, `{"type":"unwatch"}`,
		`{"type":"unwatch","rooms":["42",""],"room":"x"}`, `{"type":"join","room":"1","rooms":["2"]}`,
		`{"type":"join","room":"1","typing":false}`, `{"type":"join","room":"1","typing":"no"}`,
		`{"type":"sync","room":"1","typing":0}`, `{"type":"join","room":"1","typing":null}`,
		`{"type":"typing_start","room":"42","thread":"t-9","activity":"thinking"}`,
		`{"type":"typing_stop","room":"42","thread":"t-9","activity":"x"}`, `{"type":"typing_start","room":"42","thread":""}`,
		`{"type":"typing_start","room":"42","activity":"Typing"}`, `{"type":"typing_start","room":"42","thread":7}`,
		`{"type":"join","room":"42","thread":"t","activity":""}`, `{"type":"typing_start","room":"42","thread":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := DecodeClientFrame(data)
		if err != nil {
			if _, ok := err.(*FrameError); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		switch fr.Type {
		case TypePing:
			if fr.Room != "" {
				t.Fatalf("ping kept a room: %+v", fr)
			}
		case TypeJoin, TypeLeave, TypeTypingStart, TypeTypingStop, TypeSync:
			if err := ValidateID("room", fr.Room); err != nil {
				t.Fatalf("accepted invalid room %q", fr.Room)
			}
			if fr.Thread != "" && (ValidateID("thread", fr.Thread) != nil || fr.Type != TypeTypingStart && fr.Type != TypeTypingStop) {
				t.Fatalf("accepted thread %q on %s", fr.Thread, fr.Type)
			}
			if fr.Activity != "" && (ValidateActivity("activity", fr.Activity) != nil || fr.Type != TypeTypingStart) {
				t.Fatalf("accepted activity %q on %s", fr.Activity, fr.Type)
			}
			if fr.Rooms != nil {
				t.Fatalf("%s kept rooms: %+v", fr.Type, fr)
			}
			if fr.Typing != nil && fr.Type != TypeJoin {
				t.Fatalf("%s kept typing: %+v", fr.Type, fr)
			}
		case TypeWatch, TypeUnwatch:
			if fr.Room != "" {
				t.Fatalf("%s kept a room: %+v", fr.Type, fr)
			}
			if fr.Rooms != nil && len(fr.Rooms) == 0 || fr.Type == TypeWatch && len(fr.Rooms) == 0 {
				t.Fatalf("%s accepted with no rooms: %+v", fr.Type, fr)
			}
		default:
			t.Fatalf("accepted unknown type %q", fr.Type)
		}
		if err := ValidateRequestID(fr.ID); err != nil {
			t.Fatalf("accepted invalid id %q", fr.ID)
		}
		b, _ := json.Marshal(fr)
		again, err := DecodeClientFrame(b)
		if err != nil || !reflect.DeepEqual(again, fr) {
			t.Fatalf("round trip: %+v -> %s -> %+v, %v", fr, b, again, err)
		}
	})
}

// FuzzDecodeCommand: the decoder never panics, and an accepted command is
// valid and round-trips.
func FuzzDecodeCommand(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"op":"start","room":"42","user":"alice","name":"Alice","conn":"gw-a1b2:17","seq":42,"ts_ms":1764480000000}`,
		`{"v":1,"op":"stop","room":"42","user":"alice"}`,
		`{"v":1,"op":"disconnect","rooms":["42","{x}"],"user":"alice","conn":"gw:1","seq":9}`,
		`{"v":2}`, `garbage`, `{"v":1,"op":"disconnect","rooms":[""]}`,
		`{"v":1,"op":"start","room":"42","thread":"t:1","user":"bot","activity":"thinking","conn":"bot-7:1","ttl_ms":60000}`,
		`{"v":1,"op":"stop","room":"42","thread":"t1","user":"alice"}`,
		`{"v":1,"op":"leave","room":"42","thread":"t1","user":"alice","conn":"c"}`,
		`{"v":1,"op":"start","room":"42","user":"a","conn":"c","activity":"Typing"}`,
		`{"v":1,"op":"start","room":"42","user":"a","conn":"c","ttl_ms":-1}`,
		`{"v":1,"op":"stop","room":"42","user":"a","ttl_ms":5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCommand(data)
		if err != nil {
			if _, ok := err.(*FieldError); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted invalid command: %v", err)
		}
		b, _ := json.Marshal(c)
		again, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("round trip failed: %s: %v", b, err)
		}
		if len(c.Rooms) == 0 {
			c.Rooms = nil // "rooms":[] and no rooms are the same command
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip changed the command: %+v -> %s -> %+v", c, b, again)
		}
	})
}

// FuzzDecodeRoomEvent: the gateway's Pub/Sub decoder never panics.
func FuzzDecodeRoomEvent(f *testing.F) {
	f.Add([]byte(`{"v":1,"type":"typing_start","room":"42","user":"alice","name":"Alice","ttl_ms":5000,"ts_ms":1}`))
	f.Add([]byte(`{"v":1,"type":"typing_stop","room":"42","user":"alice","reason":"expired","ts_ms":1}`))
	f.Add([]byte(`{"v":1,"type":"typing_start","room":"42","user":"bot","thread":"t1","activity":"thinking","ttl_ms":60000,"ts_ms":1}`))
	f.Add([]byte(`{"v":1,"type":"typing_stop","room":"42","user":"a","thread":"","reason":"stopped","ts_ms":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := DecodeRoomEvent(data)
		if err == nil && ev.Thread != "" && ValidateID("thread", ev.Thread) != nil {
			t.Fatalf("accepted invalid thread %+v", ev)
		}
		if err == nil && (ValidateID("room", ev.Room) != nil || ValidateID("user", ev.User) != nil) {
			t.Fatalf("accepted invalid event %+v", ev)
		}
	})
}

// The fast path of DecodeClientFrame (scanClientFrame) agrees with
// encoding/json on every frame it accepts.
func FuzzClientFrameScan(f *testing.F) {
	for _, s := range []string{
		`{"type":"join","room":"42","id":"c1"}`, ` { "type" : "typing_stop" , "room":"r" } `,
		`{"type":"ping"}`, `{}`, `{"type":"a","type":"b"}`, `{"Type":"join"}`, `{"type":"join","x":1}`,
		`{"type":"join"}x`, `{"type":"join",}`, `{"room":"a\"b"}`, `{"room":"é"}`,
		`{"type":"typing_start","room":"r","thread":"t","activity":"thinking"}`, `{"thread":""}`,
		`{"thread":"a","thread":"b","activity":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := scanClientFrame(data)
		if !ok {
			return
		}
		want, err := decodeClientFrameJSON(data)
		if err != nil {
			t.Fatalf("scan accepted %q, encoding/json refuses it: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scan of %q = %+v, encoding/json = %+v", data, got, want)
		}
	})
}

// AppendCommand writes what json.Marshal writes.
func FuzzAppendCommand(f *testing.F) {
	f.Add(1, "start", "room-1", "", "u1", "Alice", "gw:1", uint64(3), int64(1764480000000), "", "", int64(0))
	f.Add(1, "disconnect", "", "a,b", "u1", "", "gw:1", uint64(0), int64(0), "", "", int64(0))
	f.Add(0, "x<y", "é", "", "\"", "&", "\x00", uint64(1), int64(-1), "t<", "a&", int64(-5))
	f.Add(1, "start", "r", "", "bot", "", "bot-7:1", uint64(0), int64(0), "t1", "thinking", int64(60000))
	f.Fuzz(func(t *testing.T, v int, op, room, rooms, user, name, conn string, seq uint64, ts int64, thread, activity string, ttl int64) {
		c := &Command{V: v, Op: op, Room: room, User: user, Name: name, Conn: conn, Seq: seq, TsMs: ts, Thread: thread, Activity: activity, TTLMs: ttl}
		if rooms != "" {
			c.Rooms = strings.Split(rooms, ",")
		}
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendCommand([]byte("x"), c)
		if err != nil || string(got) != "x"+string(want) {
			t.Fatalf("AppendCommand = %q, %v; json.Marshal = %q", got, err, want)
		}
	})
}

// The fast path of DecodeCommand (scanCommand) agrees with encoding/json
// on every payload it accepts.
func FuzzCommandScan(f *testing.F) {
	for _, s := range []string{
		string(benchCommand), `{"v":1,"op":"disconnect","user":"u","conn":"gw:1","seq":9,"rooms":["a","b"],"ts_ms":5}`,
		`{"v":01}`, `{"v":1.0}`, `{"seq":-1}`, `{"rooms":[]}`, `{"rooms":["a",]}`, `{"rooms":["a"],"rooms":["b","c"]}`,
		`{"v":999999999999999999}`, `{"op":"start","op":"stop"}`, `{}`, ` { "v" : 1 } `, `{"v":1e3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := scanCommand(data)
		if !ok {
			return
		}
		var want Command
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("scan accepted %q, encoding/json refuses it: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scan of %q = %+v, encoding/json = %+v", data, got, want)
		}
	})
}

// The fast path of DecodeRoomEvent (scanRoomEvent) agrees with
// encoding/json on every payload it accepts.
func FuzzRoomEventScan(f *testing.F) {
	for _, s := range []string{
		string(benchRoomEvent), string(benchStopEvent), `{}`, `{"v":1,"v":2}`, `{"ts_ms":-1}`, `{"ttl_ms":1.5}`,
		`{"type":"typing_start","reason":"x"}`, `{"name":"a\u00e9"}`, `{"v":1}  `, `{"v":1,}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := scanRoomEvent(data)
		if !ok {
			return
		}
		var want RoomEvent
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("scan accepted %q, encoding/json refuses it: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scan of %q = %+v, encoding/json = %+v", data, got, want)
		}
	})
}

// FuzzDecodeSnapshotReply: the snapshot reply decoder (threads, entries'
// activities and ttl_ms) never panics, keeps every total at least its
// list, accepts no negative ttl_ms, and what
// it accepts encodes and decodes to the same reply.
func FuzzDecodeSnapshotReply(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"room":"42","users":[{"user":"alice","name":"Alice"}],"total":1}`,
		`{"v":1,"room":"42","users":[{"user":"bot","activity":"thinking"}],"total":3,"threads":[{"thread":"t1","users":[{"user":"a","activity":"typing"}],"total":2}]}`,
		`{"v":1,"room":"42","users":[],"threads":[{"thread":"t1","users":[{"user":"a"}]}]}`,
		`{"v":1,"room":"42","users":[],"total":0,"threads":[{"thread":"t","users":[],"total":-1}]}`,
		`{"v":1,"room":"42","users":[{"user":"bot","activity":"thinking","ttl_ms":30000}],"total":1,"threads":[{"thread":"t","users":[{"user":"bot","ttl_ms":60000}],"total":1}]}`,
		`{"v":1,"room":"42","users":[{"user":"bot","ttl_ms":-5}],"total":1}`,
		`{"v":1,"room":"42","users":[],"total":0,"threads":[{"thread":"t","users":[{"user":"a","ttl_ms":-1}],"total":1}]}`,
		`{"v":1,"error":{"code":"unavailable","message":"retry"}}`, `{"v":1,"threads":{}}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeSnapshotReply(data)
		if err != nil || r.Error != nil {
			return
		}
		if r.Total < len(r.Users) {
			t.Fatalf("total %d below %d users", r.Total, len(r.Users))
		}
		for _, u := range r.Users {
			if u.TTLMs < 0 {
				t.Fatalf("negative ttl_ms %d of %q accepted", u.TTLMs, u.User)
			}
		}
		for _, th := range r.Threads {
			if th.Total < len(th.Users) {
				t.Fatalf("thread %q: total %d below %d users", th.Thread, th.Total, len(th.Users))
			}
			for _, u := range th.Users {
				if u.TTLMs < 0 {
					t.Fatalf("thread %q: negative ttl_ms %d of %q accepted", th.Thread, u.TTLMs, u.User)
				}
			}
			for u, a := range th.Activities {
				if a == "" || a == ActivityTyping {
					t.Fatalf("thread %q: activity %q of %q kept", th.Thread, a, u)
				}
			}
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeSnapshotReply(b)
		if err != nil {
			t.Fatalf("round trip failed: %s: %v", b, err)
		}
		if r.Users == nil {
			r.Users = []Typist{} // "users" is always written
		}
		for i := range r.Threads {
			if r.Threads[i].Users == nil {
				r.Threads[i].Users = []Typist{}
			}
		}
		if !reflect.DeepEqual(again, r) {
			t.Fatalf("round trip changed the reply: %+v -> %s -> %+v", r, b, again)
		}
	})
}

// FuzzDecodeUserIDs: the hide list decoder never panics; what it accepts
// is a list of at most MaxHideTypingFrom valid user ids that round-trips,
// and what it refuses is a *FieldError naming the field.
func FuzzDecodeUserIDs(f *testing.F) {
	for _, s := range []string{
		`["bob","carol"]`, `[]`, `null`, ``, `"bob"`, `[1]`, `["a",null]`, `[""]`, `["\u0000"]`,
		`{"a":1}`, `[["x"]]`, ` [ "x" ] `, `["` + strings.Repeat("x", 257) + `"]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ids, err := DecodeUserIDs("hide_typing_from", raw)
		if err != nil {
			fe, ok := err.(*FieldError)
			if !ok || !strings.HasPrefix(fe.Field, "hide_typing_from") {
				t.Fatalf("error %T %v does not name the field", err, err)
			}
			return
		}
		if err := ValidateUserIDs("hide_typing_from", ids); err != nil {
			t.Fatalf("accepted %q: %v", ids, err)
		}
		if ids == nil {
			return
		}
		b, _ := json.Marshal(ids)
		again, err := DecodeUserIDs("hide_typing_from", b)
		if err != nil || !reflect.DeepEqual(again, ids) {
			t.Fatalf("round trip: %q -> %s -> %q, %v", ids, b, again, err)
		}
	})
}
