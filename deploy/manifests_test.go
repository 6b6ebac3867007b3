package deploy

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// runtimeEnv are the variables a service may be given that are not Ellipsis
// settings: the Go runtime and crypto/x509 read them, in every Go binary.
var runtimeEnv = map[string]string{
	"GOMEMLIMIT":    "runtime: soft memory limit",
	"GOMAXPROCS":    "runtime: CPUs used",
	"GOGC":          "runtime: GC target",
	"GODEBUG":       "runtime and standard library switches",
	"GOTRACEBACK":   "runtime: crash output",
	"SSL_CERT_DIR":  "crypto/x509: extra CA directories",
	"SSL_CERT_FILE": "crypto/x509: CA bundle",
}

// secretPlaceholders stand in for values that come from a Secret when the
// settings are validated: plausible production values.
var secretPlaceholders = map[string]string{
	"ELLIPSIS_NATS_URL":   "tls://ellipsis:secret@nats-0.nats.invalid:4222,tls://ellipsis:secret@nats-1.nats.invalid:4222",
	"ELLIPSIS_REDIS_URL":  "rediss://:secret@redis.invalid:6379/0",
	"ELLIPSIS_JWT_SECRET": "secret",
}

// envVar is one variable as the container will see it.
type envVar struct {
	value  string // when known at render time
	known  bool
	source string // for messages
	secret *corev1.SecretKeySelector
}

// effectiveEnv resolves a container's environment as the kubelet does:
// envFrom first, then env, which wins. ConfigMaps must be in the render;
// Secrets are external (their values are unknown, their keys are named).
func effectiveEnv(t testing.TB, r *rendered, c *corev1.Container) map[string]envVar {
	t.Helper()
	env := map[string]envVar{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := r.configMaps[from.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: container %s: envFrom ConfigMap %q is not in the render", r.dir, c.Name, from.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = envVar{value: v, known: true, source: "ConfigMap " + cm.Name}
			}
		case from.SecretRef != nil:
			// Its keys are unknown here, so nothing could check that they
			// are settings: name each variable with secretKeyRef instead.
			t.Errorf("%s: container %s: envFrom Secret %q: use env[].valueFrom.secretKeyRef, so every variable is named", r.dir, c.Name, from.SecretRef.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = envVar{value: e.Value, known: true, source: "env value"}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := r.configMaps[ref.Name]
			v, has := "", false
			if ok {
				v, has = cm.Data[ref.Key]
			}
			if !has && (ref.Optional == nil || !*ref.Optional) {
				t.Errorf("%s: container %s: %s from ConfigMap %s key %s, which the render lacks", r.dir, c.Name, e.Name, ref.Name, ref.Key)
			}
			if has {
				env[e.Name] = envVar{value: v, known: true, source: "ConfigMap " + ref.Name}
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			env[e.Name] = envVar{source: "Secret " + ref.Name + " key " + ref.Key, secret: ref}
		default:
			env[e.Name] = envVar{source: "field reference"}
		}
	}
	return env
}

// ellipsisContainer is the container of one of our services in a render.
type ellipsisContainer struct {
	svc service
	dep *appsv1.Deployment
	c   *corev1.Container
	env map[string]envVar
	cfg config.Config
}

// ellipsisContainers returns each service's container with its environment
// and the configuration the service will load from it (config.Load over
// config.Default for that service, as its main does), failing if that is
// invalid.
func ellipsisContainers(t *testing.T, r *rendered) []ellipsisContainer {
	t.Helper()
	var out []ellipsisContainer
	for _, svc := range services {
		dep, c := r.container(t, svc.deployment, svc.name)
		env := effectiveEnv(t, r, c)
		lookup := func(name string) (string, bool) {
			v, ok := env[name]
			switch {
			case !ok:
				return "", false
			case v.known:
				return v.value, true
			case secretPlaceholders[name] != "":
				return secretPlaceholders[name], true
			default:
				return "placeholder", true
			}
		}
		base := config.Default()
		base.Service = svc.cfgService
		cfg, err := config.Load(nil, nil, lookup, base)
		if err != nil {
			t.Errorf("%s: %s would refuse to start with these settings:\n%v", r.dir, svc.name, err)
		}
		out = append(out, ellipsisContainer{svc: svc, dep: dep, c: c, env: env, cfg: cfg})
	}
	return out
}

func forEachOverlay(t *testing.T, f func(t *testing.T, r *rendered)) {
	names := make([]string, 0, len(overlays))
	for name := range overlays {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { f(t, render(t, overlays[name])) })
	}
}

