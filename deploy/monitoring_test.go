package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// The monitoring of Ellipsis (deploy/monitoring, docs/deploy.md
// "Monitoring"): a Grafana dashboard, Prometheus alerting rules and the
// opt-in kustomize component that brings them (and a PodMonitor) into an
// overlay on top of prod. monitoring_live_test.go checks the metrics they
// query against the running binaries.
const (
	monitoringDir = "monitoring"
	dashboardFile = "monitoring/ellipsis-dashboard.json"
	rulesFile     = "monitoring/ellipsis.rules.yml"
	promRuleFile  = "monitoring/prometheusrule.yaml"
)

var update = flag.Bool("update", false, "rewrite monitoring/prometheusrule.yaml from monitoring/ellipsis.rules.yml")

// promqlParser is Prometheus's own PromQL parser with its default options
// (no experimental functions), as a Prometheus server without feature
// flags parses rules and queries.
var promqlParser = parser.NewParser(parser.Options{})

// parseRules parses rule-file content with Prometheus's rule parser,
// unknown fields refused, as `promtool check rules` does.
func parseRules(t testing.TB, name string, content []byte) *rulefmt.RuleGroups {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, promqlParser, logger)
	if len(errs) > 0 {
		var msgs []string
		for _, err := range errs {
			msgs = append(msgs, err.Error())
		}
		t.Fatalf("%s: the Prometheus rule parser rejects it:\n  %s", name, strings.Join(msgs, "\n  "))
	}
	return groups
}

func readRules(t testing.TB) *rulefmt.RuleGroups {
	t.Helper()
	content, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	return parseRules(t, rulesFile, content)
}

// runbookBase is where every alert's runbook_url points: docs/failures.md
// on GitHub, at the anchor of the alert's own heading in "Alerts".
const runbookBase = "https://github.com/ellipsis-chat/ellipsis/blob/main/docs/failures.md"

