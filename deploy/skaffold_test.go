package deploy

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The parts of skaffold.yaml the checks read. The whole file is validated
// against skaffold's own JSON schema first, so unknown fields are caught
// there, not here.
type skaffoldConfig struct {
	APIVersion  string                `json:"apiVersion"`
	Kind        string                `json:"kind"`
	Build       *skaffoldBuild        `json:"build"`
	Manifests   *skaffoldManifests    `json:"manifests"`
	Deploy      map[string]any        `json:"deploy"`
	PortForward []skaffoldPortForward `json:"portForward"`
	Profiles    []skaffoldProfile     `json:"profiles"`
}

type skaffoldBuild struct {
	Artifacts []skaffoldArtifact `json:"artifacts"`
}

type skaffoldArtifact struct {
	Image   string `json:"image"`
	Context string `json:"context"`
	Docker  *struct {
		Dockerfile string `json:"dockerfile"`
	} `json:"docker"`
}

type skaffoldManifests struct {
	RawYaml   []string `json:"rawYaml"`
	Kustomize *struct {
		Paths []string `json:"paths"`
	} `json:"kustomize"`
}

type skaffoldPortForward struct {
	ResourceType string             `json:"resourceType"`
	ResourceName string             `json:"resourceName"`
	Port         intstr.IntOrString `json:"port"`
	LocalPort    int                `json:"localPort"`
}

type skaffoldProfile struct {
	Name        string                `json:"name"`
	Build       *skaffoldBuild        `json:"build"`
	Manifests   *skaffoldManifests    `json:"manifests"`
	PortForward []skaffoldPortForward `json:"portForward"`
}

var skaffoldAPIVersion = regexp.MustCompile(`^skaffold/(v4beta\d+)$`)

// readSkaffold validates skaffold.yaml against the schema of its apiVersion
// (testdata/skaffold/) and returns it parsed.
func readSkaffold(t testing.TB) skaffoldConfig {
	t.Helper()
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "skaffold.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("\n---")) {
		t.Fatal("skaffold.yaml: one config document expected (the checks read only one)")
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("skaffold.yaml: %v", err)
	}
	var cfg skaffoldConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("skaffold.yaml: %v", err)
	}
	m := skaffoldAPIVersion.FindStringSubmatch(cfg.APIVersion)
	if m == nil || cfg.Kind != "Config" {
		t.Fatalf("skaffold.yaml: apiVersion %q kind %q, want skaffold/v4betaN Config (the current schema)", cfg.APIVersion, cfg.Kind)
	}
	schemaFile := filepath.Join("testdata", "skaffold", m[1]+".json")
	schemaData, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatalf("skaffold.yaml is %s but %s is missing (testdata/skaffold/README.md says where to get it): %v", cfg.APIVersion, schemaFile, err)
	}
	schemaDoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaData))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("skaffold.json", schemaDoc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("skaffold.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(inst); err != nil {
		t.Fatalf("skaffold.yaml does not match skaffold's %s schema:\n%v", cfg.APIVersion, err)
	}
	return cfg
}

