// Package release builds an Ellipsis release into a dist directory: for
// each service (gateway, presence-worker) and platform, the binary in a
// .tar.gz with the licence and its CycloneDX SBOM; for each service, a
// multi-arch OCI image (the linux platforms) as an OCI layout archive,
// pushed to a registry when asked; SHA256SUMS over all of them, and
// artifacts.json listing them. docs/releasing.md is the process around it.
//
// Names (VERSION is the tag, v0.1.0, or for a snapshot the git describe
// string with -snapshot):
//
//	ellipsis-<service>_<VERSION>_<os>_<arch>.tar.gz   the binary, LICENSE, README.md
//	ellipsis-<service>_<VERSION>_<os>_<arch>.cdx.json its SBOM (CycloneDX 1.6 JSON)
//	ellipsis-<service>_<VERSION>_oci.tar              the image index (linux/amd64, linux/arm64)
//	SHA256SUMS, artifacts.json
package release

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ellipsis-chat/ellipsis/tools/release/internal/archive"
	"github.com/ellipsis-chat/ellipsis/tools/release/internal/checksum"
	"github.com/ellipsis-chat/ellipsis/tools/release/internal/gobuild"
	"github.com/ellipsis-chat/ellipsis/tools/release/internal/image"
	"github.com/ellipsis-chat/ellipsis/tools/release/internal/sbom"
)

// Source is the repository the labels and SBOMs point at.
const Source = "https://github.com/ellipsis-chat/ellipsis"

// License is the SPDX expression of the project's licence (LICENSE).
const License = "Apache-2.0"

// ManifestName is the list of artifacts written beside SHA256SUMS.
const ManifestName = "artifacts.json"

// distMarker marks a directory as a release's output, first thing, so that
// a run that failed halfway can be rerun into it.
const distMarker = ".ellipsis-release"

// Project is how the SBOMs name this repository's own modules.
func Project() sbom.Project {
	return sbom.Project{ModulePrefix: "github.com/ellipsis-chat/ellipsis", License: License, Source: Source}
}

// Service is one deployable program.
type Service struct {
	// Name is the binary's name and the service's ("gateway").
	Name string
	// ModuleDir is its Go module, relative to the repository root.
	ModuleDir string
	// Package is its main package, relative to ModuleDir.
	Package string
	// Ports are the image's exposed ports, as its Dockerfile's EXPOSE.
	Ports []string
	// Description is the image's org.opencontainers.image.description.
	Description string
}

// ImageName is the service's image and artifact prefix ("ellipsis-gateway").
func (s Service) ImageName() string { return "ellipsis-" + s.Name }

// Services returns the released services, as their Dockerfiles build them.
func Services() []Service {
	return []Service{
		{Name: "gateway", ModuleDir: "services/gateway", Package: "./cmd/gateway", Ports: []string{"8080/tcp", "9090/tcp"},
			Description: "Ellipsis WebSocket gateway: typing indicators for chat rooms"},
		{Name: "presence-worker", ModuleDir: "services/presence-worker", Package: "./cmd/presence-worker", Ports: []string{"9090/tcp"},
			Description: "Ellipsis presence worker: typing state in Redis, room events on NATS"},
	}
}

// Platform is an os/arch pair ("linux/arm64").
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// DefaultPlatforms are what a release builds: binaries for all four,
// images for the linux ones.
func DefaultPlatforms() []Platform {
	return []Platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}}
}

// ParsePlatforms reads "linux/amd64,darwin/arm64". Only linux and darwin
// on amd64 and arm64 are accepted: what the project releases.
func ParsePlatforms(s string) ([]Platform, error) {
	var out []Platform
	for _, f := range strings.Split(s, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(f), "/")
		if !ok || (osName != "linux" && osName != "darwin") || (arch != "amd64" && arch != "arm64") {
			return nil, fmt.Errorf("platform %q: want linux or darwin / amd64 or arm64, as in linux/arm64", f)
		}
		out = append(out, Platform{osName, arch})
	}
	return out, nil
}

