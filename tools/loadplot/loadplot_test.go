package loadplot

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ellipsis-chat/ellipsis/tools/loadgen"
)

// writeSample writes load generator summaries as ellipsis-loadgen -json
// does (the real Result type, marshalled), one per rate, into dir.
func writeSample(t *testing.T, dir, prefix string, rates ...float64) {
	t.Helper()
	for i, rate := range rates {
		var r loadgen.Result
		r.System, r.Mode = loadgen.SystemEllipsis, loadgen.ModeRate
		r.Rate = rate
		r.Conns, r.Connected, r.Rooms = 1000*(i+1), int64(1000*(i+1)), 100
		r.Delivered.ExpectedState = 1000
		if i == 1 {
			r.Delivered.LostState = 125 // the second run of each set lost 12.5 %
		}
		r.Machine.CPUs, r.Machine.LoadBefore = 2, fmt.Sprintf("%d.50 1.00 1.00", i+1)
		r.Latency = loadgen.Latency{Count: 1000, P50: 0.5 * float64(i+1), P90: 1, P99: 2 * float64(i+1), P999: 8 * float64(i+1), Max: 50}
		b, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(dir, fmt.Sprintf("%s-%d.json", prefix, i))
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// svgDoc checks that b is a well-formed XML document whose root is <svg>
// and returns its character data (the plot's texts).
func svgDoc(t *testing.T, b []byte) string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	var root string
	var text strings.Builder
	paths := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = v.Name.Local
			}
			if v.Name.Local == "path" {
				paths++
			}
		case xml.CharData:
			text.Write(v)
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	if paths == 0 {
		t.Fatal("no <path> in the SVG: nothing drawn")
	}
	return text.String()
}

func TestDrawStandardFromSampleJSON(t *testing.T) {
	data, out := t.TempDir(), t.TempDir()
	writeSample(t, data, "rate", 2000, 500, 1000) // out of order: Points sorts
	writeSample(t, data, "conns", 250, 500)
	if err := Draw(Standard(data, out)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"latency-vs-rate.svg", "latency-vs-connections.svg"} {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		text := svgDoc(t, b)
		for _, want := range []string{"p50", "p99", "p99.9", "latency (ms", "12.5% lost"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: no text %q in the SVG", name, want)
			}
		}
	}
	runs, err := Read(filepath.Join(data, "rate-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Machine(runs), "load average 1.5–3.5"; !strings.Contains(got, want) {
		t.Errorf("Machine = %q, want it to contain %q", got, want)
	}
	left, _ := filepath.Glob(filepath.Join(out, ".loadplot-*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestPointsSortedByX(t *testing.T) {
	data := t.TempDir()
	writeSample(t, data, "rate", 3000, 1000, 2000)
	runs, err := Read(filepath.Join(data, "rate-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	pts := Points(runs, OfferedRate)
	if len(pts) != 3 || pts[0].X != 1000 || pts[1].X != 2000 || pts[2].X != 3000 {
		t.Fatalf("points %+v, want x 1000, 2000, 3000", pts)
	}
	// writeSample gave the 3000 run (first written) p50 0.5 ms.
	if pts[2].P50 != 0.5 || pts[2].P999 != 8 {
		t.Errorf("x 3000: p50 %g p99.9 %g, want 0.5 and 8 (the values follow their run)", pts[2].P50, pts[2].P999)
	}
}

func TestReadRejects(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(filepath.Join(dir, "rate-*.json")); err == nil || !strings.Contains(err.Error(), "no file matches") {
		t.Errorf("empty directory: error %v, want 'no file matches'", err)
	}
	bad := filepath.Join(dir, "rate-1.json")
	if err := os.WriteFile(bad, []byte(`{"system":"ellipsis"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(bad); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Errorf("no mode: error %v, want one naming \"mode\"", err)
	}
	if err := os.WriteFile(bad, []byte(`{"mode":"idle","latency":{"count":0}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(bad); err == nil || !strings.Contains(err.Error(), "no latency") {
		t.Errorf("idle run: error %v, want 'no latency'", err)
	}
	if err := WriteSVG(io.Discard, "x", OfferedRate, nil); err == nil {
		t.Error("WriteSVG of no points: no error")
	}
}
