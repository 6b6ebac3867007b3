package metrics

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Whatever a client sends, the labelled metrics keep a
// fixed set of series.
func TestLabelsAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	recordOwnThenHostileLabels(m)

	want := map[string]map[string]bool{
		"ellipsis_gateway_frames_in_total":               set("join", "leave", "typing_start", "typing_stop", "sync", "ping", "watch", "unwatch", "invalid", "binary", "other"),
		"ellipsis_gateway_frames_out_total":              set("joined", "left", "typing_start", "typing_stop", "typing", "pong", "error", "watching", "unwatched", "summary", "other"),
		"ellipsis_gateway_errors_total":                  set("bad_request", "unknown_type", "not_joined", "forbidden", "room_limit", "rate_limited", "unavailable", "internal", "watch_limit", "too_many_threads", "other"),
		"ellipsis_gateway_watch_refusals_total":          set("bad_request", "forbidden", "watch_limit", "rate_limited", "unavailable", "other"),
		"ellipsis_gateway_commands_published_total":      set("start", "stop", "leave", "disconnect", "other"),
		"ellipsis_gateway_snapshots_total":               set("requested", "shared", "rate_limited", "other"),
		"ellipsis_gateway_redis_subscribe_refused_total": set("room", "probe"),
		"ellipsis_gateway_closes_total":                  set("1000", "1001", "1002", "1003", "1005", "1006", "1007", "1008", "1009", "1010", "1011", "1012", "1013", "1014", "1015", "other"),
	}
	checkLabelSeries(t, reg, want)
	if got := CloseLabel(1004); got != LabelOther {
		t.Errorf("CloseLabel(1004) = %q, want other (reserved)", got)
	}
}

// recordOwnThenHostileLabels records every label value the gateway uses
// itself on m, then 10000 distinct values of a hostile peer for each.
func recordOwnThenHostileLabels(m *Metrics) {
	// Every value the gateway uses itself keeps its own label.
	for _, v := range []string{"join", "leave", "typing_start", "typing_stop", "sync", "ping", "watch", "unwatch", FrameInvalid, FrameBinary} {
		m.FrameIn(v)
	}
	for _, v := range []string{"joined", "left", "typing_start", "typing_stop", "typing", "pong", "error", "watching", "unwatched", "summary"} {
		m.FrameOut(v, 1)
	}
	for _, v := range []string{"bad_request", "unknown_type", "not_joined", "forbidden", "room_limit", "rate_limited", "unavailable", "internal", "watch_limit", "too_many_threads"} {
		m.Error(v)
	}
	for _, v := range []string{"bad_request", "forbidden", "watch_limit", "rate_limited", "unavailable"} {
		m.WatchRefused(v)
	}
	for _, v := range []string{"start", "stop", "leave", "disconnect"} {
		m.Command(v)
	}
	for c := 1000; c <= 1015; c++ {
		m.Close(c)
	}
	for _, v := range []string{SnapshotRequested, SnapshotShared, SnapshotRateLimited} {
		m.Snapshot(v)
	}
	// Then a hostile peer: 10000 distinct values for each.
	for i := range 10000 {
		s := "x" + strconv.Itoa(i)
		m.FrameIn(s)
		m.FrameOut(s, 1)
		m.Error(s)
		m.Command(s)
		m.Snapshot(s)
		m.WatchRefused(s)
		m.Close(3000 + i%2000)
		m.Close(-i)
		m.Close(1016 + i)
	}
}

// checkLabelSeries checks that every labelled metric of reg has one label,
// is in want, and has exactly want's series.
func checkLabelSeries(t *testing.T, reg *prometheus.Registry, want map[string]map[string]bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[string]bool{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			if len(mt.GetLabel()) == 0 {
				continue
			}
			if len(mt.GetLabel()) != 1 {
				t.Errorf("%s: %d labels, want 1", f.GetName(), len(mt.GetLabel()))
				continue
			}
			allowed, ok := want[f.GetName()]
			if !ok {
				t.Errorf("%s: a labelled metric the test does not know; add its fixed label set here", f.GetName())
				continue
			}
			v := mt.GetLabel()[0].GetValue()
			if !allowed[v] {
				t.Errorf("%s: label value %q outside its fixed set", f.GetName(), v)
			}
			if seen[f.GetName()] == nil {
				seen[f.GetName()] = map[string]bool{}
			}
			seen[f.GetName()][v] = true
		}
	}
	for name, allowed := range want {
		if len(seen[name]) != len(allowed) {
			t.Errorf("%s: series %v, want exactly %v", name, seen[name], allowed)
		}
	}
}

// The security and NATS metrics take only the gateway's own constants.
func TestSecurityAndNATSLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := NewSecurity(reg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNATS(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{RejectShutdown, RejectOrigin, RejectUnauthorized, RejectBadIdentity, RejectMaxConns, RejectMaxConnsPerUser} {
		s.HandshakeRejected(r)
	}
	for _, r := range []string{AuthzAllow, AuthzDeny, AuthzNoAnswer, AuthzBadReply, AuthzError} {
		s.Authz(r)
	}
	n.Error(NATSAsync)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range families {
		total += len(f.GetMetric())
	}
	// 6 reasons, 5 results, 3 NATS kinds (exported at zero), and the
	// unlabelled jwks_refresh_failures_total and nats_connected.
	if total != 6+5+3+2 {
		t.Fatalf("%d series, want 16", total)
	}
}

func set(vs ...string) map[string]bool {
	m := map[string]bool{}
	for _, v := range vs {
		m[v] = true
	}
	return m
}

// Every error code is exported at zero before the first error frame, so
// the alert on code="unavailable" (deploy/monitoring) sees the first one.
func TestErrorCodesExportedAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		if f.GetName() != "ellipsis_gateway_errors_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			if mt.GetCounter().GetValue() == 0 {
				got[mt.GetLabel()[0].GetValue()] = true
			}
		}
	}
	for code := range errorCodes {
		if !got[code] {
			t.Errorf("errors_total{code=%q} not exported at 0", code)
		}
	}
	if len(got) != len(errorCodes) {
		t.Errorf("errors_total exported at 0: %v, want the %d codes", got, len(errorCodes))
	}
}

// nats_connected follows the watched connection: 0 before one is watched.
func TestNATSConnectedGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	n, err := NewNATS(reg)
	if err != nil {
		t.Fatal(err)
	}
	value := func() float64 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "ellipsis_gateway_nats_connected" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no ellipsis_gateway_nats_connected")
		return -1
	}
	if v := value(); v != 0 {
		t.Fatalf("before WatchConnection: %v, want 0", v)
	}
	up := true
	n.WatchConnection(func() bool { return up })
	if v := value(); v != 1 {
		t.Fatalf("connected: %v, want 1", v)
	}
	up = false
	if v := value(); v != 0 {
		t.Fatalf("disconnected: %v, want 0", v)
	}
}

// Every handshake refusal and authorisation series exists at zero before
// the first one, so increase() in the alerts sees the first.
func TestSecuritySeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewSecurity(reg); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"ellipsis_gateway_handshakes_rejected_total": 6, "ellipsis_gateway_authz_total": 5}
	for _, f := range families {
		n, ok := want[f.GetName()]
		if !ok {
			continue
		}
		if len(f.GetMetric()) != n {
			t.Errorf("%s: %d series at start, want %d", f.GetName(), len(f.GetMetric()), n)
		}
		for _, m := range f.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("%s%v = %v at start", f.GetName(), m.GetLabel(), v)
			}
		}
		delete(want, f.GetName())
	}
	if len(want) != 0 {
		t.Errorf("not exported at start: %v", want)
	}
}
