package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// The opt-in components (docs/deploy.md, "Cluster entry points" and
// "Monitoring"): each one is added to the prod overlay the way a user's
// own overlay does, and the result is rendered and decoded strictly (the
// Ingress into k8s.io/api networking/v1, the HTTPRoute into
// sigs.k8s.io/gateway-api v1).
const (
	ingressComponent  = "k8s/components/ingress"
	gatewayAPIComp    = "k8s/components/gateway-api"
	sentinelComponent = "k8s/components/redis-sentinel"
	natsCredsComp     = "k8s/components/nats-creds"
)

// optInComponents are every component a production overlay may add.
var optInComponents = []string{monitoringDir, ingressComponent, gatewayAPIComp, sentinelComponent, natsCredsComp}

// Every directory under k8s/components is listed above (so each is
// rendered here), and prod renders with each one alone and with all of
// them together.
func TestEveryComponentRendersWithProd(t *testing.T) {
	entries, err := os.ReadDir("k8s/components")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !contains(optInComponents, "k8s/components/"+e.Name()) {
			t.Errorf("k8s/components/%s is not in optInComponents: add it, and a test of what it renders", e.Name())
		}
	}
	for _, c := range optInComponents {
		t.Run(filepath.Base(c), func(t *testing.T) {
			r := renderWith(t, prodDir, c)
			t.Logf("%s: %d objects", r.dir, len(r.objs))
		})
	}
	t.Run("all", func(t *testing.T) {
		r := renderWith(t, prodDir, optInComponents...)
		sort.Strings(r.kindsAndName)
		t.Logf("%s: %s", r.dir, strings.Join(r.kindsAndName, ", "))
	})
}

// The prod overlay alone needs nothing beyond the built-in kinds: no
// prometheus-operator CRDs (monitoring is opt-in), no Ingress controller,
// no Gateway API CRDs, so `kubectl apply -k deploy/k8s/overlays/prod`
// works on any cluster.
func TestProdNeedsNoCRDs(t *testing.T) {
	r := render(t, prodDir)
	if n := len(r.promRules) + len(r.podMonitors) + len(r.httpRoutes) + len(r.ingresses); n != 0 {
		t.Errorf("%s renders %d PrometheusRule/PodMonitor/HTTPRoute/Ingress objects; they belong in opt-in components", prodDir, n)
	}
}

// checkPublicBackend checks that a route's backend, the Service named svc
// at port (a number or a name), reaches the gateway's public listener
// (ELLIPSIS_HTTP_ADDR) and not the admin one.
func checkPublicBackend(t *testing.T, r *rendered, what, svc string, port intstr.IntOrString) {
	t.Helper()
	s, ok := r.services[svc]
	if !ok {
		t.Errorf("%s: backend Service %s is not rendered", what, svc)
		return
	}
	var sp *corev1.ServicePort
	for i := range s.Spec.Ports {
		p := &s.Spec.Ports[i]
		if (port.Type == intstr.Int && p.Port == port.IntVal) || (port.Type == intstr.String && p.Name == port.StrVal) {
			sp = p
		}
	}
	if sp == nil {
		t.Errorf("%s: Service %s has no port %s", what, svc, port.String())
		return
	}
	for _, ec := range ellipsisContainers(t, r) {
		if ec.svc != gateway {
			continue
		}
		target, ok := resolvePort(ec.c, sp.TargetPort)
		if want := portOf(t, "ELLIPSIS_HTTP_ADDR", ec.cfg.HTTPAddr); !ok || target != want {
			t.Errorf("%s: Service %s port %s targets container port %d, want the public listener %d (never the admin port)", what, svc, port.String(), target, want)
		}
	}
}

// pingInterval is how often the rendered gateway pings each connection:
// 9/10 of ELLIPSIS_PONG_WAIT (docs/protocol.md, "Timing").
func pingInterval(t *testing.T, r *rendered) time.Duration {
	t.Helper()
	for _, ec := range ellipsisContainers(t, r) {
		if ec.svc == gateway {
			return ec.cfg.PongWait * 9 / 10
		}
	}
	t.Fatal("no gateway container")
	return 0
}

