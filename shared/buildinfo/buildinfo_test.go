package buildinfo

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestGetDefaultsToDev(t *testing.T) {
	in := Get()
	if in.Version != "dev" || !strings.HasPrefix(in.GoVersion, "go") {
		t.Fatalf("%+v", in)
	}
	if s := in.String(); !strings.HasPrefix(s, "dev (revision ") || !strings.HasSuffix(s, in.GoVersion+")") {
		t.Fatalf("String() = %q", s)
	}
}

func TestStringShortensRevision(t *testing.T) {
	in := Info{Version: "v1.2.3", Revision: "0123456789abcdef0123", Modified: true, GoVersion: "go1.26.8"}
	if got, want := in.String(), "v1.2.3 (revision 0123456789ab, modified, go1.26.8)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestHandleFlag(t *testing.T) {
	var b bytes.Buffer
	for _, args := range [][]string{nil, {"-log-level", "debug"}, {"-version", "x"}} {
		if HandleFlag("gateway", args, &b) || b.Len() != 0 {
			t.Fatalf("%q taken as a version request", args)
		}
	}
	for _, f := range []string{"-version", "--version"} {
		b.Reset()
		if !HandleFlag("gateway", []string{f}, &b) || !strings.HasPrefix(b.String(), "gateway dev (revision ") {
			t.Fatalf("%s: %q", f, b.String())
		}
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector("gateway"))
	if n, err := testutil.GatherAndCount(reg, "ellipsis_build_info"); err != nil || n != 1 {
		t.Fatalf("count %d, %v", n, err)
	}
	mfs, _ := reg.Gather()
	labels := map[string]string{}
	for _, l := range mfs[0].GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["service"] != "gateway" || labels["version"] != "dev" || labels["goversion"] == "" {
		t.Fatalf("labels %v", labels)
	}
	if v := mfs[0].GetMetric()[0].GetGauge().GetValue(); v != 1 {
		t.Fatalf("value %v", v)
	}
}

// A revision stamped by the linker (-X ...buildinfo.revision) is reported
// by Get, -version and the metric's revision label.
func TestStampedRevision(t *testing.T) {
	defer func(v, r string) { version, revision = v, r }(version, revision)
	version, revision = "v0.1.0", "a5e364d0123456789abcdef0123456789abcdef0"
	in := Get()
	if in.Version != "v0.1.0" || in.Revision != revision {
		t.Fatalf("%+v", in)
	}
	var b bytes.Buffer
	if !HandleFlag("presence-worker", []string{"-version"}, &b) || !strings.HasPrefix(b.String(), "presence-worker v0.1.0 (revision a5e364d01234, ") {
		t.Fatalf("-version: %q", b.String())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector("presence-worker"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, l := range mfs[0].GetMetric()[0].GetLabel() {
		if l.GetName() == "revision" {
			got = l.GetValue()
		}
	}
	if got != revision {
		t.Fatalf("revision label %q, want %q", got, revision)
	}
}
