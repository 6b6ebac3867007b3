// Package loadplot draws latency-against-load plots as SVG from the load
// generator's summary JSON (loadgen.Result, ellipsis-loadgen -json), with
// gonum.org/v1/plot. The README's plots come from the committed sweep in
// docs/data/loadgen-sweep (tools/loadgen/sweep.sh): `make plots` redraws
// them without a new run, `make plots-sweep` runs the sweep first.
//
// A plot has one line per percentile (p50, p99, p99.9 of the state
// changes' end-to-end latency, sender's write to receiver's read, in ms,
// on a logarithmic axis) against one quantity of the run (offered state
// changes per second, or connections), one point per run.
package loadplot

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ellipsis-chat/ellipsis/tools/loadgen"
)

// Run is one load generator summary and the file it came from.
type Run struct {
	Path   string
	Result loadgen.Result
}

// Read reads the summaries that match glob (filepath.Glob syntax). It
// fails when nothing matches, when a file is not a summary (no mode), or
// when a run measured no latency (a plot needs p50 > 0 for its log axis).
func Read(glob string) ([]Run, error) {
	paths, err := filepath.Glob(glob)
	if err != nil {
		return nil, fmt.Errorf("loadplot: pattern %q: %w", glob, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("loadplot: no file matches %q (run tools/loadgen/sweep.sh, or make plots-sweep)", glob)
	}
	runs := make([]Run, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("loadplot: %w", err)
		}
		var r loadgen.Result
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("loadplot: %s: not a load generator summary: %w", p, err)
		}
		if r.Mode == "" {
			return nil, fmt.Errorf("loadplot: %s: no \"mode\": not a load generator summary (ellipsis-loadgen -json)", p)
		}
		if r.Latency.Count == 0 || r.Latency.P50 <= 0 {
			return nil, fmt.Errorf("loadplot: %s: no latency measured (latency.count %d): nothing to plot", p, r.Latency.Count)
		}
		runs = append(runs, Run{Path: p, Result: r})
	}
	return runs, nil
}

// X picks a plot's horizontal quantity from a run.
type X struct {
	Label string
	Of    func(loadgen.Result) float64
}

// OfferedRate is the offered load in state changes per second (-rate).
var OfferedRate = X{Label: "offered typing state changes per second", Of: func(r loadgen.Result) float64 { return r.Rate }}

// Connections is the number of connections open and joined.
var Connections = X{Label: "connections (rooms of 5, half typing, 0.5 state changes/s each)", Of: func(r loadgen.Result) float64 { return float64(r.Connected) }}

// Point is one run on a plot: X and the latency percentiles in ms, and
// Lost, the share of the expected state-change deliveries that never
// arrived (0 to 1): an overloaded run's percentiles leave those out, so the
// plot says so next to the point.
type Point struct {
	X, P50, P99, P999 float64
	Lost              float64
}