// The Ingress routes every public path (the WebSocket /v1/ws included) of
// one host to the gateway's public port, with TLS, and its proxy timeouts
// outlast the silence between two pings.
func TestIngressComponent(t *testing.T) {
	r := renderWith(t, prodDir, ingressComponent)
	ing, ok := r.ingresses["ellipsis-gateway"]
	if !ok || len(r.ingresses) != 1 {
		t.Fatalf("%s: Ingresses %v, want ellipsis-gateway", r.dir, r.kindsAndName)
	}
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName == "" {
		t.Error("Ingress ellipsis-gateway: no ingressClassName")
	}
	ping := pingInterval(t, r)
	for _, a := range []string{"nginx.ingress.kubernetes.io/proxy-read-timeout", "nginx.ingress.kubernetes.io/proxy-send-timeout"} {
		s, err := strconv.Atoi(ing.Annotations[a])
		if err != nil || time.Duration(s)*time.Second <= ping {
			t.Errorf("Ingress ellipsis-gateway: %s = %q, want whole seconds above the ping interval %v (9/10 of ELLIPSIS_PONG_WAIT)", a, ing.Annotations[a], ping)
		}
	}
	if len(ing.Spec.Rules) == 0 {
		t.Fatal("Ingress ellipsis-gateway: no rules")
	}
	tlsHosts := map[string]bool{}
	for _, tls := range ing.Spec.TLS {
		if tls.SecretName == "" {
			t.Error("Ingress ellipsis-gateway: a TLS entry without secretName")
		}
		for _, h := range tls.Hosts {
			tlsHosts[h] = true
		}
	}
	for _, rule := range ing.Spec.Rules {
		if !tlsHosts[rule.Host] {
			t.Errorf("Ingress ellipsis-gateway: host %q has no TLS: browsers on https pages need wss://", rule.Host)
		}
		if rule.HTTP == nil {
			t.Fatalf("Ingress ellipsis-gateway: host %q has no http paths", rule.Host)
		}
		ws := false
		for _, p := range rule.HTTP.Paths {
			if p.Backend.Service == nil {
				t.Errorf("Ingress ellipsis-gateway: path %s has no Service backend", p.Path)
				continue
			}
			port := intstr.FromString(p.Backend.Service.Port.Name)
			if p.Backend.Service.Port.Name == "" {
				port = intstr.FromInt32(p.Backend.Service.Port.Number)
			}
			checkPublicBackend(t, r, "Ingress ellipsis-gateway path "+p.Path, p.Backend.Service.Name, port)
			pt := ""
			if p.PathType != nil {
				pt = string(*p.PathType)
			}
			prefix := strings.TrimSuffix(p.Path, "/") + "/"
			ws = ws || p.Path == "/v1/ws" || (pt == "Prefix" && strings.HasPrefix("/v1/ws", prefix))
		}
		if !ws {
			t.Errorf("Ingress ellipsis-gateway: host %q does not route /v1/ws", rule.Host)
		}
	}
}

// gatewayDuration is GEP-2257's duration syntax, the pattern the
// HTTPRoute CRD validates (sigs.k8s.io/gateway-api/apis/v1, Duration).
var gatewayDuration = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)