// Every variable in the manifests is a setting the services read
// (config.EnvNames) or a Go runtime variable, and each overlay's settings
// pass the services' own validation.
func TestEnvIsSettingsTheServicesRead(t *testing.T) {
	settings := map[string]bool{}
	for _, name := range config.EnvNames() {
		settings[name] = true
	}
	if len(settings) < 20 || !settings["ELLIPSIS_NATS_URL"] || !settings["ELLIPSIS_SHUTDOWN_DRAIN"] || !settings["ELLIPSIS_LAME_DUCK"] {
		t.Fatalf("config.EnvNames() looks wrong: %v", config.EnvNames())
	}
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for _, ec := range ellipsisContainers(t, r) {
			names := make([]string, 0, len(ec.env))
			for name := range ec.env {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				v := ec.env[name]
				switch {
				case settings[name]:
				case runtimeEnv[name] != "":
				case strings.HasPrefix(name, "ELLIPSIS_"):
					t.Errorf("%s: %s gets %s (%s), which no service reads: config.EnvNames() has no such setting", r.dir, ec.svc.name, name, v.source)
				default:
					t.Errorf("%s: %s gets %s (%s), neither an Ellipsis setting nor a Go runtime variable", r.dir, ec.svc.name, name, v.source)
				}
			}
			// Backends must be named explicitly: the defaults point at
			// 127.0.0.1, which is nothing in a pod.
			for _, must := range []string{"ELLIPSIS_NATS_URL", "ELLIPSIS_REDIS_URL"} {
				if _, ok := ec.env[must]; !ok {
					t.Errorf("%s: %s has no %s: it would dial 127.0.0.1", r.dir, ec.svc.name, must)
				}
			}
			// Every ConfigMap key is a variable of some container, so each
			// must be a setting too (envFrom above covers it); a ConfigMap
			// nobody reads is dead configuration.
			if len(ec.c.EnvFrom) == 0 {
				t.Errorf("%s: %s takes no settings from the ConfigMap", r.dir, ec.svc.name)
			}
		}
	})
}

// The gateway's id must stay random per process: a restarted container keeps
// its pod name, and reusing "<id>:<n>" conn ids would make the new
// connections' commands look stale next to the old ones' seq in Redis.
func TestGatewayIDIsNotThePodName(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for _, ec := range ellipsisContainers(t, r) {
			if v, ok := ec.env["ELLIPSIS_GATEWAY_ID"]; ok {
				t.Errorf("%s: %s sets ELLIPSIS_GATEWAY_ID (%s); leave it unset (random per process)", r.dir, ec.svc.name, v.source)
			}
		}
	})
}

func portOf(t testing.TB, what, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 {
		t.Fatalf("%s %q: needs a fixed port in a pod", what, addr)
	}
	return int32(n)
}

