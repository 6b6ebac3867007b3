package checksum

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteVerify(t *testing.T) {
	dir := t.TempDir()
	for n, data := range map[string]string{"b.tar.gz": "bee", "a.cdx.json": "ay"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sums, err := Write(dir, []string{"b.tar.gz", "a.cdx.json"})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, FileName))
	// sha256sum's format, sorted by name: `printf ay | sha256sum`.
	const ay = "69d61997a241e97931db9dd1cfcef218041a752485f5f7956b09766287682da3"
	if !strings.HasPrefix(string(data), ay+"  a.cdx.json\n") || sums["a.cdx.json"] != ay {
		t.Fatalf("SHA256SUMS:\n%s", data)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "  a.cdx.json") || !strings.HasSuffix(lines[1], "  b.tar.gz") {
		t.Fatalf("SHA256SUMS not sorted or not two lines:\n%s", data)
	}
	names, err := Verify(dir)
	if err != nil || len(names) != 2 {
		t.Fatalf("Verify: %v, %v", names, err)
	}

	if err := os.WriteFile(filepath.Join(dir, "b.tar.gz"), []byte("bee!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(dir); err == nil || !strings.Contains(err.Error(), "b.tar.gz: sha256") {
		t.Fatalf("a changed file passed: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("xyz  ../etc/passwd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(dir); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a malformed line passed: %v", err)
	}
}