// Points turns runs into points sorted by x (a tie keeps the file order).
func Points(runs []Run, x X) []Point {
	pts := make([]Point, len(runs))
	for i, r := range runs {
		l, d := r.Result.Latency, r.Result.Delivered
		pts[i] = Point{X: x.Of(r.Result), P50: l.P50, P99: l.P99, P999: l.P999}
		if d.ExpectedState > 0 && d.LostState > 0 {
			pts[i].Lost = float64(d.LostState) / float64(d.ExpectedState)
		}
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
	return pts
}

// Size of every plot (the README shows them at this size).
const (
	Width  = 16 * vg.Centimeter
	Height = 10 * vg.Centimeter
)

// WriteSVG draws the points as an SVG of Width × Height to w: one line
// with markers per percentile, latency in ms on a log axis.
func WriteSVG(w io.Writer, title string, x X, pts []Point) error {
	if len(pts) == 0 {
		return errors.New("loadplot: no points to draw")
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x.Label
	p.Y.Label.Text = "end-to-end latency (ms, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.X.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true

	series := []struct {
		name  string
		of    func(Point) float64
		color color.RGBA
		shape draw.GlyphDrawer
	}{
		{"p50", func(q Point) float64 { return q.P50 }, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, draw.CircleGlyph{}},
		{"p99", func(q Point) float64 { return q.P99 }, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, draw.SquareGlyph{}},
		{"p99.9", func(q Point) float64 { return q.P999 }, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, draw.TriangleGlyph{}},
	}
	for _, s := range series {
		xys := make(plotter.XYs, len(pts))
		for i, q := range pts {
			v := s.of(q)
			if v <= 0 { // a log axis cannot show 0; a run with a latency has every percentile > 0
				return fmt.Errorf("loadplot: %s is %g at x = %g: a log axis needs > 0", s.name, v, q.X)
			}
			xys[i] = plotter.XY{X: q.X, Y: v}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("loadplot: %s: %w", s.name, err)
		}
		line.Color = s.color
		line.Width = vg.Points(1.5)
		points.Color = s.color
		points.Shape = s.shape
		points.Radius = vg.Points(3)
		p.Add(line, points)
		p.Legend.Add(s.name, line, points)
	}
	var lost plotter.XYLabels
	for _, q := range pts {
		if q.Lost > 0 {
			lost.XYs = append(lost.XYs, plotter.XY{X: q.X, Y: q.P999})
			lost.Labels = append(lost.Labels, fmt.Sprintf("%.1f%% lost", 100*q.Lost))
		}
	}
	if len(lost.XYs) > 0 {
		labels, err := plotter.NewLabels(lost)
		if err != nil {
			return fmt.Errorf("loadplot: lost labels: %w", err)
		}
		for i := range labels.TextStyle {
			labels.TextStyle[i].XAlign = draw.XRight
			labels.TextStyle[i].YAlign = draw.YBottom
		}
		labels.Offset = vg.Point{X: -vg.Points(4), Y: vg.Points(4)}
		p.Add(labels)
	}
	wt, err := p.WriterTo(Width, Height, "svg")
	if err != nil {
		return fmt.Errorf("loadplot: %w", err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("loadplot: writing the SVG: %w", err)
	}
	return nil
}

// Machine describes where the runs ran, for a title: "\n2 CPUs, load
// average 1.2–3.4 (1 min, before each run)", or "" when the summaries do
// not say. The machine's load is part of every latency figure.
func Machine(runs []Run) string {
	cpus := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range runs {
		if r.Result.Machine.CPUs > 0 {
			cpus = r.Result.Machine.CPUs
		}
		f := strings.Fields(r.Result.Machine.LoadBefore)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if cpus == 0 || math.IsInf(lo, 1) {
		return ""
	}
	return fmt.Sprintf("\n%d CPUs shared by the stack, Redis, the load generator and other jobs: load average %.1f–%.1f", cpus, lo, hi)
}

// Plot is one SVG to draw: the runs matching Glob against X.
type Plot struct {
	Glob, Out, Title string
	X                X
}

// Standard are the README's two plots, from the sweep's files in dataDir
// into outDir (tools/loadgen/sweep.sh names them rate-<R>.json and
// conns-<C>.json).
func Standard(dataDir, outDir string) []Plot {
	return []Plot{
		{Glob: filepath.Join(dataDir, "rate-*.json"), Out: filepath.Join(outDir, "latency-vs-rate.svg"),
			Title: "Latency against offered load (4,000 connections, rooms of 10)", X: OfferedRate},
		{Glob: filepath.Join(dataDir, "conns-*.json"), Out: filepath.Join(outDir, "latency-vs-connections.svg"),
			Title: "Latency against connections", X: Connections},
	}
}

// Draw reads each plot's runs and writes its SVG file (written whole to a
// temporary file in the same directory, then renamed).
func Draw(plots []Plot) error {
	for _, pl := range plots {
		runs, err := Read(pl.Glob)
		if err != nil {
			return err
		}
		tmp, err := os.CreateTemp(filepath.Dir(pl.Out), ".loadplot-*.svg")
		if err != nil {
			return fmt.Errorf("loadplot: %w", err)
		}
		err = tmp.Chmod(0o644) // CreateTemp's 0600 would survive the rename
		if err == nil {
			err = WriteSVG(tmp, pl.Title+Machine(runs), pl.X, Points(runs, pl.X))
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), pl.Out)
		}
		if err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("loadplot: %s: %w", pl.Out, err)
		}
	}
	return nil
}