// resolvePort turns a probe's or Service's port (number or name) into the
// container's port number.
func resolvePort(c *corev1.Container, p intstr.IntOrString) (int32, bool) {
	if p.Type == intstr.Int {
		return p.IntVal, true
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// Probes, container ports and the metrics annotations point at ports the
// binaries listen on (their configuration) and at paths they register.
func TestProbesAndPortsAreServed(t *testing.T) {
	root := repoRoot(t)
	routes := map[string][]route{}
	for _, svc := range services {
		routes[svc.name] = sourceRoutes(t, root, svc)
		for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
			if !serves(routes[svc.name], p) {
				t.Errorf("%s: no GET %s route registered in the source (%v)", svc.name, p, routes[svc.name])
			}
		}
	}
	if !serves(routes[gateway.name], "/v1/ws") {
		t.Errorf("gateway: no GET /v1/ws route registered in the source")
	}
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for _, ec := range ellipsisContainers(t, r) {
			where := r.dir + ": " + ec.svc.name
			admin := portOf(t, "ELLIPSIS_ADMIN_ADDR", ec.cfg.AdminAddr)
			want := map[string]int32{"admin": admin}
			if ec.svc.public {
				want["http"] = portOf(t, "ELLIPSIS_HTTP_ADDR", ec.cfg.HTTPAddr)
			}
			got := map[string]int32{}
			for _, cp := range ec.c.Ports {
				got[cp.Name] = cp.ContainerPort
				if cp.Protocol != "" && cp.Protocol != corev1.ProtocolTCP {
					t.Errorf("%s: port %s is %s, not TCP", where, cp.Name, cp.Protocol)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: container ports %v, but the settings listen on %v", where, got, want)
			}
			probes := map[string]*corev1.Probe{"liveness": ec.c.LivenessProbe, "readiness": ec.c.ReadinessProbe}
			wantPath := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}
			for kind, p := range probes {
				if p == nil || p.HTTPGet == nil {
					t.Errorf("%s: no HTTP %s probe", where, kind)
					continue
				}
				if p.HTTPGet.Path != wantPath[kind] {
					t.Errorf("%s: %s probe on %s, want %s (docs/protocol.md, Admin listener: liveness is the process, readiness its backends)", where, kind, p.HTTPGet.Path, wantPath[kind])
				}
				if !serves(routes[ec.svc.name], p.HTTPGet.Path) {
					t.Errorf("%s: %s probe path %s is not a route of the binary", where, kind, p.HTTPGet.Path)
				}
				if port, ok := resolvePort(ec.c, p.HTTPGet.Port); !ok || port != admin {
					t.Errorf("%s: %s probe on port %s, not the admin port %d", where, kind, p.HTTPGet.Port.String(), admin)
				}
				if p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != corev1.URISchemeHTTP {
					t.Errorf("%s: %s probe scheme %s; the admin listener is plain HTTP", where, kind, p.HTTPGet.Scheme)
				}
			}
			if ec.c.StartupProbe != nil && ec.c.StartupProbe.HTTPGet != nil && ec.c.StartupProbe.HTTPGet.Path != "/healthz" {
				t.Errorf("%s: startup probe on %s; use /healthz", where, ec.c.StartupProbe.HTTPGet.Path)
			}
			ann := ec.dep.Spec.Template.Annotations
			if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(int(admin)) || ann["prometheus.io/path"] != "/metrics" {
				t.Errorf("%s: Prometheus annotations %v do not point at :%d/metrics", where, ann, admin)
			}
		}
	})
}

func TestSecurityContexts(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for name, d := range r.deployments {
			pod := d.Spec.Template.Spec
			where := r.dir + ": Deployment " + name
			if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
				t.Errorf("%s: pod securityContext.runAsNonRoot is not true", where)
			}
			if pod.SecurityContext == nil || pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser == 0 {
				t.Errorf("%s: pod securityContext.runAsUser is not a non-zero uid", where)
			}
			if pod.SecurityContext == nil || pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: no RuntimeDefault seccomp profile", where)
			}
			if pod.HostNetwork || pod.HostPID || pod.HostIPC {
				t.Errorf("%s: uses the host's namespaces", where)
			}
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Errorf("%s: mounts a service account token; nothing here calls the Kubernetes API", where)
			}
			if sa := pod.ServiceAccountName; sa == "" || sa == "default" {
				t.Errorf("%s: runs as the default ServiceAccount; give it its own", where)
			} else if _, ok := r.accounts[sa]; !ok {
				t.Errorf("%s: ServiceAccount %s is not in the render", where, sa)
			}
			for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
				sc := c.SecurityContext
				cw := where + " container " + c.Name
				switch {
				case sc == nil:
					t.Errorf("%s: no securityContext", cw)
					continue
				case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
					t.Errorf("%s: root filesystem is not read-only", cw)
				case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
					t.Errorf("%s: allowPrivilegeEscalation is not false", cw)
				case sc.Privileged != nil && *sc.Privileged:
					t.Errorf("%s: privileged", cw)
				case sc.Capabilities == nil || !contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
					t.Errorf("%s: capabilities must drop ALL and add none", cw)
				}
			}
		}
	})
}

