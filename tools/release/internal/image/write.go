package image

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ellipsis-chat/ellipsis/tools/release/internal/archive"
)

// RefNameAnnotation names an index.json entry of an OCI layout (image
// spec, annotations.md); podman load and skopeo take the image's name
// from it.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// WriteArchive writes idx as an OCI image layout (image spec,
// image-layout.md) in a tar file at out, its index.json naming it ref
// ("ghcr.io/ellipsis-chat/ellipsis-gateway:v0.1.0"). Entries are sorted
// and dated mtime, so one index always gives the same archive. Load it
// with `podman load -i out` or `skopeo copy oci-archive:out ...`.
func WriteArchive(idx v1.ImageIndex, ref string, out string, mtime time.Time) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{RefNameAnnotation: ref})); err != nil {
		return fmt.Errorf("oci layout of %s: %w", ref, err)
	}
	var entries []archive.Entry
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			entries = append(entries, archive.Entry{Name: rel + "/", Mode: 0o755})
			return nil
		}
		entries = append(entries, archive.Entry{Name: rel, Mode: 0o644, Source: path})
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := archive.Tar(f, entries, mtime); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Push writes idx and every image in it to the registry as ref, with the
// credentials of the docker/podman config (~/.docker/config.json,
// $REGISTRY_AUTH_FILE...), each HTTP request bounded by timeout. It
// returns the index's digest.
func Push(ctx context.Context, idx v1.ImageIndex, ref string, timeout time.Duration) (v1.Hash, error) {
	tr := TimeoutTransport(remote.DefaultTransport, timeout)
	r, err := name.ParseReference(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := remote.WriteIndex(r, idx, remote.WithContext(ctx), remote.WithTransport(tr), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", ref, err)
	}
	return idx.Digest()
}
