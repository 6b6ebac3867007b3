// Package buildinfo tells which build of Ellipsis is running: the version
// and VCS revision stamped at link time, and the Go version, for the
// binaries' -version flag and the ellipsis_build_info metric.
//
// The version and revision are set by the linker:
//
//	go build -ldflags "-X github.com/ellipsis-chat/ellipsis/shared/buildinfo.version=v0.2.0 \
//	  -X github.com/ellipsis-chat/ellipsis/shared/buildinfo.revision=$(git rev-parse HEAD)" ./cmd/gateway
//
// (the Makefile's build target, the release tool tools/release and the
// Dockerfiles do this). Without a stamped version it is the main module's
// version from the Go build info, which is "(devel)" for a build inside a
// checkout, reported as "dev". Without a stamped revision it is Go's own
// vcs.revision, which Go records only when it builds inside a git checkout
// without -buildvcs=false; an image build has no .git, so the revision is
// passed in (docs/releasing.md).
package buildinfo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version and revision are written by the linker (-X); they are never
// assigned at run time.
var (
	version  string
	revision string
)

// Info describes one build.
type Info struct {
	// Version is the release version ("v0.2.0"), a `git describe` string,
	// or "dev".
	Version string
	// Revision is the VCS commit the binary was built from: the stamped
	// revision, else Go's vcs.revision; "" when the build had neither
	// (e.g. go build -buildvcs=false without -X ...revision).
	Revision string
	// Modified is true when the working tree had uncommitted changes.
	Modified bool
	// GoVersion is the toolchain that built the binary ("go1.26.8").
	GoVersion string
}

// Get returns the running binary's build information.
func Get() Info {
	in := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if revision == "" {
					in.Revision = s.Value
				}
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = "dev"
	}
	return in
}

// String formats the build as one line: "v0.2.0 (revision 1a2b3c4d5e6f,
// modified, go1.26.8)".
func (in Info) String() string {
	rev := in.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		rev = "unknown"
	}
	mod := ""
	if in.Modified {
		mod = ", modified"
	}
	return fmt.Sprintf("%s (revision %s%s, %s)", in.Version, rev, mod, in.GoVersion)
}

// HandleFlag reports whether args ask only for the version (-version or
// --version, alone) and, if so, writes "<program> <Info>" to w. The mains
// call it before reading their configuration, so that -version works
// whatever the environment holds.
func HandleFlag(program string, args []string, w io.Writer) bool {
	if len(args) != 1 || (args[0] != "-version" && args[0] != "--version") {
		return false
	}
	fmt.Fprintf(w, "%s %s\n", program, Get())
	return true
}

// Collector returns the gauge ellipsis_build_info{service, version,
// revision, goversion}, always 1, as Prometheus exporters publish build
// information (join on it to see which build a series comes from).
func Collector(service string) prometheus.Collector {
	in := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ellipsis_build_info",
		Help: "Build information of this Ellipsis binary; always 1.",
		ConstLabels: prometheus.Labels{
			"service":   service,
			"version":   in.Version,
			"revision":  in.Revision,
			"goversion": in.GoVersion,
		},
	})
	g.Set(1)
	return g
}
