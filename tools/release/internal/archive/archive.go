// Package archive writes a release's .tar.gz archives and the tar streams
// of image layers byte for byte the same on every build of one commit: the
// entries in the order given, owned by root (or the uid given), each with
// the same time, and gzip without a name or time.
package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// Entry is one file or directory of an archive.
type Entry struct {
	// Name is the slash-separated path inside the archive, without a
	// leading slash ("usr/local/bin/gateway"); a directory's ends in "/".
	Name string
	// Mode is the permission bits (and fs.ModeSticky for /tmp).
	Mode fs.FileMode
	// UID and GID own the entry (0, root, unless set).
	UID, GID int
	// Data is the file's content; Source, when set, is a file to read it
	// from instead. Both are unset for a directory.
	Data   []byte
	Source string
}

// Tar writes entries as a tar stream to w, each dated mtime.
func Tar(w io.Writer, entries []Entry, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Mode: int64(e.Mode.Perm()), Uid: e.UID, Gid: e.GID, ModTime: mtime, Format: tar.FormatPAX}
		if e.Mode&fs.ModeSticky != 0 {
			h.Mode |= 01000
		}
		if n := len(e.Name); n > 0 && e.Name[n-1] == '/' {
			h.Typeflag = tar.TypeDir
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		data := e.Data
		if e.Source != "" {
			b, err := os.ReadFile(e.Source)
			if err != nil {
				return fmt.Errorf("archive entry %s: %w", e.Name, err)
			}
			data = b
		}
		h.Typeflag = tar.TypeReg
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// WriteTarGz writes entries to the file path as a gzip-compressed tar.
func WriteTarGz(path string, entries []Entry, mtime time.Time) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if err := Tar(zw, entries, mtime); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