// The HTTPRoute attaches to a Gateway, sends /v1/ws to the gateway's public
// port with the request timeouts disabled (0s), and the rest of the public
// paths with a bounded one; every duration is in the CRD's syntax and a
// backend timeout is never above its request timeout (the CRD's CEL rule).
func TestHTTPRouteComponent(t *testing.T) {
	r := renderWith(t, prodDir, gatewayAPIComp)
	route, ok := r.httpRoutes["ellipsis-gateway"]
	if !ok || len(r.httpRoutes) != 1 {
		t.Fatalf("%s: HTTPRoutes %v, want ellipsis-gateway", r.dir, r.kindsAndName)
	}
	if len(route.Spec.ParentRefs) == 0 || route.Spec.ParentRefs[0].Name == "" {
		t.Error("HTTPRoute ellipsis-gateway: no parentRefs (the Gateway it attaches to)")
	}
	// routeFor returns the rule the Gateway API's precedence picks for a
	// path (Exact before the longest PathPrefix).
	routeFor := func(path string) *gatewayv1.HTTPRouteRule {
		var best *gatewayv1.HTTPRouteRule
		bestLen := -1
		for i := range route.Spec.Rules {
			rule := &route.Spec.Rules[i]
			for _, m := range rule.Matches {
				if m.Path == nil || m.Path.Value == nil || m.Path.Type == nil {
					continue
				}
				v := *m.Path.Value
				switch *m.Path.Type {
				case gatewayv1.PathMatchExact:
					if v == path {
						return rule
					}
				case gatewayv1.PathMatchPathPrefix:
					if (v == "/" || path == v || strings.HasPrefix(path, strings.TrimSuffix(v, "/")+"/")) && len(v) > bestLen {
						best, bestLen = rule, len(v)
					}
				}
			}
		}
		return best
	}
	for i, rule := range route.Spec.Rules {
		if len(rule.BackendRefs) == 0 {
			t.Errorf("HTTPRoute rule %d: no backendRefs", i)
		}
		for _, b := range rule.BackendRefs {
			if b.Kind != nil && *b.Kind != "Service" || b.Port == nil {
				t.Errorf("HTTPRoute rule %d: backend %s is not a Service with a port", i, b.Name)
				continue
			}
			checkPublicBackend(t, r, "HTTPRoute rule "+strconv.Itoa(i), string(b.Name), intstr.FromInt32(*b.Port))
		}
		if to := rule.Timeouts; to != nil {
			var req, backend time.Duration
			for name, d := range map[string]*gatewayv1.Duration{"request": to.Request, "backendRequest": to.BackendRequest} {
				if d == nil {
					continue
				}
				v, err := time.ParseDuration(string(*d))
				if !gatewayDuration.MatchString(string(*d)) || err != nil {
					t.Errorf("HTTPRoute rule %d: timeouts.%s %q is not a Gateway API duration", i, name, *d)
				}
				if name == "request" {
					req = v
				} else {
					backend = v
				}
			}
			if to.Request != nil && to.BackendRequest != nil && req != 0 && backend > req {
				t.Errorf("HTTPRoute rule %d: backendRequest %v above request %v (the CRD refuses it)", i, backend, req)
			}
		}
	}
	ws := routeFor("/v1/ws")
	if ws == nil {
		t.Fatal("HTTPRoute ellipsis-gateway does not route /v1/ws")
	}
	if ws.Timeouts == nil || ws.Timeouts.Request == nil || *ws.Timeouts.Request != "0s" ||
		(ws.Timeouts.BackendRequest != nil && *ws.Timeouts.BackendRequest != "0s") {
		t.Errorf("HTTPRoute: the rule of /v1/ws has timeouts %s; want request (and backendRequest, if set) 0s: a WebSocket lasts as long as its client keeps it", yamlOf(t, ws.Timeouts))
	}
	for _, p := range []string{"/v1/rooms/42/typing", "/v1/config", "/sdk/v1/ellipsis.js"} {
		if rule := routeFor(p); rule == nil {
			t.Errorf("HTTPRoute ellipsis-gateway does not route %s", p)
		} else if rule == ws {
			t.Errorf("HTTPRoute: %s falls under the WebSocket rule (no request timeout)", p)
		}
	}
}

// With a Sentinel URL the services must reach the sentinels on 26379 as
// well as the master on 6379: the base NetworkPolicies block 26379 (the
// pods would stay unready), the redis-sentinel component allows it, for
// both services, and opens nothing else.
func TestRedisSentinelComponent(t *testing.T) {
	sentinel := peer{what: "a Redis Sentinel", external: true}
	master := peer{what: "the Redis master", external: true}
	plain, with := render(t, prodDir), renderWith(t, prodDir, sentinelComponent)
	for _, ec := range ellipsisContainers(t, with) {
		self := podPeer(ec.svc.name, ec.dep.Spec.Template)
		if allowed(plain, self, sentinel, 26379, corev1.ProtocolTCP) {
			t.Errorf("%s: %s reaches 26379 without the component; the component (and docs/deploy.md) would be needless", prodDir, ec.svc.name)
		}
		if !allowed(with, self, sentinel, 26379, corev1.ProtocolTCP) {
			t.Errorf("%s: %s cannot reach a sentinel on 26379", with.dir, ec.svc.name)
		}
		if !allowed(with, self, master, 6379, corev1.ProtocolTCP) {
			t.Errorf("%s: %s cannot reach the master on 6379", with.dir, ec.svc.name)
		}
		for _, p := range []int32{443, 6443, 26380} {
			if allowed(with, self, peer{what: "elsewhere", external: true}, p, corev1.ProtocolTCP) {
				t.Errorf("%s: %s may reach port %d", with.dir, ec.svc.name, p)
			}
		}
	}
}

// yamlOf is v as YAML on one line, for messages.
func yamlOf(t *testing.T, v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "; ")
}