func TestResourcesAreBounded(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for name, d := range r.deployments {
			for _, c := range d.Spec.Template.Spec.Containers {
				where := fmt.Sprintf("%s: Deployment %s container %s", r.dir, name, c.Name)
				for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					req, okReq := c.Resources.Requests[res]
					lim, okLim := c.Resources.Limits[res]
					if !okReq || !okLim {
						t.Errorf("%s: %s needs both a request and a limit", where, res)
						continue
					}
					if req.Cmp(lim) > 0 {
						t.Errorf("%s: %s request %s above its limit %s", where, res, req.String(), lim.String())
					}
				}
			}
		}
		for _, ec := range ellipsisContainers(t, r) {
			v, ok := ec.env["GOMEMLIMIT"]
			if !ok {
				continue
			}
			lim := ec.c.Resources.Limits[corev1.ResourceMemory]
			soft, err := parseGoMemLimit(v.value)
			if !v.known || err != nil {
				t.Errorf("%s: %s: GOMEMLIMIT %q: %v", r.dir, ec.svc.name, v.value, err)
				continue
			}
			if soft >= lim.Value() || soft < lim.Value()/2 {
				t.Errorf("%s: %s: GOMEMLIMIT %s should be a little under the memory limit %s", r.dir, ec.svc.name, v.value, lim.String())
			}
		}
	})
}

// parseGoMemLimit reads GOMEMLIMIT as the runtime does: bytes, or a number
// with B, KiB, MiB, GiB or TiB.
func parseGoMemLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * u.mult, err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// A gateway pod must outlive its preStop delay plus its lame duck (after
// SIGTERM: /readyz 503, connections still served) plus the drain window
// over which it closes its clients, with room for clearing typing state and
// draining NATS; its lame duck must be on (a balancer polling /readyz must
// see it fail before clients are closed); nothing may need a shell (the
// images have none).
func TestShutdownFitsTheGracePeriod(t *testing.T) {
	const margin = 10 * time.Second // state clearing, NATS drain, exit
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for _, ec := range ellipsisContainers(t, r) {
			where := r.dir + ": " + ec.svc.name
			pod := ec.dep.Spec.Template.Spec
			grace := 30 * time.Second
			if pod.TerminationGracePeriodSeconds != nil {
				grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
			}
			var preStop time.Duration
			if lc := ec.c.Lifecycle; lc != nil {
				for _, h := range []*corev1.LifecycleHandler{lc.PostStart, lc.PreStop} {
					if h != nil && h.Exec != nil {
						t.Errorf("%s: an exec lifecycle hook; the distroless image has no shell or sleep binary: use the sleep action", where)
					}
				}
				if lc.PreStop != nil && lc.PreStop.Sleep != nil {
					preStop = time.Duration(lc.PreStop.Sleep.Seconds) * time.Second
				}
			}
			for _, p := range []*corev1.Probe{ec.c.LivenessProbe, ec.c.ReadinessProbe, ec.c.StartupProbe} {
				if p != nil && p.Exec != nil {
					t.Errorf("%s: an exec probe; the image has no shell", where)
				}
			}
			need := preStop + margin
			if ec.svc.public {
				if preStop < 3*time.Second {
					t.Errorf("%s: preStop sleep %s; endpoints and load balancers need a few seconds to drop the pod before it stops accepting", where, preStop)
				}
				if ec.cfg.LameDuck < time.Second {
					t.Errorf("%s: ELLIPSIS_LAME_DUCK %s; load balancers polling /readyz need at least a second to see the 503 before clients are closed", where, ec.cfg.LameDuck)
				}
				need += ec.cfg.LameDuck + ec.cfg.ShutdownDrain
			}
			if grace < need {
				t.Errorf("%s: terminationGracePeriodSeconds %s < preStop %s + lame duck %s + drain %s + %s margin", where, grace, preStop, ec.cfg.LameDuck, ec.cfg.ShutdownDrain, margin)
			}
		}
	})
}

func TestTopologySpread(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for _, ec := range ellipsisContainers(t, r) {
			pod := ec.dep.Spec.Template
			keys := map[string]bool{}
			for _, tsc := range pod.Spec.TopologySpreadConstraints {
				sel, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector)
				if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
					t.Errorf("%s: %s: spread over %s does not select its own pods", r.dir, ec.svc.name, tsc.TopologyKey)
				}
				keys[tsc.TopologyKey] = true
			}
			for _, k := range []string{"topology.kubernetes.io/zone", "kubernetes.io/hostname"} {
				if !keys[k] {
					t.Errorf("%s: %s: no topology spread over %s", r.dir, ec.svc.name, k)
				}
			}
		}
	})
}

