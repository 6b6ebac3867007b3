package names

import "testing"

// Benchmarks of enc() and the names on the hot path: the worker builds a
// room's keys per command, the gateway maps every Pub/Sub channel back to
// its room per event (RoomFromChannel).
//
//	cd shared && go test -run '^$' -bench . -benchmem ./names

var sinkString string

func BenchmarkEnc(b *testing.B) {
	for _, bc := range []struct{ name, in string }{
		{"plain", "room-4711"},               // nothing to escape: returned as is, no allocation
		{"escaped", "!abc:matrix.org"},       // one ':'
		{"glob", "a*b?c[d]"},                 // glob characters
		{"unicode", "café ☕ team"},           // UTF-8 kept, spaces escaped
		{"long_plain", string(make256('r'))}, // 256 bytes, the id limit
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.in)))
			b.ReportAllocs()
			for b.Loop() {
				sinkString = Enc(bc.in)
			}
		})
	}
}

func make256(c byte) []byte {
	out := make([]byte, 256)
	for i := range out {
		out[i] = c
	}
	return out
}

func BenchmarkDec(b *testing.B) {
	in := Enc("!abc:matrix.org")
	b.ReportAllocs()
	for b.Loop() {
		sinkString, _ = Dec(in)
	}
}

func BenchmarkRoomChannel(b *testing.B) {
	n := New("prod:", "ellipsis")
	b.ReportAllocs()
	for b.Loop() {
		sinkString = n.RoomChannel("room-4711")
	}
}

func BenchmarkRoomFromChannel(b *testing.B) {
	n := New("prod:", "ellipsis")
	ch := n.RoomChannel("room-4711")
	b.ReportAllocs()
	for b.Loop() {
		sinkString, _ = n.RoomFromChannel(ch)
	}
}

// BenchmarkRoomKeys is the set of names one start command touches in the
// store: user key, users key, pending key, the four tombstone keys, channel.
func BenchmarkRoomKeys(b *testing.B) {
	n := New("prod:", "ellipsis")
	b.ReportAllocs()
	for b.Loop() {
		sinkString = n.UserKey("room-4711", "user-123456")
		sinkString = n.UsersKey("room-4711")
		sinkString = n.PendingKey("room-4711")
		sinkString = n.GoneKey("room-4711")
		sinkString = n.GoneSeqKey("room-4711")
		sinkString = n.GoneTypedKey("room-4711")
		sinkString = n.GoneTypedSeqKey("room-4711")
		sinkString = n.RoomChannel("room-4711")
	}
}
