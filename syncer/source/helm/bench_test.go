package helm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"deputy.dev/deputy/policy/v1alpha1"
)

// writeLargeChart writes a chart rendering 200 objects (100 Deployments,
// 100 Services, each with labels from a helper and values) to dir/large.
func writeLargeChart(tb testing.TB, dir string) {
	tb.Helper()
	files := map[string]string{
		"large/Chart.yaml":               "apiVersion: v2\nname: large\nversion: 1.0.0\n",
		"large/values.yaml":              "count: 100\nimage: {repository: nginx, tag: \"1.27\"}\nresources: {requests: {cpu: 10m, memory: 16Mi}}\n",
		"large/templates/_helpers.tpl":   "{{- define \"large.labels\" -}}\napp.kubernetes.io/name: {{ .name }}\napp.kubernetes.io/instance: {{ .root.Release.Name }}\nhelm.sh/chart: {{ .root.Chart.Name }}-{{ .root.Chart.Version }}\n{{- end }}\n",
		"large/templates/workloads.yaml": "{{- range $i := until (int .Values.count) }}\n{{- $name := printf \"svc-%03d\" $i }}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ $name }}\n  labels:\n    {{- include \"large.labels\" (dict \"name\" $name \"root\" $) | nindent 4 }}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: {{ $name }}}}\n  template:\n    metadata: {labels: {app: {{ $name }}}}\n    spec:\n      containers:\n      - name: app\n        image: \"{{ $.Values.image.repository }}:{{ $.Values.image.tag }}\"\n        resources:\n          {{- toYaml $.Values.resources | nindent 10 }}\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {{ $name }}\n  labels:\n    {{- include \"large.labels\" (dict \"name\" $name \"root\" $) | nindent 4 }}\nspec:\n  selector: {app: {{ $name }}}\n  ports: [{port: 80, targetPort: 8080}]\n{{- end }}\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkLargeChart renders a 200-object chart with deputy's Render (in
// process: the render worker's own cost comes on top, see
// docs/benchmarks.md) and with the helm v3.22.0 binary (a process each
// time, as Argo CD's repo server runs it), in one run.
func BenchmarkLargeChart(b *testing.B) {
	dir := b.TempDir()
	writeLargeChart(b, dir)
	src := &v1alpha1.HelmSource{ReleaseName: "large", Namespace: "bench"}
	b.Run("deputy", func(b *testing.B) {
		for b.Loop() {
			objs, err := Render(b.Context(), Options{Files: dirFiles(dir), ChartDir: "large", Source: src})
			if err != nil || len(objs) != 200 {
				b.Fatalf("%d objects, %v", len(objs), err)
			}
		}
	})
	b.Run("helm-template", func(b *testing.B) {
		bin := helmBin(b)
		for b.Loop() {
			out, err := exec.CommandContext(b.Context(), bin, "template", "large", filepath.Join(dir, "large"), "--namespace", "bench", "--include-crds").Output()
			if err != nil || strings.Count(string(out), "\nkind: ") != 200 {
				b.Fatalf("%d objects, %v", strings.Count(string(out), "\nkind: "), err)
			}
		}
	})
}

// The benchmark's chart renders the same objects with deputy and helm.
func TestLargeChartEqualsHelmTemplate(t *testing.T) {
	bin := helmBin(t)
	dir := t.TempDir()
	writeLargeChart(t, dir)
	got, err := Render(t.Context(), Options{Files: dirFiles(dir), ChartDir: "large", Source: &v1alpha1.HelmSource{ReleaseName: "large", Namespace: "bench"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), bin, "template", "large", filepath.Join(dir, "large"), "--namespace", "bench", "--include-crds").Output()
	if err != nil {
		t.Fatal(err)
	}
	want, err := decode(string(out), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 200 || fmt.Sprint(objects(want)) != fmt.Sprint(objects(got)) {
		t.Errorf("deputy's %d objects differ from helm's %d", len(got), len(want))
	}
}