// Config is one release run.
type Config struct {
	// Root is the repository root.
	Root string
	// Dist is the output directory; its previous contents are removed
	// (it must be empty, absent, or a previous run's, with artifacts.json).
	Dist string
	// Version and Revision name the release (gitinfo): stamped into the
	// binaries, the labels, the file names.
	Version, Revision string
	// Created dates every file, layer and SBOM: the commit's time.
	Created time.Time
	// Services and Platforms select what is built.
	Services  []Service
	Platforms []Platform
	// Base is the images' base for each platform.
	Base image.Base
	// BaseName describes Base for the log and artifacts.json ("scratch",
	// or the reference pulled).
	BaseName string
	// ImageRepo prefixes the image names ("ghcr.io/ellipsis-chat"): the
	// archives' ref names and, with Push, where they go.
	ImageRepo string
	// Push sends each image index to ImageRepo.
	Push bool
	// PushTimeout bounds each HTTP request of a push, its body included
	// (a layer is up to ~10 MB).
	PushTimeout time.Duration
	// ModCache is the module cache (go env GOMODCACHE) the SBOMs' licences
	// are read from; "" leaves dependencies' licences out.
	ModCache string
	// Go is the go command.
	Go string
	// Log receives one line per step.
	Log io.Writer
}

// Artifact is one file of the release, as artifacts.json lists it.
type Artifact struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"` // "archive", "sbom", "image"
	Service string `json:"service"`
	OS      string `json:"os,omitempty"`
	Arch    string `json:"arch,omitempty"`
	SHA256  string `json:"sha256"`
	// For an image: its reference, index digest and platforms.
	Ref       string   `json:"ref,omitempty"`
	Digest    string   `json:"digest,omitempty"`
	Platforms []string `json:"platforms,omitempty"`
	Pushed    bool     `json:"pushed,omitempty"`
}

// Manifest is artifacts.json.
type Manifest struct {
	Version   string     `json:"version"`
	Revision  string     `json:"revision"`
	Created   time.Time  `json:"created"`
	Base      string     `json:"image_base"`
	Artifacts []Artifact `json:"artifacts"`
}

// Labels are the OCI labels of a service's image.
func (c Config) Labels(s Service) map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.url":         Source,
		"org.opencontainers.image.version":     c.Version,
		"org.opencontainers.image.revision":    c.Revision,
		"org.opencontainers.image.licenses":    License,
		"org.opencontainers.image.title":       s.ImageName(),
		"org.opencontainers.image.description": s.Description,
		"org.opencontainers.image.created":     c.Created.UTC().Format(time.RFC3339),
	}
}

// ImageRef is the reference of a service's image in this release.
func (c Config) ImageRef(s Service) string {
	return strings.TrimSuffix(c.ImageRepo, "/") + "/" + s.ImageName() + ":" + c.Version
}

