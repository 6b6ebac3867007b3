package image

import (
	"archive/tar"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

const testPEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

var (
	created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	amd64   = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64   = v1.Platform{OS: "linux", Architecture: "arm64"}
)

// fakeBinaries writes one stand-in binary per platform.
func fakeBinaries(t *testing.T) []Platform {
	t.Helper()
	var out []Platform
	for _, p := range []v1.Platform{amd64, arm64} {
		path := filepath.Join(t.TempDir(), "gateway")
		if err := os.WriteFile(path, []byte("binary for "+p.String()), 0o755); err != nil {
			t.Fatal(err)
		}
		out = append(out, Platform{Platform: p, BinaryPath: path})
	}
	return out
}

func testSpec() Spec {
	return Spec{Binary: "gateway", Ports: []string{"8080/tcp", "9090/tcp"}, Env: []string{"GOTRACEBACK=single"},
		Labels: map[string]string{"org.opencontainers.image.version": "v0.1.0"}, Created: created}
}

// files reads an image's flattened file system: name -> header, body.
func files(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			body, _ := io.ReadAll(tr)
			h.PAXRecords = map[string]string{"body": string(body)}
		}
		out[strings.TrimSuffix(h.Name, "/")] = h
	}
}

// The scratch-based index: one image per platform with the platform's own
// binary, distroless's files, the Dockerfile's configuration.
func TestIndexOnScratch(t *testing.T) {
	ctx := context.Background()
	idx, err := Index(ctx, testSpec(), ScratchBase([]byte(testPEM), created), fakeBinaries(t))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 || im.MediaType != "application/vnd.oci.image.index.v1+json" || im.Annotations["org.opencontainers.image.version"] != "v0.1.0" {
		t.Fatalf("index %+v", im)
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if cf.OS != "linux" || cf.Architecture != d.Platform.Architecture || !cf.Created.Time.Equal(created) {
			t.Errorf("%s: config os/arch %s/%s, created %v", d.Platform, cf.OS, cf.Architecture, cf.Created)
		}
		if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/gateway"}) || len(c.Cmd) != 0 ||
			len(c.ExposedPorts) != 2 || c.WorkingDir != "/home/nonroot" || c.Labels["org.opencontainers.image.version"] != "v0.1.0" {
			t.Errorf("%s: config %+v", d.Platform, c)
		}
		for _, e := range []string{"GOTRACEBACK=single", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"} {
			if !slices.Contains(c.Env, e) {
				t.Errorf("%s: env %v lacks %s", d.Platform, c.Env, e)
			}
		}
		fs := files(t, img)
		bin := fs["usr/local/bin/gateway"]
		if bin == nil || bin.Mode != 0o755 || bin.Uid != 0 || bin.PAXRecords["body"] != "binary for "+d.Platform.String() {
			t.Errorf("%s: binary %+v", d.Platform, bin)
		}
		if h := fs["etc/passwd"]; h == nil || !strings.Contains(h.PAXRecords["body"], "nonroot:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd %+v", d.Platform, h)
		}
		if h := fs[CACertsPath]; h == nil || h.PAXRecords["body"] != testPEM {
			t.Errorf("%s: CA bundle %+v", d.Platform, h)
		}
		if h := fs["tmp"]; h == nil || h.Mode != 01777 {
			t.Errorf("%s: /tmp %+v", d.Platform, h)
		}
		if h := fs["home/nonroot"]; h == nil || h.Uid != NonrootUID {
			t.Errorf("%s: /home/nonroot %+v", d.Platform, h)
		}
	}
	// The same inputs, the same digest: a rebuild of a commit is the
	// same image.
	again, err := Index(ctx, testSpec(), ScratchBase([]byte(testPEM), created), fakeBinaries(t))
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := idx.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Fatalf("two builds of the same inputs: %s, %s", d1, d2)
	}
	if _, err := RootFS([]byte("not a bundle"), created); err == nil {
		t.Fatal("a CA bundle without a certificate was taken")
	}
}

// Push to a registry (go-containerregistry's in-memory one on loopback),
// then build on a base pulled from it: the release path when a registry
// is reachable.
func TestPushAndRemoteBase(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	host := u.Host // 127.0.0.1:port: go-containerregistry speaks plain HTTP to loopback
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A base index, as distroless publishes one: scratch plus RootFS.
	base := ScratchBase([]byte(testPEM), created)
	baseIdx, err := Index(ctx, Spec{Binary: "base", Created: created}, base, fakeBinaries(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Push(ctx, baseIdx, host+"/distroless/static:nonroot", 10*time.Second); err != nil {
		t.Fatal(err)
	}

	rb, err := RemoteBase(host+"/distroless/static:nonroot", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := Index(ctx, testSpec(), rb, fakeBinaries(t))
	if err != nil {
		t.Fatal(err)
	}
	ref := host + "/ellipsis-chat/ellipsis-gateway:v0.1.0"
	digest, err := Push(ctx, idx, ref, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	r, _ := name.ParseReference(ref)
	got, err := remote.Index(r, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := got.Digest(); d != digest {
		t.Fatalf("pulled index %s, pushed %s", d, digest)
	}
	im, _ := got.IndexManifest()
	if len(im.Manifests) != 2 {
		t.Fatalf("pulled index has %d manifests", len(im.Manifests))
	}
	for _, d := range im.Manifests {
		img, err := got.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, _ := img.Layers()
		// The base's two layers (RootFS, its stand-in binary), then ours.
		if len(layers) != 3 {
			t.Fatalf("%s: %d layers, want the base's 2 and the binary's", d.Platform, len(layers))
		}
		fs := files(t, img)
		if h := fs["usr/local/bin/gateway"]; h == nil || h.PAXRecords["body"] != "binary for "+d.Platform.String() {
			t.Fatalf("%s: binary %+v", d.Platform, h)
		}
		cf, _ := img.ConfigFile()
		if !slices.Contains(cf.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
			t.Fatalf("%s: the base's env is lost: %v", d.Platform, cf.Config.Env)
		}
	}

	missing, err := RemoteBase(host+"/no/such:image", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missing(ctx, amd64); err == nil {
		t.Fatal("a missing base image was pulled")
	}
}
