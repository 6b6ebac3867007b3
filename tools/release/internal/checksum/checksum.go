// Package checksum writes and verifies a release's SHA256SUMS file, in
// the format of GNU sha256sum ("<hex>  <name>", one a line), so that
// `sha256sum -c SHA256SUMS` checks a download.
package checksum

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// FileName is the checksum file's name in the dist directory.
const FileName = "SHA256SUMS"

// File returns the hex SHA-256 of the file at path.
func File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Write hashes each named file of dir and writes dir/SHA256SUMS, sorted by
// name. It returns the sums by name.
func Write(dir string, names []string) (map[string]string, error) {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	sums := make(map[string]string, len(sorted))
	var b bytes.Buffer
	for _, n := range sorted {
		s, err := File(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		sums[n] = s
		fmt.Fprintf(&b, "%s  %s\n", s, n)
	}
	return sums, os.WriteFile(filepath.Join(dir, FileName), b.Bytes(), 0o644)
}

// Verify reads dir/SHA256SUMS and checks every file it names. It returns
// the names checked; the error names the first file that is missing or
// differs, or the malformed line.
func Verify(dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		return nil, err
	}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		want, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(want) != 64 || name == "" || strings.ContainsAny(name, `/\`) {
			return names, fmt.Errorf("%s line %d: %q is not \"<64 hex digits>  <file name>\"", FileName, line, sc.Text())
		}
		got, err := File(filepath.Join(dir, name))
		if err != nil {
			return names, err
		}
		if got != want {
			return names, fmt.Errorf("%s: sha256 %s, SHA256SUMS says %s", name, got, want)
		}
		names = append(names, name)
	}
	return names, sc.Err()
}