// Selectors select what they mean to, references resolve, and each service
// has its autoscaler and disruption budget.
func TestSelectorsAndReferences(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		checkDeploymentSelectors(t, r)
		checkServiceSelectors(t, r)
		for _, ec := range ellipsisContainers(t, r) {
			where := r.dir + ": " + ec.svc.name
			hpas := checkHPAs(t, r, ec, where)
			pdbs := checkPDBs(t, r, ec, where)
			if hpas != 1 || pdbs != 1 {
				t.Errorf("%s: %d HorizontalPodAutoscalers and %d PodDisruptionBudgets, want one each", where, hpas, pdbs)
			}
			if s := ec.dep.Spec.Strategy; s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable == nil || s.RollingUpdate.MaxUnavailable.String() != "0" {
				t.Errorf("%s: a rolling update must never go below the current count (maxUnavailable: 0)", where)
			}
		}
		if gw, ok := r.services[gateway.deployment]; !ok || gw.Spec.Type == corev1.ServiceTypeNodePort {
			t.Errorf("%s: no ClusterIP Service %s for the gateway", r.dir, gateway.deployment)
		}
	})
}

// podsOf lists the Deployments of r whose pods sel matches, sorted; none
// for an empty selector.
func (r *rendered) podsOf(sel labels.Selector) []string {
	var out []string
	for name, d := range r.deployments {
		if !sel.Empty() && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// checkDeploymentSelectors checks that each Deployment's selector matches
// its own pod template and no other Deployment's.
func checkDeploymentSelectors(t *testing.T, r *rendered) {
	t.Helper()
	for name, d := range r.deployments {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: Deployment %s: selector does not match its own pod template", r.dir, name)
		}
		if got := r.podsOf(sel); len(got) != 1 {
			t.Errorf("%s: Deployment %s: selector also matches %v", r.dir, name, got)
		}
	}
}

// checkServiceSelectors checks that each Service selects exactly one
// Deployment and that each of its target ports is a port of that
// Deployment's containers.
func checkServiceSelectors(t *testing.T, r *rendered) {
	t.Helper()
	for name, s := range r.services {
		got := r.podsOf(labels.SelectorFromSet(s.Spec.Selector))
		if len(got) != 1 {
			t.Errorf("%s: Service %s selects the pods of %v, want exactly one Deployment", r.dir, name, got)
			continue
		}
		d := r.deployments[got[0]]
		for _, sp := range s.Spec.Ports {
			found := false
			for i := range d.Spec.Template.Spec.Containers {
				if _, ok := resolvePort(&d.Spec.Template.Spec.Containers[i], sp.TargetPort); ok {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: Service %s port %s targets %s, which no container of %s has", r.dir, name, sp.Name, sp.TargetPort.String(), got[0])
			}
		}
	}
}

// checkHPAs checks every HorizontalPodAutoscaler's target and, for those
// that scale ec's Deployment, their bounds and metrics; it returns how many
// scale ec's Deployment.
func checkHPAs(t *testing.T, r *rendered, ec ellipsisContainer, where string) int {
	t.Helper()
	var hpas int
	for name, h := range r.hpas {
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" {
			t.Errorf("%s: HPA %s scales %s %s", r.dir, name, ref.APIVersion, ref.Kind)
		}
		if _, ok := r.deployments[ref.Name]; !ok {
			t.Errorf("%s: HPA %s scales Deployment %s, which is not in the render", r.dir, name, ref.Name)
		}
		if ref.Name != ec.dep.Name {
			continue
		}
		hpas++
		minR := int32(1)
		if h.Spec.MinReplicas != nil {
			minR = *h.Spec.MinReplicas
		}
		if minR < 1 || minR > h.Spec.MaxReplicas {
			t.Errorf("%s: HPA %s: minReplicas %d, maxReplicas %d", where, name, minR, h.Spec.MaxReplicas)
		}
		if len(h.Spec.Metrics) == 0 {
			t.Errorf("%s: HPA %s has no metric", where, name)
		}
		if ec.dep.Spec.Replicas != nil {
			t.Errorf("%s: Deployment sets replicas while HPA %s owns the count; every apply would reset it", where, name)
		}
		for _, m := range h.Spec.Metrics {
			if m.Resource != nil {
				if _, ok := ec.c.Resources.Requests[m.Resource.Name]; !ok {
					t.Errorf("%s: HPA %s scales on %s utilisation, but the container requests no %s", where, name, m.Resource.Name, m.Resource.Name)
				}
			}
		}
	}
	return hpas
}

// checkPDBs checks that every PodDisruptionBudget selects one Deployment
// and that those for ec's Deployment let a drain through; it returns how
// many select ec's Deployment.
func checkPDBs(t *testing.T, r *rendered, ec ellipsisContainer, where string) int {
	t.Helper()
	var pdbs int
	for name, p := range r.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil {
			t.Errorf("%s: PDB %s: %v", r.dir, name, err)
			continue
		}
		got := r.podsOf(sel)
		if len(got) != 1 {
			t.Errorf("%s: PDB %s selects the pods of %v, want exactly one Deployment", r.dir, name, got)
		}
		if !contains(got, ec.dep.Name) {
			continue
		}
		pdbs++
		// It must let a drain through even at the autoscaler's
		// minimum, or node maintenance blocks forever.
		if p.Spec.MaxUnavailable == nil || p.Spec.MinAvailable != nil {
			t.Errorf("%s: PDB %s: use maxUnavailable (a minAvailable can block every eviction at minReplicas)", where, name)
		} else if v, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MaxUnavailable, 1, true); err != nil || v < 1 {
			t.Errorf("%s: PDB %s: maxUnavailable %s allows no eviction", where, name, p.Spec.MaxUnavailable.String())
		}
	}
	return pdbs
}

