package source

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"deputy.dev/deputy/policy/v1alpha1"
)

// A path holding Chart.yaml renders with Helm in the render worker: the
// chart's values under the Application's value files, a file:// dependency
// outside charts/ loaded from the repository, a hook kept as an object.
func TestRenderHelmChartFromGit(t *testing.T) {
	r := newTestRepo(t)
	r.write("charts/app/Chart.yaml", "apiVersion: v2\nname: app\nversion: 0.1.0\ndependencies:\n- name: common\n  version: 0.1.0\n  repository: file://../common\n")
	r.write("charts/app/values.yaml", "replicas: 1\ncommon: {suffix: base}\n")
	r.write("charts/app/templates/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}-cm, namespace: {{ .Release.Namespace }}}\ndata: {replicas: {{ .Values.replicas | quote }}}\n")
	r.write("charts/app/templates/job.yaml", "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations: {helm.sh/hook: pre-install}\nspec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: busybox}]}}}\n")
	r.write("charts/common/Chart.yaml", "apiVersion: v2\nname: common\nversion: 0.1.0\n")
	r.write("charts/common/templates/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: common-{{ .Values.suffix }}}\n")
	r.write("envs/prod.yaml", "replicas: 3\ncommon: {suffix: prod}\n")
	r.commit("chart")

	src := v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "charts/app", Helm: &v1alpha1.HelmSource{
		ValueFiles: []string{"/envs/prod.yaml", "missing.yaml"}, IgnoreMissingValueFiles: true, ReleaseName: "guestbook", Namespace: "web",
	}}
	got, err := testCache(t).Render(t.Context(), src, "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ConfigMap/common-prod", "ConfigMap/guestbook-cm", "Job/migrate"}, names(got.Objects)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	if v := got.Objects[1].Object["data"].(map[string]any)["replicas"]; v != "3" {
		t.Errorf("replicas = %v, want the value file's 3", v)
	}
	if ns := got.Objects[1].GetNamespace(); ns != "web" {
		t.Errorf("namespace = %q, want web", ns)
	}
	if h := got.Objects[2].GetAnnotations()["helm.sh/hook"]; h != "pre-install" {
		t.Errorf("the hook lost its annotation: %v", got.Objects[2].GetAnnotations())
	}
}

// Hostile charts are refused by the render limits, with the limit's field
// in the message: a chart rendering 100k objects, a 100 MB values file.
func TestRenderHelmLimits(t *testing.T) {
	r := newTestRepo(t)
	r.write("many/Chart.yaml", "apiVersion: v2\nname: many\nversion: 0.1.0\n")
	r.write("many/templates/cm.yaml", "{{ range until 100000 }}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-{{ . }}}\n{{ end }}")
	r.write("big/Chart.yaml", "apiVersion: v2\nname: big\nversion: 0.1.0\n")
	r.write("big/values.yaml", "a: "+strings.Repeat("x", 100<<20)+"\n")
	r.write("doubling/Chart.yaml", "apiVersion: v2\nname: doubling\nversion: 0.1.0\n")
	r.write("doubling/templates/cm.yaml", "{{ $s := \"x\" }}{{ range until 30 }}{{ $s = print $s $s }}{{ end }}apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ len $s }}}\n")
	r.commit("hostile")

	t.Run("a chart that renders 100k objects is refused by maxObjects", func(t *testing.T) {
		c := testCache(t)
		c.limits = Limits{MaxObjects: 1000}
		_, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "many"}, "")
		var le *LimitError
		if !errors.As(err, &le) || le.Field != FieldMaxObjects || !strings.HasPrefix(err.Error(), "helm template of chart many (many): ") {
			t.Fatalf("err = %v, want a limit error of helm template naming %s", err, FieldMaxObjects)
		}
		t.Log(err)
	})
	t.Run("a values file of 100 MB is refused by maxFileBytes", func(t *testing.T) {
		c := testCache(t)
		c.limits = Limits{MaxFileBytes: 1 << 20}
		_, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "big"}, "")
		var le *LimitError
		if !errors.As(err, &le) || le.Field != FieldMaxFileBytes || !strings.Contains(err.Error(), "loading the chart in big: file \"big/values.yaml\"") {
			t.Fatalf("err = %v, want a limit error naming %s and the file", err, FieldMaxFileBytes)
		}
		t.Log(err)
	})
	t.Run("a 100 MB file in valueFiles is refused by maxFileBytes", func(t *testing.T) {
		c := testCache(t)
		c.limits = Limits{MaxFileBytes: 1 << 20}
		src := v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "many", Helm: &v1alpha1.HelmSource{ValueFiles: []string{"/big/values.yaml"}}}
		_, err := c.Render(t.Context(), src, "")
		var le *LimitError
		if !errors.As(err, &le) || le.Field != FieldMaxFileBytes || !strings.Contains(err.Error(), "chart many (many): spec.source.helm.valueFiles[0]: values file big/values.yaml: ") {
			t.Fatalf("err = %v, want a limit error naming the values file and %s", err, FieldMaxFileBytes)
		}
	})
	t.Run("a template that doubles a string 30 times is stopped by maxRenderMemory", func(t *testing.T) {
		if raceEnabled {
			t.Skip("the race detector's shadow memory fails under the worker's RLIMIT_AS with its own message")
		}
		c := testCache(t)
		c.limits = Limits{MaxRenderMemory: 256 << 20}
		_, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "doubling"}, "")
		var le *LimitError
		if !errors.As(err, &le) || le.Field != FieldMaxRenderMemory || !strings.HasPrefix(err.Error(), "helm template doubling at ") {
			t.Fatalf("err = %v, want a limit error of helm template naming %s", err, FieldMaxRenderMemory)
		}
		t.Log(err)
	})
}

// BenchmarkRenderHelmChart renders a 200-object chart through the cache:
// the render worker, the Git tree view and the objects' transfer included
// (docs/benchmarks.md sets it next to helm template).
func BenchmarkRenderHelmChart(b *testing.B) {
	r := newTestRepo(b)
	r.write("large/Chart.yaml", "apiVersion: v2\nname: large\nversion: 1.0.0\n")
	r.write("large/values.yaml", "count: 100\nimage: {repository: nginx, tag: \"1.27\"}\n")
	r.write("large/templates/workloads.yaml", "{{- range $i := until (int .Values.count) }}\n{{- $name := printf \"svc-%03d\" $i }}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: {{ $name }}, labels: {app: {{ $name }}, release: {{ $.Release.Name }}}}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: {{ $name }}}}\n  template:\n    metadata: {labels: {app: {{ $name }}}}\n    spec: {containers: [{name: app, image: \"{{ $.Values.image.repository }}:{{ $.Values.image.tag }}\"}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: {{ $name }}}\nspec: {selector: {app: {{ $name }}}, ports: [{port: 80}]}\n{{- end }}\n")
	r.commit("large")
	c := &Cache{dir: b.TempDir(), local: []string{testTempRoot(b)}}
	src := v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "large", Helm: &v1alpha1.HelmSource{ReleaseName: "large", Namespace: "bench"}}
	for b.Loop() {
		got, err := c.Render(b.Context(), src, "")
		if err != nil || len(got.Objects) != 200 {
			b.Fatalf("%v", err)
		}
	}
}
