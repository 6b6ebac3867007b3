package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// One set of entries gives the same bytes however often it is written, and
// the headers carry only what was given: root or the given uid, one time.
func TestTarGzIsReproducible(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "bin")
	if err := os.WriteFile(src, []byte("\x7fELF..."), 0o700); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	entries := []Entry{
		{Name: "tmp/", Mode: 0o777 | fs.ModeSticky},
		{Name: "home/nonroot/", Mode: 0o700, UID: 65532, GID: 65532},
		{Name: "gateway", Mode: 0o755, Source: src},
		{Name: "LICENSE", Mode: 0o644, Data: []byte("Apache-2.0")},
	}
	a, b := filepath.Join(dir, "a.tar.gz"), filepath.Join(dir, "b.tar.gz")
	for _, p := range []string{a, b} {
		if err := WriteTarGz(p, entries, mtime); err != nil {
			t.Fatal(err)
		}
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Fatal("two writes of the same entries differ")
	}
	zr, err := gzip.NewReader(bytes.NewReader(da))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Fatalf("gzip header carries name %q, time %v", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	want := []struct {
		name string
		mode int64
		uid  int
		typ  byte
		body string
	}{
		{"tmp/", 01777, 0, tar.TypeDir, ""},
		{"home/nonroot/", 0o700, 65532, tar.TypeDir, ""},
		{"gateway", 0o755, 0, tar.TypeReg, "\x7fELF..."},
		{"LICENSE", 0o644, 0, tar.TypeReg, "Apache-2.0"},
	}
	for _, w := range want {
		h, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if h.Name != w.name || h.Mode != w.mode || h.Uid != w.uid || h.Gid != w.uid || h.Typeflag != w.typ || string(body) != w.body || !h.ModTime.Equal(mtime) {
			t.Errorf("entry %+v (body %q), want %+v", h, body, w)
		}
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Fatalf("more entries than written: %v", err)
	}
}
