package deploy

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// peer is one end of a connection, as a NetworkPolicy sees it.
type peer struct {
	what     string
	labels   map[string]string // a pod's labels (nil outside the cluster)
	otherNS  bool              // a pod of another namespace
	external bool              // outside the cluster: clients, managed NATS or Redis
	pod      *corev1.PodSpec   // the destination pod, for named ports
}

func podPeer(what string, tmpl corev1.PodTemplateSpec) peer {
	return peer{what: what, labels: tmpl.Labels, pod: &tmpl.Spec}
}

func selects(sel *metav1.LabelSelector, lbls map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(lbls))
}

func peerMatches(peers []networkingv1.NetworkPolicyPeer, p peer) bool {
	if len(peers) == 0 {
		return true
	}
	for _, pe := range peers {
		if pe.IPBlock != nil {
			// CIDRs are the cluster's business; an ipBlock is how external
			// endpoints are named.
			if p.external {
				return true
			}
			continue
		}
		if p.external {
			continue
		}
		nsOK := !p.otherNS
		if pe.NamespaceSelector != nil {
			nsOK = true // {} is every namespace; a labelled one is assumed to be the right one
		}
		if nsOK && (pe.PodSelector == nil || selects(pe.PodSelector, p.labels)) {
			return true
		}
	}
	return false
}

func portMatches(ports []networkingv1.NetworkPolicyPort, port int32, proto corev1.Protocol, dst *corev1.PodSpec) bool {
	if len(ports) == 0 {
		return true
	}
	for _, pp := range ports {
		pr := corev1.ProtocolTCP
		if pp.Protocol != nil {
			pr = *pp.Protocol
		}
		if pr != proto {
			continue
		}
		switch {
		case pp.Port == nil:
			return true
		case pp.Port.Type == intstr.Int:
			end := pp.Port.IntVal
			if pp.EndPort != nil {
				end = *pp.EndPort
			}
			if port >= pp.Port.IntVal && port <= end {
				return true
			}
		case dst != nil:
			for _, c := range dst.Containers {
				for _, cp := range c.Ports {
					if cp.Name == pp.Port.StrVal && cp.ContainerPort == port {
						return true
					}
				}
			}
		}
	}
	return false
}

// allowed reports whether the policies of the render let src open a
// connection to dst on port: egress policies of src (when src is one of the
// render's pods) and ingress policies of dst (likewise) must both allow it.
// A pod no policy selects for a direction is open in that direction.
func allowed(r *rendered, src, dst peer, port int32, proto corev1.Protocol) bool {
	check := func(self peer, typ networkingv1.PolicyType, other peer, portPod *corev1.PodSpec) bool {
		if self.labels == nil || self.otherNS {
			return true // not ours to police
		}
		selected := false
		for _, np := range r.netpols {
			if !selects(&np.Spec.PodSelector, self.labels) || !contains(np.Spec.PolicyTypes, typ) {
				continue
			}
			selected = true
			if typ == networkingv1.PolicyTypeEgress {
				for _, rule := range np.Spec.Egress {
					if peerMatches(rule.To, other) && portMatches(rule.Ports, port, proto, portPod) {
						return true
					}
				}
			} else {
				for _, rule := range np.Spec.Ingress {
					if peerMatches(rule.From, other) && portMatches(rule.Ports, port, proto, portPod) {
						return true
					}
				}
			}
		}
		return !selected
	}
	return check(src, networkingv1.PolicyTypeEgress, dst, dst.pod) && check(dst, networkingv1.PolicyTypeIngress, src, dst.pod)
}

