package gitinfo

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestVersion(t *testing.T) {
	clean := Info{Revision: "a5e364d0123456789abcdef0123456789abcdef0", Describe: "v0.1.0", Tag: "v0.1.0"}
	for _, tc := range []struct {
		name     string
		in       Info
		snapshot bool
		want     string
		wantErr  string
	}{
		{"release", clean, false, "v0.1.0", ""},
		{"pre-release", Info{Tag: "v0.2.0-rc.1"}, false, "v0.2.0-rc.1", ""},
		{"snapshot of a tag", clean, true, "v0.1.0-snapshot", ""},
		{"snapshot of a dirty tree", Info{Describe: "v0.1.0-3-ga5e364d-dirty", Dirty: true}, true, "v0.1.0-3-ga5e364d-dirty-snapshot", ""},
		{"no tag", Info{Revision: clean.Revision, Describe: "a5e364d"}, false, "", "no tag points at HEAD a5e364d01234"},
		{"not semver", Info{Tag: "release-1"}, false, "", `tag "release-1" is not vMAJOR.MINOR.PATCH`},
		{"leading zero", Info{Tag: "v0.01.0"}, false, "", "is not vMAJOR.MINOR.PATCH"},
		{"dirty", Info{Tag: "v0.1.0", Dirty: true}, false, "", "uncommitted changes"},
	} {
		got, err := tc.in.Version(tc.snapshot)
		if tc.wantErr != "" {
			if err == nil || !errors.Is(err, ErrNotReleasable) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// Read against a real repository: a commit, then a tag, then a change.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("add", "f")
	run("commit", "-q", "-m", "one")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	in, err := Read(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Revision) != 40 || in.Tag != "" || in.Dirty || in.Describe != in.Revision[:7] {
		t.Fatalf("untagged: %+v", in)
	}
	if want := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC); !in.CommitTime.Equal(want) {
		t.Fatalf("commit time %v, want %v", in.CommitTime, want)
	}

	run("tag", "-a", "v0.1.0", "-m", "v0.1.0")
	if in, err = Read(ctx, dir); err != nil || in.Tag != "v0.1.0" || in.Describe != "v0.1.0" {
		t.Fatalf("tagged: %+v, %v", in, err)
	}
	if v, err := in.Version(false); err != nil || v != "v0.1.0" {
		t.Fatalf("tagged release version %q, %v", v, err)
	}

	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if in, err = Read(ctx, dir); err != nil || !in.Dirty || in.Describe != "v0.1.0-dirty" {
		t.Fatalf("changed: %+v, %v", in, err)
	}
	if _, err := in.Version(false); !errors.Is(err, ErrNotReleasable) {
		t.Fatalf("a dirty tree released: %v", err)
	}
}
