package syncer

import (
	"testing"

	"deputy.dev/deputy/policy/v1alpha1"
)

// The render key changes with anything that changes the render, and is
// empty without fixed revisions.
func TestRenderKey(t *testing.T) {
	app := &v1alpha1.Application{}
	app.Namespace, app.Name = "argocd", "guestbook"
	app.Spec.Source = v1alpha1.ApplicationSource{RepoURL: "https://git.example/repo", Path: "app"}
	if k := renderKey(app, v1alpha1.SyncOperation{}); k != "" {
		t.Errorf("key without revisions: %q", k)
	}
	base := renderKey(app, v1alpha1.SyncOperation{Revision: "abc"})
	other := app.DeepCopy()
	other.Spec.Source.Path = "other"
	for name, k := range map[string]string{
		"another revision": renderKey(app, v1alpha1.SyncOperation{Revision: "def"}),
		"another path":     renderKey(other, v1alpha1.SyncOperation{Revision: "abc"}),
	} {
		if k == base {
			t.Errorf("%s: same key", name)
		}
	}
}
