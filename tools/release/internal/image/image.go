// Package image assembles a service's multi-arch OCI image from binaries
// built beforehand, with the layout and configuration of the service's
// Dockerfile: the binary at /usr/local/bin/<name> on a distroless-static
// base, user 65532:65532, GOTRACEBACK=single, the service's ports, and
// the OCI labels. It writes the image index as an OCI layout archive and
// pushes it to a registry.
package image

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ellipsis-chat/ellipsis/tools/release/internal/archive"
)

// BinDir is where the binary lies in the image, as in the Dockerfiles.
const BinDir = "/usr/local/bin"

// Spec is what one service's image holds besides its base.
type Spec struct {
	// Binary is the program's name: /usr/local/bin/<Binary>, the
	// entrypoint.
	Binary string
	// Ports are the exposed ports ("8080/tcp").
	Ports []string
	// Env is added to the base's environment ("GOTRACEBACK=single").
	Env []string
	// Labels are the config's labels and the manifests' and index's
	// annotations (org.opencontainers.image.*).
	Labels map[string]string
	// Created is the config's created time and the layer's file times.
	Created time.Time
}

// Platform is one image of the index: its platform and the binary built
// for it.
type Platform struct {
	Platform v1.Platform
	// BinaryPath is the built binary on disk.
	BinaryPath string
}

// Build returns the OCI image for one platform: base(p) plus a layer with
// the binary, configured from spec.
func Build(ctx context.Context, spec Spec, base Base, p Platform) (v1.Image, error) {
	b, err := base(ctx, p.Platform)
	if err != nil {
		return nil, err
	}
	rel := strings.TrimPrefix(BinDir, "/")
	bin, err := layer([]archive.Entry{
		{Name: "usr/", Mode: 0o755},
		{Name: "usr/local/", Mode: 0o755},
		{Name: rel + "/", Mode: 0o755},
		{Name: rel + "/" + spec.Binary, Mode: 0o755, Source: p.BinaryPath},
	}, spec.Created)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(b, mutate.Addendum{
		Layer:   bin,
		History: v1.History{Created: v1.Time{Time: spec.Created}, CreatedBy: fmt.Sprintf("ellipsis-release: COPY %s %s/%s", spec.Binary, BinDir, spec.Binary)},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.Platform.OS, p.Platform.Architecture, p.Platform.Variant
	cf.Created = v1.Time{Time: spec.Created}
	c := &cf.Config
	c.Entrypoint = []string{path.Join(BinDir, spec.Binary)}
	c.Cmd = nil
	c.User = fmt.Sprintf("%d:%d", NonrootUID, NonrootUID)
	c.Env = mergeEnv(c.Env, spec.Env)
	c.ExposedPorts = map[string]struct{}{}
	for _, port := range spec.Ports {
		c.ExposedPorts[port] = struct{}{}
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	maps.Copy(c.Labels, spec.Labels)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Annotations(img, spec.Labels).(v1.Image), nil
}

// Index builds one image per platform and returns them as an OCI image
// index annotated with spec.Labels.
func Index(ctx context.Context, spec Spec, base Base, platforms []Platform) (v1.ImageIndex, error) {
	if len(platforms) == 0 {
		return nil, fmt.Errorf("image %s: no linux platform to build for", spec.Binary)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		img, err := Build(ctx, spec, base, p)
		if err != nil {
			return nil, fmt.Errorf("image %s for %s: %w", spec.Binary, p.Platform, err)
		}
		pl := p.Platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &pl}})
	}
	return mutate.Annotations(idx, spec.Labels).(v1.ImageIndex), nil
}

// mergeEnv returns base with each of add set, replacing a variable of the
// same name.
func mergeEnv(base, add []string) []string {
	out := slices.Clone(base)
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		out = append(out, kv)
	}
	return out
}
