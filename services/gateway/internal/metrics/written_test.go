package metrics

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestTrailingTsMs(t *testing.T) {
	for _, tc := range []struct {
		frame string
		ts    int64
		ok    bool
	}{
		{`{"v":1,"type":"typing_start","room":"42","user":"alice","ttl_ms":5000,"ts_ms":1764480000000}`, 1764480000000, true},
		{`{"v":1,"type":"typing_stop","room":"42","user":"a","reason":"stopped","ts_ms":7}`, 7, true},
		{`{"type":"joined","room":"42","typing":[],"id":"c1"}`, 0, false},
		{`{"type":"pong"}`, 0, false},
		{`{"type":"error","code":"x","message":"\"ts_ms\":12}"}`, 0, false}, // text inside a string
		{`{"ts_ms":}`, 0, false},
		{`"ts_ms":1}`, 1, true},
		{`ts_ms":1}`, 0, false},
		{`{"ts_ms":12345678901234567890}`, 0, false}, // too long for int64
		{``, 0, false},
		{`}`, 0, false},
	} {
		ts, ok := trailingTsMs([]byte(tc.frame))
		if ts != tc.ts || ok != tc.ok {
			t.Errorf("trailingTsMs(%s) = %d, %v; want %d, %v", tc.frame, ts, ok, tc.ts, tc.ok)
		}
	}
}

func TestWrittenObservesRoomEventsOnly(t *testing.T) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Now().Add(-30 * time.Millisecond).UnixMilli()
	m.Written([]byte(`{"v":1,"type":"typing_start","room":"r","user":"u","ttl_ms":5000,"ts_ms":`+strconv.FormatInt(ts, 10)+`}`), time.Now())
	m.Written([]byte(`{"type":"joined","room":"r","typing":[]}`), time.Now())
	m.Written([]byte(`{"v":1,"type":"typing_stop","room":"r","user":"u","reason":"stopped","ts_ms":`+strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)+`}`), time.Now()) // future: skew, skipped
	var out dto.Metric
	if err := m.DeliveryDelay.Write(&out); err != nil {
		t.Fatal(err)
	}
	h := out.GetHistogram()
	if h.GetSampleCount() != 1 {
		t.Fatalf("observations = %d, want 1", h.GetSampleCount())
	}
	if s := h.GetSampleSum(); s < 0.029 || s > 10 {
		t.Fatalf("observed %gs, want about 0.03s", s)
	}
}

func BenchmarkWritten(b *testing.B) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	frame := []byte(`{"v":1,"type":"typing_start","room":"42","user":"alice","name":"Alice","ttl_ms":5000,"ts_ms":` + strconv.FormatInt(time.Now().UnixMilli(), 10) + `}`)
	b.ReportAllocs()
	for b.Loop() {
		m.Written(frame, time.Now())
	}
}
