// Package gobuild cross-compiles one service binary the way its Dockerfile
// does: in the service's module alone (GOWORK=off), static (CGO_ENABLED=0),
// -trimpath, stripped (-s -w), with the version and revision stamped into
// shared/buildinfo.
package gobuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// BuildInfoPackage is the package whose version and revision variables
// the linker sets (shared/buildinfo).
const BuildInfoPackage = "github.com/ellipsis-chat/ellipsis/shared/buildinfo"

// Target is one binary to build.
type Target struct {
	// ModuleDir is the service's module directory (services/gateway).
	ModuleDir string
	// Package is the main package, relative to ModuleDir ("./cmd/gateway").
	Package string
	// GOOS and GOARCH are the platform ("linux", "arm64").
	GOOS, GOARCH string
	// Version and Revision are stamped into buildinfo.
	Version, Revision string
	// Out is the binary's path.
	Out string
}

// LDFlags is the -ldflags value for version and revision, the same string
// as the Dockerfiles' with ${VERSION} and ${REVISION} filled in.
func LDFlags(version, revision string) string {
	return fmt.Sprintf("-s -w -X %s.version=%s -X %s.revision=%s", BuildInfoPackage, version, BuildInfoPackage, revision)
}

// Args is the go command line for t, without the "go".
func Args(t Target) []string {
	// -buildvcs=false: the revision is stamped explicitly, so the binary
	// does not depend on whether Go found a .git (it carries no
	// vcs.modified or vcs.time that would differ between two checkouts).
	return []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=" + LDFlags(t.Version, t.Revision), "-o", t.Out, t.Package}
}

// Build runs `go build` for t with goBin (the go command), bounded by ctx.
// The error carries the compiler's output.
func Build(ctx context.Context, goBin string, t Target) error {
	if strings.ContainsAny(t.Version+t.Revision, " \t\n'\"") {
		return fmt.Errorf("version %q or revision %q holds a space or quote, which -ldflags cannot carry", t.Version, t.Revision)
	}
	cmd := exec.CommandContext(ctx, goBin, Args(t)...)
	cmd.Dir = t.ModuleDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOOS="+t.GOOS, "GOARCH="+t.GOARCH)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s/%s in %s: %v\n%s", t.Package, t.GOOS, t.GOARCH, t.ModuleDir, err, out.String())
	}
	return nil
}