// backend resolves a backend URL's host and port: a Service of the render
// (then the pod and container port behind it) or something external.
func backend(t *testing.T, r *rendered, what, raw string, defPort int32) (peer, int32) {
	t.Helper()
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		t.Fatalf("%s: %s URL %q: %v", r.dir, what, raw, err)
	}
	port := defPort
	if p := u.Port(); p != "" {
		n, _ := strconv.Atoi(p)
		port = int32(n)
	}
	host := u.Hostname()
	name := strings.Split(host, ".")[0]
	s, ok := r.services[name]
	if !ok || net.ParseIP(host) != nil {
		return peer{what: what + " at " + host, external: true}, port
	}
	for _, d := range r.deployments {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		for _, sp := range s.Spec.Ports {
			if sp.Port != port {
				continue
			}
			for i := range d.Spec.Template.Spec.Containers {
				if target, ok := resolvePort(&d.Spec.Template.Spec.Containers[i], sp.TargetPort); ok {
					return podPeer(what+" (Deployment "+d.Name+")", d.Spec.Template), target
				}
			}
		}
		t.Errorf("%s: Service %s has no port %d for %s", r.dir, name, port, what)
		return peer{what: what, external: true}, port
	}
	t.Errorf("%s: Service %s (%s) selects no pod", r.dir, name, what)
	return peer{what: what, external: true}, port
}

// The NetworkPolicies let each service reach NATS, Redis and DNS and be
// reached on its own ports, and nothing else.
func TestNetworkPolicies(t *testing.T) {
	dns := peer{what: "cluster DNS", labels: map[string]string{"k8s-app": "kube-dns"}, otherNS: true}
	prometheus := peer{what: "Prometheus", labels: map[string]string{"app.kubernetes.io/name": "prometheus"}, otherNS: true}
	internet := peer{what: "a client on the internet", external: true}
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for _, ec := range ellipsisContainers(t, r) {
			self := podPeer(ec.svc.name, ec.dep.Spec.Template)
			must := func(ok bool, src, dst peer, port int32, proto corev1.Protocol) {
				t.Helper()
				if allowed(r, src, dst, port, proto) != ok {
					verb := "block"
					if !ok {
						verb = "allow"
					}
					t.Errorf("%s: NetworkPolicies %s %s -> %s on %s %d", r.dir, verb, src.what, dst.what, proto, port)
				}
			}
			// Default deny in both directions for our pods.
			var in, out bool
			for _, np := range r.netpols {
				if selects(&np.Spec.PodSelector, self.labels) {
					in = in || contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
					out = out || contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
				}
			}
			if !in || !out {
				t.Errorf("%s: %s: no NetworkPolicy restricts both its ingress and its egress", r.dir, ec.svc.name)
			}
			must(true, self, dns, 53, corev1.ProtocolUDP)
			for _, u := range ec.cfg.NATSServers() {
				dst, port := backend(t, r, "NATS", u, 4222)
				must(true, self, dst, port, corev1.ProtocolTCP)
			}
			dst, port := backend(t, r, "Redis", ec.cfg.RedisURL, 6379)
			must(true, self, dst, port, corev1.ProtocolTCP)
			// Nothing else out: not the internet, not the Kubernetes API.
			must(false, self, peer{what: "the internet", external: true}, 443, corev1.ProtocolTCP)
			must(false, self, peer{what: "the Kubernetes API", external: true}, 6443, corev1.ProtocolTCP)

			admin := portOf(t, "ELLIPSIS_ADMIN_ADDR", ec.cfg.AdminAddr)
			must(true, prometheus, self, admin, corev1.ProtocolTCP)
			must(false, internet, self, admin, corev1.ProtocolTCP)
			if ec.svc.public {
				must(true, internet, self, portOf(t, "ELLIPSIS_HTTP_ADDR", ec.cfg.HTTPAddr), corev1.ProtocolTCP)
			}
		}
		// In-cluster backends (dev) take connections from our services only.
		for name, d := range r.deployments {
			if strings.HasPrefix(name, gateway.deployment) || strings.HasPrefix(name, worker.deployment) {
				continue
			}
			stranger := peer{what: "a pod of another namespace", labels: map[string]string{"app": "x"}, otherNS: true}
			for _, c := range d.Spec.Template.Spec.Containers {
				for _, cp := range c.Ports {
					if strings.Contains(cp.Name, "monitor") {
						continue // probes only
					}
					if allowed(r, stranger, podPeer(name, d.Spec.Template), cp.ContainerPort, corev1.ProtocolTCP) {
						t.Errorf("%s: %s port %d is open to any pod", r.dir, name, cp.ContainerPort)
					}
				}
			}
		}
	})
}
