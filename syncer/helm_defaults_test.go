package syncer

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/source"
)

// A chart's release is named after the Application and installed in the
// destination's namespace unless spec.source.helm says otherwise (Argo
// CD's defaults); the Application itself is not changed.
func TestHelmDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		helm *v1alpha1.HelmSource
		want v1alpha1.HelmSource
	}{
		{"no helm field takes both defaults", nil, v1alpha1.HelmSource{ReleaseName: "guestbook", Namespace: "web"}},
		{"releaseName and namespace win", &v1alpha1.HelmSource{ReleaseName: "gb", Namespace: "other", SkipCrds: true},
			v1alpha1.HelmSource{ReleaseName: "gb", Namespace: "other", SkipCrds: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := &v1alpha1.Application{ObjectMeta: metav1.ObjectMeta{Name: "guestbook", Namespace: "argocd"}}
			app.Spec.Destination.Namespace = "web"
			app.Spec.Source.Helm = tc.helm.DeepCopy()
			if diff := cmp.Diff(tc.want, *source.HelmDefaults(app, app.Spec.Source).Helm); diff != "" {
				t.Errorf("helm (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.helm, app.Spec.Source.Helm); diff != "" {
				t.Errorf("the Application changed (-want +got):\n%s", diff)
			}
		})
	}
}

// A chart in the source's path renders with Helm in the engine's render
// worker, its release named after the Application in the destination's
// namespace; a chart that fails ends the operation in Error before the
// cluster is touched, naming the chart and Helm's template and line.
func TestRunRendersAChartWithArgoCDsDefaults(t *testing.T) {
	f := newEngineFixture(t, ImpersonationSettings{Enabled: true, Enforced: true})
	f.fake.serveDiscovery = true
	f.commitFiles(t, map[string]string{
		"chart/Chart.yaml":          "apiVersion: v2\nname: web\nversion: 0.1.0\n",
		"chart/templates/fail.yaml": "{{ if .Values.fail }}{{ fail (printf \"release %s in %s\" .Release.Name .Release.Namespace) }}{{ end }}\n",
		"chart/templates/cm.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}}\n",
	})

	failing := f.app(func(a *v1alpha1.Application) {
		a.Spec.Source.Path = "chart"
		a.Spec.Source.Helm = &v1alpha1.HelmSource{Parameters: []v1alpha1.HelmParameter{{Name: "fail", Value: "true"}}}
	})
	st := f.engine.Run(t.Context(), Request{Application: failing, Project: f.project}, nil)
	if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "helm template of chart web (chart): execution error at (web/templates/fail.yaml:1:24): release guestbook in guestbook") {
		t.Errorf("phase %s: %s", st.Phase, st.Message)
	}
	if len(f.fake.requests) != 1 || !strings.HasPrefix(f.fake.requests[0], "POST /apis/authentication.k8s.io/v1/selfsubjectreviews") {
		t.Errorf("a chart that fails to render touched the cluster beyond discovery: %v", f.fake.requests)
	}

	st = f.engine.Run(t.Context(), Request{Application: f.app(func(a *v1alpha1.Application) { a.Spec.Source.Path = "chart" }), Project: f.project}, nil)
	if st.Phase != v1alpha1.OperationError || !strings.HasPrefix(st.Message, "preflight: ") {
		t.Errorf("a chart that renders goes on to the cluster; phase %s: %s", st.Phase, st.Message)
	}
}