// The schema check must really reject a misspelt field.
func TestSkaffoldSchemaRejectsUnknownFields(t *testing.T) {
	schemaData, err := os.ReadFile(filepath.Join("testdata", "skaffold", "v4beta13.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaData))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("skaffold.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("skaffold.json")
	if err != nil {
		t.Fatal(err)
	}
	for text, valid := range map[string]bool{
		`{"apiVersion":"skaffold/v4beta13","kind":"Config","build":{"artifacts":[{"image":"x","docker":{"dockerfile":"D"}}]}}`:      true,
		`{"apiVersion":"skaffold/v4beta13","kind":"Config","build":{"artifacts":[{"image":"x","docker":{"dockerFile":"D"}}]}}`:      false,
		`{"apiVersion":"skaffold/v4beta13","kind":"Config","portForward":[{"resourceType":"service","resourceName":"x","prot":1}]}`: false,
	} {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(inst); (err == nil) != valid {
			t.Errorf("%s: valid=%v, got %v", text, valid, err)
		}
	}
}

// skaffold.yaml: one artifact per service built from the repository root
// with its Dockerfile, the overlays as profiles (dev by default), port
// forwards to ports the gateway Service has.
func TestSkaffold(t *testing.T) {
	root := repoRoot(t)
	cfg := readSkaffold(t)

	images := checkSkaffoldArtifacts(t, root, "build", cfg.Build)
	want := []string{}
	for _, s := range services {
		want = append(want, s.image)
	}
	sort.Strings(want)
	if strings.Join(images, " ") != strings.Join(want, " ") {
		t.Errorf("skaffold.yaml builds %v, want one artifact per service %v", images, want)
	}
	if _, ok := cfg.Deploy["kubectl"]; !ok {
		t.Errorf("skaffold.yaml: deploy has no kubectl deployer for the kustomize manifests")
	}

	if got := skaffoldOverlay(t, root, "manifests", cfg.Manifests); got != "deploy/"+devDir {
		t.Errorf("skaffold.yaml: the default manifests are %s, want the dev overlay deploy/%s", got, devDir)
	}
	checkSkaffoldProfiles(t, root, cfg)
	checkOverlayImages(t, images)
	checkPortForwards(t, cfg)
}

// checkSkaffoldArtifacts checks that each artifact of b is a service's image
// built from the repository root with the service's Dockerfile, and returns
// the artifacts' images, sorted.
func checkSkaffoldArtifacts(t *testing.T, root, where string, b *skaffoldBuild) []string {
	t.Helper()
	if b == nil {
		return nil
	}
	var images []string
	for _, a := range b.Artifacts {
		images = append(images, a.Image)
		var svc *service
		for i := range services {
			if services[i].image == a.Image {
				svc = &services[i]
			}
		}
		if svc == nil {
			t.Errorf("%s: artifact %s is no service's image", where, a.Image)
			continue
		}
		if path.Clean(a.Context) != "." {
			t.Errorf("%s: artifact %s: context %q, want . (the repository root: the Go workspace's modules)", where, a.Image, a.Context)
		}
		if a.Docker == nil || path.Clean(a.Docker.Dockerfile) != svc.dir+"/Dockerfile" {
			t.Errorf("%s: artifact %s: want docker.dockerfile %s/Dockerfile", where, a.Image, svc.dir)
			continue
		}
		if _, err := os.Stat(filepath.Join(root, a.Context, a.Docker.Dockerfile)); err != nil {
			t.Errorf("%s: artifact %s: %v", where, a.Image, err)
		}
	}
	sort.Strings(images)
	return images
}

// skaffoldOverlay returns the one kustomize overlay m deploys, "" (and an
// error) if m is not exactly one existing kustomize path.
func skaffoldOverlay(t *testing.T, root, where string, m *skaffoldManifests) string {
	t.Helper()
	if m == nil || m.Kustomize == nil || len(m.Kustomize.Paths) != 1 || len(m.RawYaml) > 0 {
		t.Errorf("%s: want manifests.kustomize.paths with exactly one overlay", where)
		return ""
	}
	p := path.Clean(m.Kustomize.Paths[0])
	if _, err := os.Stat(filepath.Join(root, p, "kustomization.yaml")); err != nil {
		t.Errorf("%s: kustomize path %s: %v", where, p, err)
	}
	return p
}

// checkSkaffoldProfiles checks one profile per overlay, each deploying its
// overlay and building valid artifacts.
func checkSkaffoldProfiles(t *testing.T, root string, cfg skaffoldConfig) {
	t.Helper()
	profiles := map[string]bool{}
	for _, p := range cfg.Profiles {
		profiles[p.Name] = true
		where := "profile " + p.Name
		if p.Build != nil {
			checkSkaffoldArtifacts(t, root, where, p.Build)
		}
		dir, ok := overlays[p.Name]
		if !ok {
			t.Errorf("skaffold.yaml: %s has no overlay here to check", where)
			continue
		}
		if got := skaffoldOverlay(t, root, where, p.Manifests); got != "deploy/"+dir {
			t.Errorf("skaffold.yaml: %s deploys %s, want deploy/%s", where, got, dir)
		}
	}
	for name := range overlays {
		if !profiles[name] {
			t.Errorf("skaffold.yaml: no profile %s", name)
		}
	}
}

// checkOverlayImages checks that each overlay's containers of ours use
// exactly the artifacts' image names, so skaffold substitutes the images it
// built.
func checkOverlayImages(t *testing.T, images []string) {
	t.Helper()
	for name, dir := range overlays {
		r := render(t, dir)
		used := map[string]bool{}
		for _, d := range r.deployments {
			for _, c := range d.Spec.Template.Spec.Containers {
				if strings.HasPrefix(c.Image, "ellipsis-") || contains(images, c.Image) {
					used[c.Image] = true
					if !contains(images, c.Image) {
						t.Errorf("%s: Deployment %s uses image %s, which no skaffold artifact builds", name, d.Name, c.Image)
					}
				}
			}
		}
		for _, img := range images {
			if !used[img] {
				t.Errorf("%s: artifact %s is built but no Deployment uses it", name, img)
			}
		}
		for _, ec := range ellipsisContainers(t, r) {
			if ec.c.Image != ec.svc.image {
				t.Errorf("%s: %s runs image %s, want the artifact %s", name, ec.svc.name, ec.c.Image, ec.svc.image)
			}
		}
	}
}

// checkPortForwards checks that the port forwards (top level and per
// profile) reach the gateway's public and admin ports in the dev overlay.
func checkPortForwards(t *testing.T, cfg skaffoldConfig) {
	t.Helper()
	dev := render(t, devDir)
	forwarded := map[int32]bool{}
	checkForwards(t, dev, "portForward", cfg.PortForward, forwarded)
	for _, p := range cfg.Profiles {
		checkForwards(t, dev, "profile "+p.Name+" portForward", p.PortForward, forwarded)
	}
	for _, ec := range ellipsisContainers(t, dev) {
		if !ec.svc.public {
			continue
		}
		for _, addr := range []string{ec.cfg.HTTPAddr, ec.cfg.AdminAddr} {
			if p := portOf(t, "listen address", addr); !forwarded[p] {
				t.Errorf("skaffold.yaml: the gateway's port %d is not port-forwarded", p)
			}
		}
	}
}

// checkForwards checks that each of pfs forwards an existing port of a dev
// Service, and records in forwarded the gateway container ports they reach.
func checkForwards(t *testing.T, dev *rendered, where string, pfs []skaffoldPortForward, forwarded map[int32]bool) {
	t.Helper()
	for _, pf := range pfs {
		if pf.ResourceType != "service" {
			t.Errorf("%s: portForward to a %s; forward the Service", where, pf.ResourceType)
			continue
		}
		s, ok := dev.services[pf.ResourceName]
		if !ok {
			t.Errorf("%s: portForward to Service %s, which the dev overlay lacks", where, pf.ResourceName)
			continue
		}
		found := false
		for _, sp := range s.Spec.Ports {
			if (pf.Port.Type == intstr.Int && sp.Port == pf.Port.IntVal) || (pf.Port.Type == intstr.String && sp.Name == pf.Port.StrVal) {
				found = true
				if pf.ResourceName == gateway.deployment {
					_, c := dev.container(t, gateway.deployment, gateway.name)
					if target, ok := resolvePort(c, sp.TargetPort); ok {
						forwarded[target] = true
					}
				}
			}
		}
		if !found {
			t.Errorf("%s: portForward to %s port %s, which the Service lacks", where, pf.ResourceName, pf.Port.String())
		}
		if pf.LocalPort == 0 {
			t.Errorf("%s: portForward to %s port %s has no localPort", where, pf.ResourceName, pf.Port.String())
		}
	}
}