// Run builds the release into c.Dist and returns its manifest.
func Run(ctx context.Context, c Config) (Manifest, error) {
	m := Manifest{Version: c.Version, Revision: c.Revision, Created: c.Created.UTC(), Base: c.BaseName}
	if err := c.check(); err != nil {
		return m, err
	}
	if err := resetDist(c.Dist); err != nil {
		return m, err
	}
	binDir := filepath.Join(c.Dist, "bin")
	var lic *sbom.Licenser
	if c.ModCache != "" {
		lic = sbom.NewLicenser(c.ModCache)
	}
	for _, s := range c.Services {
		var linux []image.Platform
		for _, p := range c.Platforms {
			binPath := filepath.Join(binDir, p.OS+"_"+p.Arch, s.Name)
			arts, err := c.binary(ctx, s, p, binPath, lic)
			if err != nil {
				return m, err
			}
			m.Artifacts = append(m.Artifacts, arts...)
			if p.OS == "linux" {
				linux = append(linux, image.Platform{Platform: v1.Platform{OS: p.OS, Architecture: p.Arch}, BinaryPath: binPath})
			}
		}
		a, err := c.image(ctx, s, linux)
		if err != nil {
			return m, err
		}
		m.Artifacts = append(m.Artifacts, a)
	}
	names := make([]string, len(m.Artifacts))
	for i, a := range m.Artifacts {
		names[i] = a.Name
	}
	sums, err := checksum.Write(c.Dist, names)
	if err != nil {
		return m, err
	}
	for i := range m.Artifacts {
		m.Artifacts[i].SHA256 = sums[m.Artifacts[i].Name]
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	if err := os.WriteFile(filepath.Join(c.Dist, ManifestName), append(data, '\n'), 0o644); err != nil {
		return m, err
	}
	c.logf("%d artifacts, %s and %s in %s", len(m.Artifacts), checksum.FileName, ManifestName, c.Dist)
	return m, nil
}

func (c Config) check() error {
	switch {
	case c.Root == "" || c.Dist == "":
		return errors.New("release: Root and Dist must be set")
	case c.Version == "" || c.Revision == "":
		return errors.New("release: Version and Revision must be set")
	case len(c.Services) == 0 || len(c.Platforms) == 0:
		return errors.New("release: no service or no platform selected")
	case c.Base == nil:
		return errors.New("release: no image base")
	case c.Push && (c.ImageRepo == "" || c.PushTimeout <= 0):
		return errors.New("release: pushing needs ImageRepo and a PushTimeout")
	}
	return nil
}

// binary builds one service for one platform, then its archive and SBOM.
func (c Config) binary(ctx context.Context, s Service, p Platform, binPath string, lic *sbom.Licenser) ([]Artifact, error) {
	c.logf("build %s %s", s.Name, p)
	t := gobuild.Target{ModuleDir: filepath.Join(c.Root, s.ModuleDir), Package: s.Package, GOOS: p.OS, GOARCH: p.Arch,
		Version: c.Version, Revision: c.Revision, Out: binPath}
	if err := gobuild.Build(ctx, c.Go, t); err != nil {
		return nil, err
	}
	base := fmt.Sprintf("%s_%s_%s_%s", s.ImageName(), c.Version, p.OS, p.Arch)
	tgz := base + ".tar.gz"
	err := archive.WriteTarGz(filepath.Join(c.Dist, tgz), []archive.Entry{
		{Name: s.Name, Mode: 0o755, Source: binPath},
		{Name: "LICENSE", Mode: 0o644, Source: filepath.Join(c.Root, "LICENSE")},
		{Name: "README.md", Mode: 0o644, Source: filepath.Join(c.Root, s.ModuleDir, "README.md")},
	}, c.Created)
	if err != nil {
		return nil, err
	}
	bom := base + ".cdx.json"
	if err := sbom.Write(binPath, filepath.Join(c.Dist, bom), sbom.Options{Version: c.Version, Timestamp: c.Created, Project: Project(), Licenser: lic, Log: c.Log}); err != nil {
		return nil, err
	}
	return []Artifact{
		{Name: tgz, Kind: "archive", Service: s.Name, OS: p.OS, Arch: p.Arch},
		{Name: bom, Kind: "sbom", Service: s.Name, OS: p.OS, Arch: p.Arch},
	}, nil
}

// image assembles a service's image index, writes its archive and pushes
// it when asked.
func (c Config) image(ctx context.Context, s Service, linux []image.Platform) (Artifact, error) {
	ref := c.ImageRef(s)
	c.logf("image %s (%d platforms, base %s)", ref, len(linux), c.BaseName)
	spec := image.Spec{Binary: s.Name, Ports: s.Ports, Env: []string{"GOTRACEBACK=single"}, Labels: c.Labels(s), Created: c.Created}
	idx, err := image.Index(ctx, spec, c.Base, linux)
	if err != nil {
		return Artifact{}, err
	}
	name := fmt.Sprintf("%s_%s_oci.tar", s.ImageName(), c.Version)
	if err := image.WriteArchive(idx, ref, filepath.Join(c.Dist, name), c.Created); err != nil {
		return Artifact{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return Artifact{}, err
	}
	a := Artifact{Name: name, Kind: "image", Service: s.Name, Ref: ref, Digest: digest.String()}
	for _, p := range linux {
		a.Platforms = append(a.Platforms, p.Platform.String())
	}
	if c.Push {
		if _, err := image.Push(ctx, idx, ref, c.PushTimeout); err != nil {
			return a, err
		}
		a.Pushed = true
		c.logf("pushed %s@%s", ref, digest)
	}
	return a, nil
}

// resetDist empties dir, refusing one that holds files but is not a
// previous run's (no marker file): a mistyped -dist must not delete a
// source tree.
func resetDist(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(ents) > 0 {
		if _, err := os.Stat(filepath.Join(dir, distMarker)); err != nil {
			return fmt.Errorf("dist directory %s is not empty and was not made by a release run (no %s): not removing it", dir, distMarker)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, distMarker), []byte("made by tools/release; removed and rewritten by its next run\n"), 0o644)
}

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "release: "+format+"\n", args...)
	}
}
