package worker

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Labels taken from NATS payloads stay in fixed sets,
// whatever a publisher sends.
func TestLabelsAreBounded(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{protocol.OpStart, protocol.OpStop, protocol.OpLeave, protocol.OpDisconnect, "unknown"} {
		if got := opLabel(op); got != op {
			t.Errorf("opLabel(%q) = %q", op, got)
		}
	}
	for _, f := range []string{"json", "v", "op", "room", "rooms", "user", "name", "conn", "seq", "ts_ms"} {
		if got := fieldLabel(f); got != f {
			t.Errorf("fieldLabel(%q) = %q", f, got)
		}
	}
	if got := fieldLabel("rooms[17]"); got != "rooms" {
		t.Errorf("fieldLabel(rooms[17]) = %q", got)
	}
	for _, o := range []string{"ok", protocol.CodeBadRequest, protocol.CodeUnavailable, protocol.CodeInternal} {
		if got := snapshotLabel(o); got != o {
			t.Errorf("snapshotLabel(%q) = %q", o, got)
		}
	}
	for i := range 1000 {
		s := "x" + strconv.Itoa(i)
		m.commands.WithLabelValues(opLabel(s), store.OutcomeInvalid.String()).Inc()
		m.invalidPayloads.WithLabelValues(fieldLabel(s)).Inc()
		m.invalidPayloads.WithLabelValues(fieldLabel(s + "[1]")).Inc()
		m.snapshots.WithLabelValues(snapshotLabel(s)).Inc()
	}
	for name, vec := range map[string]*prometheus.CounterVec{"commands": m.commands, "invalid_payloads": m.invalidPayloads, "snapshots": m.snapshots} {
		ch := make(chan prometheus.Metric, 2000)
		vec.Collect(ch)
		close(ch)
		if n := len(ch); n != 1 {
			t.Errorf("%s: %d series after 1000 hostile values, want 1 (other)", name, n)
		}
	}
}

// The NATS error kinds and the snapshot cut reasons are exported as zero
// before the first one, so alerts on increase() see it and the dashboard
// finds the series (docs/metrics.md; deploy/monitoring).
func TestLabelledCountersExportedAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg, false); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"ellipsis_worker_nats_errors_total":   {"slow_consumer", "disconnect", "async", "reply"},
		"ellipsis_worker_snapshots_cut_total": {"max", "payload"},
	}
	got := map[string]map[string]bool{}
	for _, mf := range mfs {
		if want[mf.GetName()] == nil {
			continue
		}
		got[mf.GetName()] = map[string]bool{}
		for _, m := range mf.GetMetric() {
			if m.GetCounter().GetValue() == 0 && len(m.GetLabel()) == 1 {
				got[mf.GetName()][m.GetLabel()[0].GetValue()] = true
			}
		}
	}
	for name, values := range want {
		for _, v := range values {
			if !got[name][v] {
				t.Errorf("%s{%q} is not exported at 0 (got %v)", name, v, got[name])
			}
		}
	}
}

// nats_connected follows the watched connection: 0 before one is watched.
func TestNATSConnectedGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, false)
	if err != nil {
		t.Fatal(err)
	}
	value := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "ellipsis_worker_nats_connected" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no ellipsis_worker_nats_connected")
		return -1
	}
	if v := value(); v != 0 {
		t.Fatalf("before watchNATS: %v, want 0", v)
	}
	up := true
	m.watchNATS(func() bool { return up })
	if v := value(); v != 1 {
		t.Fatalf("connected: %v, want 1", v)
	}
	up = false
	if v := value(); v != 0 {
		t.Fatalf("disconnected: %v, want 0", v)
	}
}

// Two workers on one registry share its collectors: their counts add up
// in one series, and the first worker's nats_connected gauge stays.
func TestMetricsOnASharedRegistryAddUp(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := newMetrics(reg, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newMetrics(reg, false)
	if err != nil {
		t.Fatal(err)
	}
	a.nats.Error(natsReplyError)
	b.nats.Error(natsReplyError)
	a.command(protocol.OpStart, store.Outcomes()[0])
	b.command(protocol.OpStart, store.Outcomes()[0])
	a.watchNATS(func() bool { return true })
	b.watchNATS(func() bool { return false })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{"ellipsis_worker_nats_errors_total": 2, "ellipsis_worker_commands_total": 2, "ellipsis_worker_nats_connected": 1} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}
