// Package monitoring tests manifests/monitoring: every file parses, every
// PromQL expression parses with Prometheus' own parser, and every metric an
// expression selects is one deputy exports.
package monitoring

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/tokenreview"
	"deputy.dev/deputy/webhook"
)

// dir is manifests/monitoring, from test/monitoring.
const dir = "../../manifests/monitoring"

// prometheusSeries are series Prometheus itself records for every target.
var prometheusSeries = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped"}

// recorder is a prometheus.Registerer that keeps what is registered, so
// that it can be described.
type recorder struct{ collectors []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}
func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// exported returns every metric name `deputy serve` registers, from the
// collectors' descriptions (a vector without observations is described but
// absent from a scrape): webhook.NewMetrics (with the Go and process
// collectors), the Applications' metrics and the authentication metrics.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recorder{}
	if _, err := apps.NewMetrics(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := tokenreview.NewChains(t.Context(), tokenreview.Options{Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	m := webhook.NewMetrics()
	names := webhook.DescribedNames(func(ch chan<- *prometheus.Desc) {
		m.Describe(ch)
		for _, c := range rec.collectors {
			c.Describe(ch)
		}
	})
	out := map[string]bool{}
	for _, n := range append(names, prometheusSeries...) {
		out[n] = true
	}
	for _, want := range []string{"deputy_decisions_total", "deputy_app_sync_total", "deputy_authentication_attempts_total", "go_goroutines"} {
		if !out[want] {
			t.Fatalf("the exported names lack %s: the collection is broken: %v", want, names)
		}
	}
	return out
}

// unknownMetrics parses expr and returns the metric names it selects that
// are not in known; a histogram's _bucket, _sum and _count series count as
// its name. A description carries no metric type, so those suffixes are
// accepted on any known name.
func unknownMetrics(expr string, known map[string]bool) ([]string, error) {
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var unknown []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" {
					name = m.Value
				}
			}
		}
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && known[b] {
				base = b
			}
		}
		if !known[base] {
			unknown = append(unknown, name)
		}
		return nil
	})
	return unknown, nil
}

func TestUnknownMetrics(t *testing.T) {
	known := exported(t)
	tests := []struct {
		name, expr string
		want       []string
		wantErr    bool
	}{
		{"an exported counter", `rate(deputy_decisions_total{endpoint="authorize"}[5m])`, nil, false},
		{"a histogram's bucket series", `histogram_quantile(0.99, sum by (le) (rate(deputy_http_request_duration_seconds_bucket[5m])))`, nil, false},
		{"a metric deputy does not export", `rate(deputy_bogus_total[5m]) > 0 or deputy_policy_ready == 0`, []string{"deputy_bogus_total"}, false},
		{"a suffix on a metric deputy does not export", `deputy_bogus_count`, []string{"deputy_bogus_count"}, false},
		{"a name given as a matcher", `{__name__="deputy_nope"}`, []string{"deputy_nope"}, false},
		{"an expression that does not parse", `rate(deputy_decisions_total[5m]`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := unknownMetrics(tt.expr, known)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("unknown metrics %v, want %v", got, tt.want)
			}
		})
	}
}