// Every alert parses with rulefmt (and so its expression with the PromQL
// parser, its templates with Go's), waits a for: (0m written out where
// one sample is enough), has a severity Alertmanager can route on, a
// summary, a description and a runbook_url: the full URL of its own
// heading in docs/failures.md, "Alerts", an anchor GitHub generates.
func TestAlertingRulesParseAndAreComplete(t *testing.T) {
	groups := readRules(t)
	failures, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "failures.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(failures), "\n## Alerts\n") {
		t.Fatal(`docs/failures.md has no "## Alerts" section, where the rules' runbooks point`)
	}
	anchors := githubAnchors(string(failures))
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	n := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" {
				t.Errorf("group %s: a recording rule (%s); this file holds alerts only", g.Name, r.Record)
				continue
			}
			if seen[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if !forWritten.MatchString(alertBlock(string(raw), r.Alert)) {
				t.Errorf("alert %s: no for: written out (use for: 0m when one evaluation is enough)", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			if _, ok := r.Annotations["runbook"]; ok {
				t.Errorf("alert %s: a runbook annotation; the convention (and Alertmanager's templates, Grafana) read runbook_url", r.Alert)
			}
			u := r.Annotations["runbook_url"]
			base, anchor, _ := strings.Cut(u, "#")
			if base != runbookBase {
				t.Errorf("alert %s: runbook_url %q, want %s#<anchor>", r.Alert, u, runbookBase)
			}
			if heading, ok := anchors[anchor]; !ok {
				t.Errorf("alert %s: runbook_url %q: docs/failures.md has no heading with anchor #%s; add \"### %s\" under \"Alerts\"", r.Alert, u, anchor, r.Alert)
			} else if heading != r.Alert {
				t.Errorf("alert %s: runbook_url %q points at the heading %q, not the alert's own", r.Alert, u, heading)
			}
			if _, err := promqlParser.ParseExpr(r.Expr); err != nil {
				t.Errorf("alert %s: PromQL: %v", r.Alert, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
	// The alerts an operator needs, by what they watch.
	for _, want := range []string{"EllipsisSweepLagHigh", "EllipsisPubSubLinkDown", "EllipsisSlowConsumerCloses",
		"EllipsisDeliveryDelayHigh", "EllipsisTargetDown", "EllipsisServiceAbsent", "EllipsisNATSDisconnected", "EllipsisCommandErrors",
		"EllipsisJWKSRefreshFailing", "EllipsisConnectionsNearLimit", "EllipsisConnectionsRefused"} {
		if !seen[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// githubAnchors maps the anchors GitHub generates for a Markdown file's
// headings to the headings' text: lower case, every character but
// letters, digits, spaces, '-' and '_' removed, spaces turned into '-',
// and "-1", "-2"... appended to repeats. Lines inside code fences are no
// headings.
func githubAnchors(md string) map[string]string {
	anchors := map[string]string{}
	count := map[string]int{}
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		m := atxHeading.FindStringSubmatch(line)
		if fence || m == nil {
			continue
		}
		text := strings.TrimSpace(m[1])
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if k := count[slug]; k > 0 {
			count[slug]++
			slug = fmt.Sprintf("%s-%d", slug, k)
		} else {
			count[slug] = 1
		}
		anchors[slug] = strings.Trim(text, "`")
	}
	return anchors
}

// atxHeading matches a Markdown heading line ("## Text", "### Text ##").
var atxHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// The anchor generation must match GitHub's on the cases that matter:
// case, punctuation, code spans, repeats, fences.
func TestGitHubAnchors(t *testing.T) {
	got := githubAnchors("# Failures: what Ellipsis does\n## Alerts\n### `EllipsisTargetDown`\n```\n# not a heading\n```\n## Alerts\n### Snapshots: cap and total\n")
	want := map[string]string{
		"failures-what-ellipsis-does": "Failures: what Ellipsis does",
		"alerts":                      "Alerts",
		"alerts-1":                    "Alerts",
		"ellipsistargetdown":          "EllipsisTargetDown",
		"snapshots-cap-and-total":     "Snapshots: cap and total",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("githubAnchors = %v, want %v", got, want)
	}
}

// forWritten matches a rule's for: line.
var forWritten = regexp.MustCompile(`(?m)^\s+for: \d+[smh]$`)

// alertBlock is the text of one alert in a rule file: from its "- alert:"
// line to the next rule or group.
func alertBlock(rules, alert string) string {
	_, block, ok := strings.Cut(rules, "- alert: "+alert+"\n")
	if !ok {
		return ""
	}
	if i := regexp.MustCompile(`\n\s*- (alert|record|name):`).FindStringIndex(block); i != nil {
		block = block[:i[0]]
	}
	return block
}

// The rule parser must really reject a broken rule; otherwise the check
// above proves nothing.
func TestRuleParserRejectsBrokenRules(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for name, bad := range map[string]string{
		"bad PromQL":      "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: rate(x[5m]\n",
		"unknown field":   "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    severity: critical\n",
		"bad template":    "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    annotations:\n      summary: '{{ $labels.x '\n",
		"duplicate group": "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n- name: g\n  rules:\n  - alert: B\n    expr: up == 0\n",
	} {
		if _, errs := rulefmt.Parse([]byte(bad), false, model.UTF8Validation, promqlParser, logger); len(errs) == 0 {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

// prometheusRuleYAML is the content of prometheusrule.yaml for the rule
// file's content: a header and the groups, indented under spec.
func prometheusRuleYAML(rules []byte) []byte {
	i := bytes.Index(rules, []byte("\ngroups:"))
	var b bytes.Buffer
	b.WriteString(`# The alerting rules of ellipsis.rules.yml for the prometheus-operator: spec
# holds the same groups (deploy/monitoring_test.go fails when they differ;
# ` + "`go test -run TestPrometheusRuleMatchesRuleFile -update`" + ` in deploy/
# rewrites this file from ellipsis.rules.yml).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: ellipsis
  labels:
    app.kubernetes.io/part-of: ellipsis
spec:
`)
	for _, line := range bytes.SplitAfter(rules[i+1:], []byte("\n")) {
		if len(bytes.TrimSpace(line)) > 0 {
			b.WriteString("  ")
		}
		b.Write(line)
	}
	return b.Bytes()
}

// The PrometheusRule the prod overlay renders holds exactly the groups of
// ellipsis.rules.yml: its spec, as kustomize emits it, parses with
// rulefmt into the same rules.
func TestPrometheusRuleMatchesRuleFile(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(promRuleFile, prometheusRuleYAML(rules), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := readRules(t)
	r := renderWith(t, prodDir, monitoringDir)
	pr, ok := r.promRules["ellipsis"]
	if !ok {
		t.Fatalf("%s renders no PrometheusRule ellipsis", r.dir)
	}
	spec, err := yaml.Marshal(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	got := parseRules(t, "PrometheusRule ellipsis (prod)", spec)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("PrometheusRule ellipsis differs from %s; run `go test -run TestPrometheusRuleMatchesRuleFile -update` in deploy/", rulesFile)
	}
}

// The monitoring component, opt-in (the prod overlay alone needs no
// prometheus-operator CRDs: TestProdNeedsNoCRDs), added to the prod
// overlay brings the dashboard as a ConfigMap Grafana's sidecar loads
// (label grafana_dashboard, a name without hash) holding the file as it
// is, and a PodMonitor scraping the port named admin of both services'
// pods.
func TestMonitoringComponentWithProd(t *testing.T) {
	r := renderWith(t, prodDir, monitoringDir)
	if _, ok := render(t, prodDir).configMaps["ellipsis-grafana-dashboard"]; ok {
		t.Errorf("%s alone renders the dashboard ConfigMap: monitoring must stay opt-in", prodDir)
	}
	cm, ok := r.configMaps["ellipsis-grafana-dashboard"]
	if !ok {
		t.Fatalf("%s renders no ConfigMap ellipsis-grafana-dashboard", r.dir)
	}
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s: labels %v, want grafana_dashboard: \"1\" (the Grafana sidecar's default label)", cm.Name, cm.Labels)
	}
	want, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data[filepath.Base(dashboardFile)]; got != string(want) {
		t.Errorf("ConfigMap %s does not hold %s as it is", cm.Name, dashboardFile)
	}
	pm, ok := r.podMonitors["ellipsis"]
	if !ok {
		t.Fatalf("%s renders no PodMonitor ellipsis", r.dir)
	}
	sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil || sel.Empty() {
		t.Fatalf("PodMonitor ellipsis: selector %v: %v", pm.Spec.Selector, err)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("PodMonitor ellipsis: %d endpoints, want 1", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port == nil || ep.Path != "/metrics" {
		t.Fatalf("PodMonitor ellipsis: endpoint port %v path %q, want the port named admin and /metrics", ep.Port, ep.Path)
	}
	for _, svc := range services {
		d, c := r.container(t, svc.deployment, svc.name)
		if !sel.Matches(k8slabels.Set(d.Spec.Template.Labels)) {
			t.Errorf("PodMonitor ellipsis does not select the pods of %s", svc.deployment)
		}
		named := false
		for _, p := range c.Ports {
			named = named || p.Name == *ep.Port
		}
		if !named {
			t.Errorf("PodMonitor ellipsis scrapes port %q, which container %s of %s does not name", *ep.Port, c.Name, d.Name)
		}
		if pm.Spec.JobLabel != "" && d.Spec.Template.Labels[pm.Spec.JobLabel] == "" {
			t.Errorf("PodMonitor ellipsis: jobLabel %s is not a label of the pods of %s", pm.Spec.JobLabel, d.Name)
		}
	}
}

// dashboard is the part of a Grafana dashboard model the checks read.
type dashboard struct {
	Title         string         `json:"title"`
	UID           string         `json:"uid"`
	SchemaVersion int            `json:"schemaVersion"`
	Panels        []dashPanel    `json:"panels"`
	Templating    dashTemplating `json:"templating"`
}

type dashTemplating struct {
	List []struct {
		Name       string          `json:"name"`
		Type       string          `json:"type"`
		Query      json.RawMessage `json:"query"`
		Datasource *dashDatasource `json:"datasource"`
	} `json:"list"`
}

type dashDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource *dashDatasource `json:"datasource"`
	Panels     []dashPanel     `json:"panels"` // a collapsed row's
	Targets    []struct {
		Expr       string          `json:"expr"`
		Datasource *dashDatasource `json:"datasource"`
	} `json:"targets"`
}

func readDashboard(t testing.TB) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens rows.
func (d dashboard) allPanels() []dashPanel {
	var out []dashPanel
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// grafanaVars are the values the checks give the dashboard's variables
// before parsing a query as PromQL: Grafana's interval macros become a
// duration, the namespace variable a regular expression.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m", "${__rate_interval}", "5m",
	"$__interval", "1m", "${__interval}", "1m",
	"$__range", "1h", "${__range}", "1h",
	"${namespace}", ".*", "$namespace", ".*",
)

// labelValues matches Grafana's label_values(metric, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`)

// The dashboard is a current Grafana model whose every query names its
// data source through the datasource variable (no uid of one Grafana
// baked in), parses as PromQL, and which has the panels an operator needs (docs/metrics.md).
func TestDashboardIsCompleteAndPortable(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q: both are needed to import and link it", d.UID, d.Title)
	}
	// 39 is Grafana 11.0's; Grafana 12 writes 41.
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d: older than Grafana 11's (39)", d.SchemaVersion)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && string(v.Query) == `"prometheus"` {
			hasDS = true
		}
		if v.Datasource != nil && v.Datasource.UID != "${datasource}" {
			t.Errorf("variable %s: data source uid %q, want ${datasource}", v.Name, v.Datasource.UID)
		}
	}
	if !hasDS {
		t.Fatal(`no variable "datasource" of type datasource, query prometheus`)
	}
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"uid":\s*"([^"]*)"`).FindAllSubmatch(raw, -1) {
		if u := string(m[1]); u != "${datasource}" && u != "-- Grafana --" && u != d.UID {
			t.Errorf("a hard-coded uid %q; data sources are named by ${datasource}", u)
		}
	}
	titles := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range d.allPanels() {
		titles[p.Title] = true
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %v, want uid ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a query's data source %v, want uid ${datasource}", p.Title, tg.Datasource)
			}
			if _, err := promqlParser.ParseExpr(grafanaVars.Replace(tg.Expr)); err != nil {
				t.Errorf("panel %q: PromQL %q: %v", p.Title, tg.Expr, err)
			}
		}
	}
	for _, want := range []string{"Build info", "Connections", "Frames in", "Frames out", "Commands by outcome",
		"Delivery delay", "Delivery delay histogram", "Snapshot latency", "Sweep lag", "Redis and NATS errors",
		"Slow-consumer and abuse closes", "Pub/Sub links", "Pub/Sub ping timeouts and resyncs",
		"CPU per instance", "Memory per instance", "Goroutines per instance"} {
		if !titles[want] {
			t.Errorf("no panel %q", want)
		}
	}
}

// queriedMetrics returns every metric name the dashboard and the rules
// query, each with where it is used. `up` is Prometheus's own (one per
// scrape target), not the binaries'.
func queriedMetrics(t testing.TB) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	add := func(where, expr string) {
		e, err := promqlParser.ParseExpr(expr)
		if err != nil {
			t.Fatalf("%s: PromQL %q: %v", where, expr, err)
		}
		names := metricNames(e)
		if len(names) == 0 {
			t.Errorf("%s: %q queries no metric by name", where, expr)
		}
		for _, n := range names {
			if n != "up" {
				out[n] = append(out[n], where)
			}
		}
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			add(rulesFile+": "+r.Alert, r.Expr)
		}
	}
	d := readDashboard(t)
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			add(fmt.Sprintf("%s: panel %q", dashboardFile, p.Title), grafanaVars.Replace(tg.Expr))
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if json.Unmarshal(v.Query, &s) != nil {
				t.Fatalf("variable %s: query %s", v.Name, v.Query)
			}
			q.Query = s
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
		}
		out[m[1]] = append(out[m[1]], fmt.Sprintf("%s: variable %s", dashboardFile, v.Name))
	}
	return out
}

