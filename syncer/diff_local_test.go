package syncer

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy/v1alpha1"
)

// localConfigMap is a ConfigMap of a diff --local.
func localConfigMap(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name}, "data": map[string]any{"k": "local"}}}
}

// DiffRequest.Objects replace the render: a source path that does not
// exist is never read, the objects are diffed (here: the fake denies the
// dry run, so each is an error naming it) and the answer has no revisions.
func TestDiffLocalObjectsBypassTheRender(t *testing.T) {
	f := newEngineFixture(t, ImpersonationSettings{})
	f.fake.serveDiscovery = true
	app := f.app(func(a *v1alpha1.Application) { a.Spec.Source.Path = "does-not-exist" })
	objs := []*unstructured.Unstructured{localConfigMap("local-a"), localConfigMap("local-b")}
	d, err := f.engine.Diff(t.Context(), DiffRequest{Application: app, Project: f.project, Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Revisions) != 0 {
		t.Errorf("revisions %v, want none", d.Revisions)
	}
	var names []string
	for _, r := range d.Resources {
		if r.Action != v1alpha1.DiffActionPrune {
			names = append(names, r.Kind+"/"+r.Namespace+"/"+r.Name)
		}
	}
	if strings.Join(names, " ") != "ConfigMap/guestbook/local-a ConfigMap/guestbook/local-b" {
		t.Errorf("resources %v", d.Resources)
	}
	if objs[0].GetAnnotations() != nil || objs[0].GetNamespace() != "" {
		t.Errorf("the caller's objects were changed: %v", objs[0].Object)
	}
	// Without Objects the same Application fails to render.
	if _, err := f.engine.Diff(t.Context(), DiffRequest{Application: app, Project: f.project}); err == nil || !strings.Contains(err.Error(), "failed to render") {
		t.Errorf("render of a missing path: %v", err)
	}
}

// The project checks every local object as it checks rendered ones.
func TestDiffLocalObjectsAreCheckedByTheProject(t *testing.T) {
	f := newEngineFixture(t, ImpersonationSettings{})
	f.fake.serveDiscovery = true
	f.project.Spec.NamespaceResourceBlacklist = []metav1.GroupKind{{Group: "", Kind: "ConfigMap"}}
	_, err := f.engine.Diff(t.Context(), DiffRequest{Application: f.app(), Project: f.project,
		Objects: []*unstructured.Unstructured{localConfigMap("local-a")}})
	if err == nil || !strings.Contains(err.Error(), `the manifests break AppProject "guestbook"`) || !strings.Contains(err.Error(), "ConfigMap") {
		t.Errorf("err = %v", err)
	}
	for _, r := range f.fake.requests {
		if strings.HasPrefix(r, "PATCH ") {
			t.Errorf("a forbidden object was dry-run: %s", r)
		}
	}
}