// object reads one YAML file of dir into a generic object.
func object(t *testing.T, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.UnmarshalStrict(data, &obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return obj
}

// field walks obj along path (map keys).
func field(obj any, path ...string) any {
	for _, p := range path {
		m, ok := obj.(map[string]any)
		if !ok {
			return nil
		}
		obj = m[p]
	}
	return obj
}

func TestServiceMonitorSelectsDeputysService(t *testing.T) {
	sm := object(t, "servicemonitor.yaml")
	svc := object(t, "../base/service.yaml")
	if sm["apiVersion"] != "monitoring.coreos.com/v1" || sm["kind"] != "ServiceMonitor" {
		t.Fatalf("servicemonitor.yaml is %v %v", sm["apiVersion"], sm["kind"])
	}
	svcLabels, _ := field(svc, "metadata", "labels").(map[string]any)
	selector, _ := field(sm, "spec", "selector", "matchLabels").(map[string]any)
	if len(selector) == 0 {
		t.Fatal("the ServiceMonitor selects nothing")
	}
	for k, v := range selector {
		if svcLabels[k] != v {
			t.Errorf("selector %s=%v does not match Service deputy's labels %v", k, v, svcLabels)
		}
	}
	if ns := field(sm, "spec", "namespaceSelector", "matchNames"); !slices.Contains(toStrings(ns), field(svc, "metadata", "namespace").(string)) {
		t.Errorf("namespaceSelector %v lacks the Service's namespace", ns)
	}
	endpoints, _ := field(sm, "spec", "endpoints").([]any)
	ports, _ := field(svc, "spec", "ports").([]any)
	if len(endpoints) != 1 || len(ports) == 0 {
		t.Fatalf("endpoints %v, Service ports %v", endpoints, ports)
	}
	if got, want := field(endpoints[0], "port"), field(ports[0], "name"); got != want {
		t.Errorf("endpoint port %v, want the Service's port name %v", got, want)
	}
	if field(endpoints[0], "scheme") != "https" || field(endpoints[0], "path") != "/metrics" {
		t.Errorf("endpoint %v: deputy serves /metrics over https", endpoints[0])
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, s := range l {
		if str, ok := s.(string); ok {
			out = append(out, str)
		}
	}
	return out
}

func TestPrometheusRuleNamesOnlyExportedMetrics(t *testing.T) {
	known := exported(t)
	pr := object(t, "prometheusrule.yaml")
	if pr["apiVersion"] != "monitoring.coreos.com/v1" || pr["kind"] != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml is %v %v", pr["apiVersion"], pr["kind"])
	}
	var alerts []string
	groups, _ := field(pr, "spec", "groups").([]any)
	for _, g := range groups {
		rules, _ := field(g, "rules").([]any)
		for _, r := range rules {
			name, _ := field(r, "alert").(string)
			expr, _ := field(r, "expr").(string)
			alerts = append(alerts, name)
			t.Run(name, func(t *testing.T) {
				if expr == "" || field(r, "annotations", "summary") == nil || field(r, "labels", "severity") == nil {
					t.Fatalf("alert %q needs expr, labels.severity and annotations.summary", name)
				}
				unknown, err := unknownMetrics(expr, known)
				if err != nil {
					t.Fatalf("expr %q: %v", expr, err)
				}
				if len(unknown) > 0 {
					t.Errorf("expr %q names metrics deputy does not export: %v", expr, unknown)
				}
			})
		}
	}
	for _, want := range []string{"DeputyNotReady", "DeputyPolicyReloadFailing", "DeputyHighErrorRate", "DeputyAuthorizeLatencyHigh", "DeputySyncFailures"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts %v lack %s", alerts, want)
		}
	}
}

// grafanaVariables are the dashboard's variables with values PromQL parses.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$job", "deputy")

func TestDashboardNamesOnlyExportedMetrics(t *testing.T) {
	known := exported(t)
	data, err := os.ReadFile(filepath.Join(dir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	for _, p := range dash.Panels {
		t.Run(p.Title, func(t *testing.T) {
			if len(p.Targets) == 0 {
				t.Fatal("a panel without a query")
			}
			for _, target := range p.Targets {
				expr := grafanaVariables.Replace(target.Expr)
				if strings.Contains(expr, "$") {
					t.Errorf("expr %q uses a variable the test does not know", target.Expr)
					continue
				}
				unknown, err := unknownMetrics(expr, known)
				if err != nil {
					t.Errorf("expr %q: %v", expr, err)
					continue
				}
				if len(unknown) > 0 {
					t.Errorf("expr %q names metrics deputy does not export: %v", expr, unknown)
				}
			}
		})
	}
}
