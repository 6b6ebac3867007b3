package loadgen

import (
	"reflect"
	"testing"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// logOf builds a send log; times are ms (mono and wall alike).
func logOf(kinds ...any) *typistLog {
	l := &typistLog{}
	for i := 0; i < len(kinds); i += 2 {
		ms := int64(kinds[i+1].(int))
		l.entries = append(l.entries, entry{mono: ms * 1e6, wallMs: ms, kind: kinds[i].(kind)})
	}
	return l
}

func TestMatchStateChanges(t *testing.T) {
	l := logOf(kindStart, 0, kindStop, 500, kindStart, 1000, kindStop, 1500)
	st := &recvState{cursor: -1}
	for i, want := range []struct {
		start bool
		at    int64
	}{{true, 0}, {false, 500}, {true, 1000}, {false, 1500}} {
		m := l.match(st, want.start, 0)
		if !m.ok || m.sentAt != want.at*1e6 || m.refresh {
			t.Fatalf("event %d: %+v, want the send at %d ms", i, m, want.at)
		}
	}
	if m := l.match(st, true, 0); m.ok {
		t.Fatalf("an event with no send left matched %+v", m)
	}
}

func TestMatchSkipsLostEvent(t *testing.T) {
	// The receiver missed the first start and stop: the next start still
	// matches its own send, never an earlier one.
	l := logOf(kindStart, 0, kindStop, 500, kindStart, 1000)
	st := &recvState{cursor: 1}
	if m := l.match(st, true, 0); !m.ok || m.sentAt != 1000*1e6 {
		t.Fatalf("got %+v, want the start at 1000 ms", m)
	}
}

func TestMatchThrottledRefresh(t *testing.T) {
	// start at 0; refreshes at 1000 and 1500 were throttled (no event);
	// the one at 2100 was published (ts_ms 2101). Then a stop.
	l := logOf(kindStart, 0, kindRefresh, 1000, kindRefresh, 1500, kindRefresh, 2100, kindStop, 3000)
	st := &recvState{cursor: -1}
	if m := l.match(st, true, 1); !m.ok || m.sentAt != 0 || m.refresh {
		t.Fatalf("start: %+v", m)
	}
	m := l.match(st, true, 2101)
	if !m.ok || !m.refresh || m.sentAt != 2100*1e6 {
		t.Fatalf("refresh: %+v, want the refresh sent at 2100 ms", m)
	}
	if m := l.match(st, false, 3001); !m.ok || m.sentAt != 3000*1e6 {
		t.Fatalf("stop: %+v", m)
	}
}

func TestMatchRefreshWithoutTs(t *testing.T) {
	l := logOf(kindStart, 0, kindRefresh, 4000, kindRefresh, 8000)
	st := &recvState{cursor: -1}
	l.match(st, true, 0)
	if m := l.match(st, true, 0); !m.ok || m.sentAt != 4000*1e6 {
		t.Fatalf("%+v, want the first refresh", m)
	}
	if m := l.match(st, true, 0); !m.ok || m.sentAt != 8000*1e6 {
		t.Fatalf("%+v, want the second refresh", m)
	}
}

func TestMatchRefreshStaysInItsBurst(t *testing.T) {
	// A refresh event never matches a refresh of a later burst.
	l := logOf(kindStart, 0, kindStop, 100, kindStart, 200, kindRefresh, 4200)
	st := &recvState{cursor: -1}
	l.match(st, true, 0)
	if m := l.match(st, true, 50); m.ok {
		t.Fatalf("matched %+v across a stop", m)
	}
}

func TestMatchStartAfterExpiry(t *testing.T) {
	// The entry expired (the receiver saw typing_stop expired and hides the
	// user); the sender's next refresh is published as a start.
	l := logOf(kindStart, 0, kindRefresh, 4000)
	st := &recvState{cursor: -1}
	l.match(st, true, 0)
	st.shown = false // typing_stop expired
	if m := l.match(st, true, 4001); !m.ok || m.refresh || m.kind != kindRefresh || m.sentAt != 4000*1e6 {
		t.Fatalf("%+v, want the refresh at 4000 ms as a state change", m)
	}
}

func TestParseFrame(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want protocol.ServerFrame
	}{
		{`{"v":1,"type":"typing_start","room":"r1","user":"u2","name":"U","ttl_ms":5000,"ts_ms":1764480000123}`,
			protocol.ServerFrame{Type: "typing_start", Room: "r1", User: "u2", TsMs: 1764480000123}},
		{`{"v":1,"type":"typing_stop","room":"r1","user":"u2","reason":"expired","ts_ms":5}`,
			protocol.ServerFrame{Type: "typing_stop", Room: "r1", User: "u2", Reason: "expired", TsMs: 5}},
		{`{"v":1,"type":"typing_start","room":"a\"b","user":"u","ts_ms":5}`, // escapes: encoding/json
			protocol.ServerFrame{V: 1, Type: "typing_start", Room: `a"b`, User: "u", TsMs: 5}},
		{`{"type":"joined","room":"r","typing":[{"user":"x"}],"id":"j"}`, protocol.ServerFrame{Type: "joined", Room: "r", ID: "j", Typing: []protocol.Typist{{User: "x"}}}},
		{`{"type":"error","code":"rate_limited","message":"m","room":"r"}`, protocol.ServerFrame{Type: "error", Code: "rate_limited", Message: "m", Room: "r"}},
	} {
		got, ok := parseFrame([]byte(tc.in))
		if !ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseFrame(%s) = %+v, %v; want %+v", tc.in, got, ok, tc.want)
		}
	}
	if _, ok := parseFrame([]byte(`not json`)); ok {
		t.Error("parseFrame accepted garbage")
	}
}
