package release

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A rerun into a release's directory replaces it; a directory no run made
// is left alone.
func TestResetDist(t *testing.T) {
	dist := filepath.Join(t.TempDir(), "dist")
	if err := resetDist(dist); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dist, "old.tar.gz"), []byte("x"), 0o644)
	if err := resetDist(dist); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dist, "old.tar.gz")); !os.IsNotExist(err) {
		t.Fatalf("a previous run's file survived: %v", err)
	}
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "keep.go"), []byte("package keep"), 0o644)
	if err := resetDist(other); err == nil || !strings.Contains(err.Error(), "not removing it") {
		t.Fatalf("a foreign directory as dist: %v", err)
	}
	if _, err := os.Stat(filepath.Join(other, "keep.go")); err != nil {
		t.Fatal("a foreign directory's file was removed")
	}
}

func TestParsePlatforms(t *testing.T) {
	ps, err := ParsePlatforms("linux/amd64, darwin/arm64")
	if err != nil || len(ps) != 2 || ps[1].String() != "darwin/arm64" {
		t.Fatalf("%v, %v", ps, err)
	}
	for _, bad := range []string{"windows/amd64", "linux/386", "linux", ""} {
		if _, err := ParsePlatforms(bad); err == nil || !strings.Contains(err.Error(), "want linux or darwin") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
