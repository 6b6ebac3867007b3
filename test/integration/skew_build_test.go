package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// skewCommit is the earlier version the version-skew test runs beside this
// checkout's: the last landed main before the work of issue 28, which
// already has the worker-side threads and activities. Move it to each
// release once releases are tagged (docs/upgrading.md, "The skew test"):
// the rule is tested against the release an operator upgrades from.
// ELLIPSIS_SKEW_COMMIT replaces it for one run (any commit or tag the
// checkout has).
const skewCommit = "a5e364d24248329eca79aa3fa4001decf8fa211d"

// oldBuildTimeout bounds the old build: about 2 s when the Go build cache
// has it, a few minutes on a 2-core machine the first time (every package
// compiled with -trimpath).
const oldBuildTimeout = 8 * time.Minute

// oldBinaries is the build of skewCommit's gateway and presence worker, made
// once per test run.
var oldBinaries = struct {
	once     sync.Once
	dir      string // removed by TestMain
	gw, wk   string
	revision string // the full commit hash
	err      error
}{}

// buildOldBinaries builds the gateway and presence worker of skewCommit (or
// ELLIPSIS_SKEW_COMMIT) from this checkout's git history: `git archive` of
// the commit into a temporary directory, then `go build -trimpath` there in
// that commit's own workspace (its go.work), offline (GOPROXY=off,
// GOTOOLCHAIN=local, -mod=readonly, -buildvcs=false), so it needs the
// commit's modules in the module cache and nothing from the network.
// -trimpath makes the compiled packages independent of the temporary
// directory, so the Go build cache keeps them from one run to the next.
// Each binary is stamped with the version "skew-<12 hex digits>".
//
// It fails the test (never skips it) when git is missing, the checkout has
// no git history, or the history lacks the commit (a shallow clone, a
// source archive): the message says how to get it.
func buildOldBinaries(t *testing.T) (gatewayBin, workerBin, revision string) {
	t.Helper()
	oldBinaries.once.Do(buildOld)
	if oldBinaries.err != nil {
		t.Fatal(oldBinaries.err)
	}
	return oldBinaries.gw, oldBinaries.wk, oldBinaries.revision
}

// startOldBuild starts buildOldBinaries' build in the background, so that
// it overlaps the build of this checkout's binaries; buildOldBinaries
// waits for it.
func startOldBuild() { go oldBinaries.once.Do(buildOld) }

func buildOld() {
	commit := testkit.EnvOr("ELLIPSIS_SKEW_COMMIT", skewCommit)
	oldBinaries.revision, oldBinaries.err = resolveSkewCommit(commit)
	if oldBinaries.err == nil {
		oldBinaries.err = buildOldCommit(oldBinaries.revision)
	}
}

// resolveSkewCommit returns the full hash of commit in the git history of
// the checkout holding this package, or an error that says what is missing
// and how to get it.
func resolveSkewCommit(commit string) (string, error) {
	const why = "the version-skew test (docs/upgrading.md, \"The skew test\") builds the old gateway and worker from this checkout's git history"
	if _, err := exec.LookPath("git"); err != nil {
		return "", fmt.Errorf("%s, and git is not on PATH: install git", why)
	}
	if out, err := gitOutput("rev-parse", "--git-dir"); err != nil {
		return "", fmt.Errorf("%s, and this is not a git checkout (%s): test a clone of the repository, not a source archive", why, out)
	}
	out, err := gitOutput("rev-parse", "--verify", "--quiet", commit+"^{commit}")
	if err != nil || out == "" {
		shallow, _ := gitOutput("rev-parse", "--is-shallow-repository")
		hint := "fetch it (git fetch origin " + commit + ")"
		if shallow == "true" {
			hint = "this clone is shallow: git fetch --unshallow"
		}
		return "", fmt.Errorf("%s, and this checkout has no commit %s in its history: %s, or set ELLIPSIS_SKEW_COMMIT to a commit it has", why, commit, hint)
	}
	return out, nil
}

// gitOutput runs git in this package's directory (inside the checkout) and
// returns its trimmed output.
func gitOutput(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// buildOldCommit extracts revision into a temporary directory and builds
// its two services there, filling oldBinaries.
func buildOldCommit(revision string) error {
	dir, err := os.MkdirTemp("", "ellipsis-skew-")
	if err != nil {
		return err
	}
	oldBinaries.dir = dir
	src, bin := filepath.Join(dir, "src"), filepath.Join(dir, "bin")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), oldBuildTimeout)
	defer cancel()
	tarball := filepath.Join(dir, "src.tar")
	// From the top of the checkout: in a subdirectory, git archive takes
	// only that subdirectory.
	root, err := gitOutput("rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("git rev-parse --show-toplevel: %v (%s)", err, root)
	}
	if out, err := gitOutput("-C", root, "archive", "--format=tar", "--output="+tarball, revision); err != nil {
		return fmt.Errorf("git archive %s: %v\n%s", revision, err, out)
	}
	if out, err := exec.CommandContext(ctx, "tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
		return fmt.Errorf("extracting git archive %s: %v\n%s", revision, err, out)
	}
	version := "skew-" + revision[:12]
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-X github.com/ellipsis-chat/ellipsis/shared/buildinfo.version="+version,
		"-o", bin+string(os.PathSeparator),
		"./services/gateway/cmd/gateway", "./services/presence-worker/cmd/presence-worker")
	cmd.Dir = src
	cmd.Env = append(withoutEnv(os.Environ(), "GOFLAGS", "GOWORK", "GOPROXY", "GOTOOLCHAIN"),
		"GOWORK="+filepath.Join(src, "go.work"),
		"GOFLAGS=-mod=readonly -buildvcs=false",
		"GOPROXY=off",
		"GOTOOLCHAIN=local")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	started := time.Now()
	if err := cmd.Run(); err != nil {
		hint := ""
		if strings.Contains(out.String(), "GOPROXY=off") {
			hint = "\nthe commit needs modules missing from the module cache (the build is offline): run `go mod download` in each module of a checkout of " + revision
		}
		return fmt.Errorf("building %s's gateway and worker (offline, in %s): %v%s\n%s", revision, src, err, hint, out.String())
	}
	oldBinaries.gw, oldBinaries.wk = filepath.Join(bin, "gateway"), filepath.Join(bin, "presence-worker")
	for _, b := range []string{oldBinaries.gw, oldBinaries.wk} {
		got, err := exec.CommandContext(ctx, b, "-version").CombinedOutput()
		if err != nil || !strings.Contains(string(got), version) {
			return fmt.Errorf("%s -version: %v %q, want the stamp %q", b, err, got, version)
		}
	}
	if d := time.Since(started); d > 30*time.Second {
		fmt.Fprintf(os.Stderr, "integration: built %s's gateway and worker in %v (cached in the Go build cache for later runs)\n", revision[:12], d.Round(time.Second))
	}
	return nil
}

// withoutEnv returns env without the variables named.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}
