package protocol

import (
	"encoding/json"
	"strconv"
	"testing"
)

// Benchmarks of the codec on the hot path: the gateway decodes every
// client frame (DecodeClientFrame) and encodes one command per typing frame
// (Encode / json.Marshal of a Command); the worker decodes every command
// (DecodeCommand) and builds each event with RoomEventPrefix; the gateway
// decodes every room event once per event, not per receiver
// (DecodeRoomEvent; see services/gateway/internal/hub's fan-out
// benchmarks for why).
//
//	cd shared && go test -run '^$' -bench . -benchmem ./protocol ./names

var (
	benchClientFrame = []byte(`{"type":"typing_start","room":"room-4711"}`)
	benchCommand     = []byte(`{"v":1,"op":"start","room":"room-4711","user":"user-123456","name":"Alice Example","conn":"gw-a1b2c3d4:17","seq":42,"ts_ms":1764480000000}`)
	benchRoomEvent   = []byte(`{"v":1,"type":"typing_start","room":"room-4711","user":"user-123456","name":"Alice Example","ttl_ms":5000,"ts_ms":1764480000000}`)
	benchStopEvent   = []byte(`{"v":1,"type":"typing_stop","room":"room-4711","user":"user-123456","reason":"stopped","ts_ms":1764480000000}`)
)

var sinkErr error

func BenchmarkDecodeClientFrame(b *testing.B) {
	b.SetBytes(int64(len(benchClientFrame)))
	b.ReportAllocs()
	for b.Loop() {
		_, sinkErr = DecodeClientFrame(benchClientFrame)
	}
	if sinkErr != nil {
		b.Fatal(sinkErr)
	}
}

// BenchmarkDecodeClientFrameInvalid is the cost of a garbage frame (the
// error path builds a message).
func BenchmarkDecodeClientFrameInvalid(b *testing.B) {
	bad := []byte(`{"type":"typing_start","room":""}`)
	b.ReportAllocs()
	for b.Loop() {
		_, sinkErr = DecodeClientFrame(bad)
	}
	if sinkErr == nil {
		b.Fatal("accepted")
	}
}

func BenchmarkDecodeCommand(b *testing.B) {
	b.SetBytes(int64(len(benchCommand)))
	b.ReportAllocs()
	for b.Loop() {
		_, sinkErr = DecodeCommand(benchCommand)
	}
	if sinkErr != nil {
		b.Fatal(sinkErr)
	}
}

// BenchmarkDecodeCommandDisconnect: a disconnect of a connection in 100
// rooms (the per-connection room limit).
func BenchmarkDecodeCommandDisconnect(b *testing.B) {
	c := Command{V: Version, Op: OpDisconnect, User: "user-123456", Conn: "gw-a1b2c3d4:17", Seq: 43, TsMs: 1764480000000}
	for i := range 100 {
		c.Rooms = append(c.Rooms, "room-"+strconv.Itoa(i))
	}
	data, err := json.Marshal(c)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		_, sinkErr = DecodeCommand(data)
	}
	if sinkErr != nil {
		b.Fatal(sinkErr)
	}
}

// BenchmarkEncodeCommand is the gateway's publish-side encoding of one
// typing frame's command.
func BenchmarkEncodeCommand(b *testing.B) {
	c := &Command{V: Version, Op: OpStart, Room: "room-4711", User: "user-123456", Name: "Alice Example", Conn: "gw-a1b2c3d4:17", Seq: 42, TsMs: 1764480000000}
	b.ReportAllocs()
	for b.Loop() {
		_, sinkErr = json.Marshal(c)
	}
}

// BenchmarkAppendCommand is the same command with AppendCommand, into a
// reused buffer (the gateway's publish path).
func BenchmarkAppendCommand(b *testing.B) {
	c := &Command{V: Version, Op: OpStart, Room: "room-4711", User: "user-123456", Name: "Alice Example", Conn: "gw-a1b2c3d4:17", Seq: 42, TsMs: 1764480000000}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, sinkErr = AppendCommand(buf[:0], c)
	}
}

func BenchmarkDecodeRoomEvent(b *testing.B) {
	for _, bc := range []struct {
		name string
		data []byte
	}{{"start", benchRoomEvent}, {"stop", benchStopEvent}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.data)))
			b.ReportAllocs()
			for b.Loop() {
				_, sinkErr = DecodeRoomEvent(bc.data)
			}
			if sinkErr != nil {
				b.Fatal(sinkErr)
			}
		})
	}
}

var sinkBytes []byte

func BenchmarkRoomEventPrefix(b *testing.B) {
	ev := RoomEvent{Type: TypeTypingStart, Room: "room-4711", User: "user-123456", Name: "Alice Example", TTLMs: 5000}
	b.ReportAllocs()
	for b.Loop() {
		sinkBytes = RoomEventPrefix(ev)
	}
}

// BenchmarkEncodeJoined is a join answer with a snapshot of three typists.
func BenchmarkEncodeJoined(b *testing.B) {
	j := NewJoined("room-4711", Snapshot{Users: []Typist{{User: "alice", Name: "Alice"}, {User: "bob", Name: "Bob"}, {User: "carol"}}, Total: 3}, "c1")
	b.ReportAllocs()
	for b.Loop() {
		sinkBytes, sinkErr = Encode(j)
	}
}
