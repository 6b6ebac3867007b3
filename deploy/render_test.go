package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The kustomizations under k8s/: base is rendered and decoded too, but only
// the overlays are deployed.
const (
	baseDir = "k8s/base"
	devDir  = "k8s/overlays/dev"
	prodDir = "k8s/overlays/prod"
)

// overlays are the deployable kustomizations, by name (= skaffold profile).
var overlays = map[string]string{"dev": devDir, "prod": prodDir}

// Our two services: the Deployment, its container, the skaffold artifact
// image, and the service's directory in the repository.
type service struct {
	name       string // container name and cmd/<name>
	deployment string
	image      string
	dir        string // relative to the repository root
	public     bool   // has the public listener (ELLIPSIS_HTTP_ADDR)
	cfgService string // config.Config.Service, as its main sets it
}

var (
	gateway = service{name: "gateway", deployment: "ellipsis-gateway", image: "ellipsis-gateway", dir: "services/gateway", public: true, cfgService: config.ServiceGateway}
	worker  = service{name: "presence-worker", deployment: "ellipsis-presence-worker", image: "ellipsis-presence-worker", dir: "services/presence-worker", cfgService: config.ServiceWorker}

	services = []service{gateway, worker}
)

// repoRoot is the repository root: the parent of this module's directory
// (go test runs in the package directory).
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(wd)
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("repository root not found above %s: %v", wd, err)
	}
	return root
}

// rendered is one kustomization's output: the YAML of each object, and the
// objects decoded into their k8s.io/api types.
type rendered struct {
	dir  string
	yaml []byte // the whole stream, as `kustomize build` prints it
	objs []runtime.Object

	deployments  map[string]*appsv1.Deployment
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	accounts     map[string]*corev1.ServiceAccount
	hpas         map[string]*autoscalingv2.HorizontalPodAutoscaler
	pdbs         map[string]*policyv1.PodDisruptionBudget
	netpols      map[string]*networkingv1.NetworkPolicy
	ingresses    map[string]*networkingv1.Ingress // components/ingress
	httpRoutes   map[string]*gatewayv1.HTTPRoute  // components/gateway-api
	promRules    map[string]*monitoringv1.PrometheusRule
	podMonitors  map[string]*monitoringv1.PodMonitor
	kindsAndName []string // "Kind/name" of every object, in order
}

// strictDecoder knows exactly the kinds and versions the manifests may use;
// anything else (another kind, a deprecated version, an unknown or duplicate
// field) is an error.
var strictDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, autoscalingv2.AddToScheme,
		policyv1.AddToScheme, networkingv1.AddToScheme,
		monitoringv1.AddToScheme, // PrometheusRule, PodMonitor (deploy/monitoring)
		gatewayv1.Install,        // HTTPRoute (components/gateway-api)
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

var (
	renderMu    sync.Mutex
	renderCache = map[string]*rendered{}
)

