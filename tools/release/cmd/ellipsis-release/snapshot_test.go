package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/ellipsis-chat/ellipsis/tools/release"
	"github.com/ellipsis-chat/ellipsis/tools/release/internal/checksum"
	"github.com/ellipsis-chat/ellipsis/tools/release/internal/image"
)

// repoRoot is the repository root, two levels above this module.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "services/presence-worker/go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	return root
}

func git(t *testing.T, root string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// The snapshot, end to end, as `make release-snapshot` runs it, kept to
// the presence-worker for linux on this machine's architecture for the
// test's time. The tool is built without -race (licence detection takes
// minutes under it) and run in a temporary dist twice: the artifacts'
// names, checksums, the archive's binary stamped with the version and
// revision, its SBOM with licences, the image (the same binary, the
// Dockerfile's configuration, the OCI labels); the second run gives the
// same bytes.
func TestSnapshot(t *testing.T) {
	root := repoRoot(t)
	tool := filepath.Join(t.TempDir(), "ellipsis-release")
	if out, err := exec.Command("go", "build", "-o", tool, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pem := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(pem, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644)
	run := func(dist string) release.Manifest {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, tool, "-root", root, "-dist", dist, "-snapshot", "-platforms", "linux/"+runtime.GOARCH,
			"-services", "presence-worker", "-ca-certs", pem)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ellipsis-release: %v\n%s", err, out)
		}
		var m release.Manifest
		data, err := os.ReadFile(filepath.Join(dist, release.ManifestName))
		if err != nil || json.Unmarshal(data, &m) != nil {
			t.Fatalf("%s: %v\n%s", release.ManifestName, err, data)
		}
		return m
	}
	version := git(t, root, "describe", "--tags", "--always", "--dirty") + "-snapshot"
	revision := git(t, root, "rev-parse", "HEAD")

	dist := filepath.Join(t.TempDir(), "dist")
	m := run(dist)
	if m.Version != version || m.Revision != revision || m.Base != "scratch" {
		t.Fatalf("manifest %+v, want version %s, revision %s", m, version, revision)
	}
	arch := runtime.GOARCH
	prefix := "ellipsis-presence-worker_" + version
	var names []string
	for _, a := range m.Artifacts {
		names = append(names, a.Name)
		if a.SHA256 == "" {
			t.Errorf("%s: no sha256 in %s", a.Name, release.ManifestName)
		}
	}
	want := []string{prefix + "_linux_" + arch + ".tar.gz", prefix + "_linux_" + arch + ".cdx.json", prefix + "_oci.tar"}
	if !slices.Equal(names, want) {
		t.Fatalf("artifacts %v, want %v", names, want)
	}
	checked, err := checksum.Verify(dist)
	if err != nil || len(checked) != 3 {
		t.Fatalf("SHA256SUMS: %v checked, %v", checked, err)
	}

	bin := checkArchive(t, filepath.Join(dist, want[0]), m.Created)
	checkBinary(t, bin, version, revision)
	checkSBOM(t, filepath.Join(dist, want[1]), version, m.Created)
	checkImage(t, filepath.Join(dist, want[2]), m.Artifacts[2], bin, version, revision)

	// The same commit again: the same files, so SHA256SUMS is the same.
	dist2 := filepath.Join(t.TempDir(), "dist")
	run(dist2)
	s1, _ := os.ReadFile(filepath.Join(dist, checksum.FileName))
	s2, _ := os.ReadFile(filepath.Join(dist2, checksum.FileName))
	if !bytes.Equal(s1, s2) {
		t.Fatalf("two snapshots of one commit differ:\n%s\n%s", s1, s2)
	}
}

// checkArchive returns the binary in the .tar.gz, checking its entries.
func checkArchive(t *testing.T, path string, created time.Time) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	got := map[string][]byte{}
	var order []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = b
		order = append(order, h.Name)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(created) {
			t.Errorf("%s: owner %d:%d, time %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
	}
	if !slices.Equal(order, []string{"presence-worker", "LICENSE", "README.md"}) {
		t.Fatalf("archive entries %v", order)
	}
	if !bytes.Contains(got["LICENSE"], []byte("Apache License")) {
		t.Fatal("LICENSE is not the project's")
	}
	return got["presence-worker"]
}

