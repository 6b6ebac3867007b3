package deploy

import (
	"bytes"
	"context"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// These tests run the real CLIs on the real files. kustomize always runs:
// from PATH when it is installed, else as `go tool kustomize`, the version
// pinned by this module's go.mod (built once, then cached). skaffold runs only
// when it is on PATH (building it from source takes about 11 minutes on CI's
// machine, too long for CI: docs/deploy.md). The Go-API checks in the other
// files run either way; these add the tools' own parsing on top.

// objectsByKey splits a multi-document YAML stream into objects keyed
// "Kind/name".
func objectsByKey(t testing.TB, what string, stream []byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range bytes.Split(stream, []byte("\n---")) {
		doc = bytes.TrimPrefix(bytes.TrimSpace(doc), []byte("---"))
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		if obj == nil {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		out[obj["kind"].(string)+"/"+meta["name"].(string)] = obj
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func run(t *testing.T, dir string, timeout time.Duration, name string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SKAFFOLD_UPDATE_CHECK=false", "SKAFFOLD_INTERACTIVE=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	t.Logf("%s %s: %d bytes in %s", filepath.Base(name), strings.Join(args, " "), len(out), time.Since(start).Round(time.Millisecond))
	return out
}

func TestKustomizeCLIRendersTheSame(t *testing.T) {
	kustomize := []string{}
	if p, err := exec.LookPath("kustomize"); err == nil {
		kustomize = []string{p}
	} else {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(build.Default.GOROOT, "bin", "go")
		}
		kustomize = []string{goBin, "tool", "kustomize"}
		t.Logf("kustomize is not on PATH: running `go tool kustomize` (go.mod's version)")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	version := run(t, wd, 5*time.Minute, kustomize[0], append(kustomize[1:], "version")...)
	t.Logf("kustomize version: %s", bytes.TrimSpace(version))
	for _, dir := range []string{baseDir, devDir, prodDir} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			out := run(t, wd, 5*time.Minute, kustomize[0], append(kustomize[1:], "build", dir)...)
			cli := objectsByKey(t, "kustomize build "+dir, out)
			api := objectsByKey(t, "krusty "+dir, render(t, dir).yaml)
			if !reflect.DeepEqual(keys(cli), keys(api)) {
				t.Fatalf("kustomize build %s gives %v, the Go API %v", dir, keys(cli), keys(api))
			}
			for k, obj := range cli {
				if !reflect.DeepEqual(obj, api[k]) {
					a, _ := yaml.Marshal(obj)
					b, _ := yaml.Marshal(api[k])
					t.Errorf("kustomize build %s: %s differs from the Go API's:\n--- CLI\n%s\n--- API\n%s", dir, k, a, b)
				}
			}
		})
	}
}

func TestSkaffoldCLI(t *testing.T) {
	skaffold, err := exec.LookPath("skaffold")
	if err != nil {
		t.Skip("skaffold is not on PATH: the skaffold CLI check was NOT run. The schema, path, image and port-forward checks of TestSkaffold ran without it. docs/deploy.md says how to build skaffold to run this one.")
	}
	root := repoRoot(t)
	for _, profile := range []string{"", "dev", "prod"} {
		name := profile
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			args := []string{}
			if profile != "" {
				args = append(args, "--profile="+profile)
			}
			// The effective config after profiles: skaffold's own parsing
			// and validation of skaffold.yaml.
			diag := run(t, root, 2*time.Minute, skaffold, append([]string{"diagnose", "--yaml-only"}, args...)...)
			if !bytes.Contains(diag, []byte("deploy/k8s/overlays/")) {
				t.Errorf("skaffold diagnose: no overlay in the effective config:\n%s", diag)
			}
			// Render offline with a fixed tag: nothing is built or pushed,
			// and every image of ours must come out with that tag, which
			// proves the artifacts' names match the manifests.
			out := run(t, root, 2*time.Minute, skaffold, append([]string{"render", "--offline=true", "--digest-source=tag", "--tag=cli-check"}, args...)...)
			overlay := overlays["dev"]
			if profile != "" {
				overlay = overlays[profile]
			}
			got := objectsByKey(t, "skaffold render", out)
			want := objectsByKey(t, "krusty", render(t, overlay).yaml)
			if !reflect.DeepEqual(keys(got), keys(want)) {
				t.Fatalf("skaffold render -p %s gives %v, kustomize %v", name, keys(got), keys(want))
			}
			for _, svc := range services {
				d := got["Deployment/"+svc.deployment]
				y, _ := yaml.Marshal(d)
				if !bytes.Contains(y, []byte("image: "+svc.image+":cli-check")) {
					t.Errorf("skaffold render -p %s: %s does not run %s:cli-check; skaffold did not substitute its artifact", name, svc.deployment, svc.image)
				}
			}
		})
	}
}