// render runs kustomize (the Go API, as `kustomize build` does) on dir,
// relative to this module, and decodes every object strictly. Results are
// cached: the checks below share them.
func render(t testing.TB, dir string) *rendered {
	t.Helper()
	renderMu.Lock()
	defer renderMu.Unlock()
	if r, ok := renderCache[dir]; ok {
		return r
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	all, err := resMap.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := newRendered(dir, all)
	var errs []string
	for _, res := range resMap.Resources() {
		id := res.CurId()
		y, err := res.AsYAML()
		if err != nil {
			t.Fatalf("%s: %s: %v", dir, id, err)
		}
		obj, _, err := strictDecoder.Decode(y, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s %s: %v", id.Gvk, id.Name, err))
			continue
		}
		errs = append(errs, r.add(res.GetKind(), res.GetName(), res.GetNamespace(), obj)...)
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		t.Fatalf("kustomize build %s: objects that do not decode strictly into k8s.io/api types:\n  %s", dir, strings.Join(errs, "\n  "))
	}
	renderCache[dir] = r
	return r
}

// renderWith renders an overlay of dir (relative to this module) with the
// given components (directories relative to this module) added, as a user's
// own overlay on top of ours does (components: [...]). Cached like render.
func renderWith(t testing.TB, dir string, components ...string) *rendered {
	t.Helper()
	key := dir + " + " + strings.Join(components, " + ")
	renderMu.Lock()
	r, ok := renderCache[key]
	renderMu.Unlock()
	if ok {
		return r
	}
	tmp := t.TempDir()
	rel := func(p string) string { // kustomize takes no absolute roots
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := filepath.Rel(tmp, abs)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + rel(dir) + "\ncomponents:\n"
	for _, c := range components {
		k += "  - " + rel(c) + "\n"
	}
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	r = render(t, tmp)
	r.dir = key
	renderMu.Lock()
	renderCache[key] = r
	renderMu.Unlock()
	return r
}

// newRendered returns an empty render of dir whose stream is all.
func newRendered(dir string, all []byte) *rendered {
	return &rendered{
		dir:         dir,
		yaml:        all,
		deployments: map[string]*appsv1.Deployment{},
		services:    map[string]*corev1.Service{},
		configMaps:  map[string]*corev1.ConfigMap{},
		accounts:    map[string]*corev1.ServiceAccount{},
		hpas:        map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		pdbs:        map[string]*policyv1.PodDisruptionBudget{},
		netpols:     map[string]*networkingv1.NetworkPolicy{},
		ingresses:   map[string]*networkingv1.Ingress{},
		httpRoutes:  map[string]*gatewayv1.HTTPRoute{},
		promRules:   map[string]*monitoringv1.PrometheusRule{},
		podMonitors: map[string]*monitoringv1.PodMonitor{},
	}
}

// add files a decoded object of the given kind, name and namespace under
// its kind, and returns what is wrong with it: a second object of that kind
// and name, a namespace, a kind with no check here.
func (r *rendered) add(kind, name, ns string, obj runtime.Object) []string {
	var errs []string
	r.objs = append(r.objs, obj)
	key := kind + "/" + name
	for _, seen := range r.kindsAndName {
		if seen == key {
			errs = append(errs, "two objects named "+key)
		}
	}
	r.kindsAndName = append(r.kindsAndName, key)
	if ns != "" {
		errs = append(errs, key+": sets namespace "+ns+"; the manifests stay namespace-agnostic (skaffold/kubectl choose it)")
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		r.deployments[name] = o
	case *corev1.Service:
		r.services[name] = o
	case *corev1.ConfigMap:
		r.configMaps[name] = o
	case *corev1.ServiceAccount:
		r.accounts[name] = o
	case *autoscalingv2.HorizontalPodAutoscaler:
		r.hpas[name] = o
	case *policyv1.PodDisruptionBudget:
		r.pdbs[name] = o
	case *networkingv1.NetworkPolicy:
		r.netpols[name] = o
	case *networkingv1.Ingress:
		r.ingresses[name] = o
	case *gatewayv1.HTTPRoute:
		r.httpRoutes[name] = o
	case *monitoringv1.PrometheusRule:
		r.promRules[name] = o
	case *monitoringv1.PodMonitor:
		r.podMonitors[name] = o
	default:
		errs = append(errs, fmt.Sprintf("%s: kind %T has no check here; add one", key, obj))
	}
	return errs
}

// container returns the named container of the named Deployment.
func (r *rendered) container(t testing.TB, deployment, name string) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	d, ok := r.deployments[deployment]
	if !ok {
		t.Fatalf("%s: no Deployment %s", r.dir, deployment)
	}
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == name {
			return d, c
		}
	}
	t.Fatalf("%s: Deployment %s has no container %s", r.dir, deployment, name)
	return nil, nil
}

func TestEveryKustomizationRendersAndDecodesStrictly(t *testing.T) {
	for _, dir := range []string{baseDir, devDir, prodDir} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			r := render(t, dir)
			if len(r.objs) == 0 {
				t.Fatalf("%s renders no object", dir)
			}
			t.Logf("%s: %d objects: %s", dir, len(r.objs), strings.Join(r.kindsAndName, ", "))
		})
	}
}

// The strict decoder must really reject what a typo in a patch produces;
// otherwise the check above proves nothing.
func TestStrictDecoderRejectsUnknownFields(t *testing.T) {
	good := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  replicas: 1\n")
	if _, _, err := strictDecoder.Decode(good, nil, nil); err != nil {
		t.Fatalf("a valid Deployment fails: %v", err)
	}
	for name, bad := range map[string][]byte{
		"unknown field":     bytes.Replace(good, []byte("replicas: 1"), []byte("replica: 1"), 1),
		"duplicate field":   append(bytes.Clone(good), []byte("  replicas: 2\n")...),
		"unregistered kind": []byte("apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: x\n"),
		"removed version":   []byte("apiVersion: autoscaling/v2beta2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: x\n"),
	} {
		if _, _, err := strictDecoder.Decode(bad, nil, nil); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// The kustomizations use today's fields only: `patches:` rather than
// patchesStrategicMerge / patchesJson6902, `labels:` rather than
// commonLabels, `resources:` rather than bases (kustomize warns about these
// and `kustomize edit fix` rewrites them).
func TestKustomizationsUseNoDeprecatedFields(t *testing.T) {
	deprecated := []string{"patchesStrategicMerge", "patchesJson6902", "commonLabels", "bases", "vars", "imageTags", "helmChartInflationGenerator"}
	err := filepath.WalkDir("k8s", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var k map[string]any
		if err := yaml.Unmarshal(data, &k); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, field := range deprecated {
			if _, ok := k[field]; ok {
				t.Errorf("%s: deprecated field %s; use patches:, labels: or resources:", p, field)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