// checkBinary runs the binary's -version: the version and revision
// stamped, as docs/releasing.md says -version and ellipsis_build_info show.
func checkBinary(t *testing.T, bin []byte, version, revision string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "presence-worker")
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "version", "-m", p).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CGO_ENABLED=0") || !strings.Contains(string(out), "-trimpath=true") {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	if runtime.GOOS != "linux" {
		return // built for linux; run only where it can run
	}
	out, err = exec.Command(p, "-version").CombinedOutput()
	want := "presence-worker " + version + " (revision " + revision[:12] + ", go"
	if err != nil || !strings.HasPrefix(string(out), want) {
		t.Fatalf("-version: %q, %v; want prefix %q", out, err, want)
	}
}

func checkSBOM(t *testing.T, path, version string, created time.Time) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat, SpecVersion, SerialNumber string
		Metadata                             struct {
			Timestamp string
			Component struct {
				Name, Version string
				Licenses      []struct{ License struct{ ID string } }
			}
		}
		Components []struct {
			Name, Version, Purl string
			Licenses            []struct{ License struct{ ID string } }
			Evidence            struct {
				Licenses []struct{ License struct{ ID string } }
			}
		}
	}
	if err := json.Unmarshal(data, &bom); err != nil {
		t.Fatal(err)
	}
	mc := bom.Metadata.Component
	if bom.BOMFormat != "CycloneDX" || bom.SpecVersion != "1.6" || !strings.HasPrefix(bom.SerialNumber, "urn:uuid:") ||
		bom.Metadata.Timestamp != created.UTC().Format(time.RFC3339) || mc.Name != "github.com/ellipsis-chat/ellipsis/services/presence-worker" ||
		mc.Version != version || len(mc.Licenses) != 1 || mc.Licenses[0].License.ID != release.License {
		t.Fatalf("SBOM header: %+v %+v", bom.Metadata, bom)
	}
	if bytes.Contains(data, []byte("../")) || bytes.Contains(data, []byte("(devel)")) {
		t.Fatal("the SBOM names a local replacement (../shared, (devel)) instead of the module")
	}
	licence := map[string]string{}
	for _, c := range bom.Components {
		switch {
		case len(c.Licenses) > 0:
			licence[c.Name] = c.Licenses[0].License.ID
		case len(c.Evidence.Licenses) > 0:
			licence[c.Name] = c.Evidence.Licenses[0].License.ID
		default:
			licence[c.Name] = ""
		}
	}
	for name, want := range map[string]string{
		"github.com/redis/go-redis/v9":             "BSD-2-Clause",
		"github.com/nats-io/nats.go":               "Apache-2.0",
		"github.com/ellipsis-chat/ellipsis/shared": release.License,
		"std": "BSD-3-Clause",
	} {
		if got, ok := licence[name]; !ok || got != want {
			t.Errorf("SBOM component %s: licence %q (listed %v), want %s", name, got, ok, want)
		}
	}
}

func checkImage(t *testing.T, path string, a release.Artifact, bin []byte, version, revision string) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			os.MkdirAll(dst, 0o755)
			continue
		}
		b, _ := io.ReadAll(tr)
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, _ := top.IndexManifest()
	wantRef := "ghcr.io/ellipsis-chat/ellipsis-presence-worker:" + version
	if len(tm.Manifests) != 1 || tm.Manifests[0].Annotations[image.RefNameAnnotation] != wantRef || a.Ref != wantRef ||
		tm.Manifests[0].Digest.String() != a.Digest {
		t.Fatalf("index.json %+v, artifact %+v", tm.Manifests, a)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	if len(im.Manifests) != 1 || im.Manifests[0].Platform.String() != "linux/"+runtime.GOARCH {
		t.Fatalf("image index %+v", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	for k, v := range map[string]string{
		"org.opencontainers.image.source":   release.Source,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.licenses": release.License,
	} {
		if cf.Config.Labels[k] != v || im.Annotations[k] != v {
			t.Errorf("label %s: config %q, index annotation %q; want %q", k, cf.Config.Labels[k], im.Annotations[k], v)
		}
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/presence-worker"}) {
		t.Errorf("config %+v", cf.Config)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	fr := tar.NewReader(rc)
	for {
		h, err := fr.Next()
		if err == io.EOF {
			t.Fatal("the image has no /usr/local/bin/presence-worker")
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "usr/local/bin/presence-worker" {
			b, _ := io.ReadAll(fr)
			if !bytes.Equal(b, bin) {
				t.Fatal("the image's binary is not the archive's")
			}
			return
		}
	}
}
