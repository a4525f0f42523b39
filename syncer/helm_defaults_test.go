package syncer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
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
			op := &operation{app: app}
			if diff := cmp.Diff(tc.want, *op.source().Helm); diff != "" {
				t.Errorf("helm (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.helm, app.Spec.Source.Helm); diff != "" {
				t.Errorf("the Application changed (-want +got):\n%s", diff)
			}
		})
	}
}
