package image

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ellipsis-chat/ellipsis/tools/release/internal/archive"
)

// Base gives the image a service's binary is layered onto, for one
// platform. It may reach the network; ctx bounds it.
type Base func(ctx context.Context, p v1.Platform) (v1.Image, error)

// NonrootUID is the uid and gid the images run as: distroless's "nonroot"
// (the Dockerfiles' USER 65532:65532, the manifests' runAsUser).
const NonrootUID = 65532

// CACertsPath is where the CA bundle lies in the image, as in distroless
// and Debian; SSL_CERT_FILE names it too.
const CACertsPath = "etc/ssl/certs/ca-certificates.crt"

// The files of distroless static's nonroot variant that a static Go
// binary uses: users and groups (the nonroot user, uid 65532), name
// service order, and a home and /tmp to write to.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"tty:x:5:\n" +
		"staff:x:50:\n" +
		"nonroot:x:65532:\n"
	nsswitch = "passwd: files\ngroup: files\nhosts: files dns\n"
)

// RootFS is the one layer of the scratch base: distroless static's files
// for a static binary (see passwd above) and the CA bundle caPEM (PEM
// certificates; the release host's Debian ca-certificates by default, the
// package distroless takes its bundle from).
func RootFS(caPEM []byte, mtime time.Time) (v1.Layer, error) {
	if !bytes.Contains(caPEM, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("the CA bundle holds no PEM certificate")
	}
	entries := []archive.Entry{
		{Name: "etc/", Mode: 0o755},
		{Name: "etc/group", Mode: 0o644, Data: []byte(group)},
		{Name: "etc/nsswitch.conf", Mode: 0o644, Data: []byte(nsswitch)},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Name: "etc/ssl/", Mode: 0o755},
		{Name: "etc/ssl/certs/", Mode: 0o755},
		{Name: CACertsPath, Mode: 0o644, Data: caPEM},
		{Name: "home/", Mode: 0o755},
		{Name: "home/nonroot/", Mode: 0o700, UID: NonrootUID, GID: NonrootUID},
		{Name: "tmp/", Mode: 0o777 | fs.ModeSticky},
	}
	return layer(entries, mtime)
}

// ScratchBase is a base built here from nothing: RootFS and distroless's
// configuration (PATH, SSL_CERT_FILE, home as the working directory). It
// needs no registry, and gives each platform the same bytes.
func ScratchBase(caPEM []byte, mtime time.Time) Base {
	return func(_ context.Context, p v1.Platform) (v1.Image, error) {
		l, err := RootFS(caPEM, mtime)
		if err != nil {
			return nil, err
		}
		img, err := mutate.Append(empty.Image, mutate.Addendum{
			Layer:   l,
			History: v1.History{Created: v1.Time{Time: mtime}, CreatedBy: "ellipsis-release: distroless static nonroot files, CA bundle", Comment: "scratch base"},
		})
		if err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
		cf.Config.Env = []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=/" + CACertsPath,
		}
		cf.Config.WorkingDir = "/home/nonroot"
		return mutate.ConfigFile(img, cf)
	}
}

// RemoteBase pulls ref (gcr.io/distroless/static-debian12:nonroot, say;
// better by digest) for each platform from its registry, with the
// credentials of the docker/podman config. Layers are fetched lazily, when
// the image is written or pushed, so each HTTP request (and the reading
// of its body) is bounded by timeout rather than the call.
func RemoteBase(ref string, timeout time.Duration) (Base, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("base image %q: %w", ref, err)
	}
	tr := TimeoutTransport(remote.DefaultTransport, timeout)
	return func(ctx context.Context, p v1.Platform) (v1.Image, error) {
		img, err := remote.Image(r, remote.WithContext(ctx), remote.WithPlatform(p), remote.WithTransport(tr), remote.WithAuthFromKeychain(authn.DefaultKeychain))
		if err != nil {
			return nil, fmt.Errorf("base image %s for %s: %w", ref, p, err)
		}
		return img, nil
	}, nil
}

// layer makes an OCI gzip layer of entries.
func layer(entries []archive.Entry, mtime time.Time) (v1.Layer, error) {
	var b bytes.Buffer
	if err := archive.Tar(&b, entries, mtime); err != nil {
		return nil, err
	}
	data := b.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
