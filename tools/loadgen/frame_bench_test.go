package loadgen

import (
	"testing"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

var sinkEvent protocol.ServerFrame

// BenchmarkParseFrame is the load generator's cost per room event read: it
// parses every frame of every connection on the CPUs of the stack it
// measures.
func BenchmarkParseFrame(b *testing.B) {
	frames := [][]byte{
		[]byte(`{"v":1,"type":"typing_start","room":"lg1-r17","user":"lg1-u1234","ttl_ms":5000,"ts_ms":1764480000123}`),
		[]byte(`{"v":1,"type":"typing_stop","room":"lg1-r17","user":"lg1-u1234","reason":"stopped","ts_ms":1764480000456}`),
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		ev, ok := parseFrame(frames[i&1])
		if !ok {
			b.Fatal("not parsed")
		}
		sinkEvent = ev
	}
}