// metricNames lists the metric names an expression selects: each vector
// selector's name, or its __name__ equality matcher.
func metricNames(e parser.Expr) []string {
	seen := map[string]bool{}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name != "" {
			seen[vs.Name] = true
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				seen[m.Value] = true
			}
		}
		return nil
	})
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// The extraction must see through functions, aggregations, binary
// operators and `or`; otherwise the check against the binaries proves
// little.
func TestMetricNamesSeesEverySelector(t *testing.T) {
	e, err := promqlParser.ParseExpr(`histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="1"}[5m]))) > 1 or absent(b) or {__name__="c"} / on() group_left d`)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(metricNames(e)); got != "[a_bucket b c d]" {
		t.Fatalf("metricNames = %s, want [a_bucket b c d]", got)
	}
}

// The dashboard and the rules read the processes (CPU, memory,
// goroutines: the Go and process collectors), the connection limit and
// the handshakes refused at it, and the JWKS refresh failures
// (docs/deploy.md says to alert on them).
func TestMonitoringQueriesProcessesAndCapacity(t *testing.T) {
	queried := queriedMetrics(t)
	for _, want := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "go_goroutines", "go_memstats_heap_inuse_bytes",
		"ellipsis_gateway_connections", "ellipsis_gateway_max_connections", "ellipsis_gateway_handshakes_rejected_total",
		"ellipsis_gateway_jwks_refresh_failures_total"} {
		if len(queried[want]) == 0 {
			t.Errorf("neither the dashboard nor the rules query %s", want)
		}
	}
}