// The dev overlay's Redis keeps nothing on disk and caps its memory; both
// backends come from official images with a pinned tag.
func TestDevBackends(t *testing.T) {
	r := render(t, devDir)
	_, redis := r.container(t, "ellipsis-redis", "redis")
	args := strings.Join(redis.Args, "\x00")
	for _, want := range []string{"--save\x00\x00", "--appendonly\x00no", "--maxmemory-policy\x00volatile-ttl"} {
		if !strings.Contains(args, want) {
			t.Errorf("dev Redis args %q lack %q", redis.Args, strings.ReplaceAll(want, "\x00", " "))
		}
	}
	for _, d := range r.deployments {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.PersistentVolumeClaim != nil || v.HostPath != nil {
				t.Errorf("dev %s: volume %s persists data; typing state is ephemeral", d.Name, v.Name)
			}
		}
	}
	_, nats := r.container(t, "ellipsis-nats", "nats")
	for _, c := range []*corev1.Container{redis, nats} {
		repo, tag, ok := strings.Cut(c.Image, ":")
		if !ok || tag == "" || tag == "latest" || strings.Contains(repo, "/") {
			t.Errorf("dev %s: image %q: want an official Docker Hub image with a pinned tag", c.Name, c.Image)
		}
	}
}

// The prod overlay reads its backends from a Secret that is created on the
// cluster, never committed; docs/deploy.md must name every key it reads.
func TestProdSecretIsDocumented(t *testing.T) {
	r := render(t, prodDir)
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]bool{}
	for _, d := range r.deployments {
		pod := d.Spec.Template.Spec
		for _, c := range pod.Containers {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					refs[e.ValueFrom.SecretKeyRef.Name] = true
					refs[e.ValueFrom.SecretKeyRef.Key] = true
				}
			}
		}
		for _, v := range pod.Volumes {
			if v.Secret != nil {
				refs[v.Secret.SecretName] = true
				for _, it := range v.Secret.Items {
					refs[it.Key] = true
				}
			}
		}
	}
	if len(refs) == 0 {
		t.Fatal("prod reads no Secret: where do the backends' credentials come from?")
	}
	for ref := range refs {
		if !strings.Contains(string(doc), "`"+ref+"`") {
			t.Errorf("docs/deploy.md does not mention `%s`, which the prod overlay reads from a Secret", ref)
		}
	}
	for name := range r.configMaps {
		if strings.Contains(strings.ToLower(name), "secret") {
			t.Errorf("prod: ConfigMap %s looks like it holds secrets", name)
		}
	}
}
