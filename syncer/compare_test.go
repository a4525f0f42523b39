package syncer

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy/v1alpha1"
)

func objs(n int) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, n)
	for i := range out {
		out[i] = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%d", i)}}}
	}
	return out
}

// The render cache hands out copies, keeps no render without fixed
// revisions, and stays within its object budget by dropping the least
// recently used renders.
func TestRenderCache(t *testing.T) {
	c := newRenderCache()
	c.put("a", objs(3))
	got, ok := c.get("a")
	if !ok || len(got) != 3 {
		t.Fatalf("get(a) = %d objects, %v", len(got), ok)
	}
	got[0].SetName("changed")
	if again, _ := c.get("a"); again[0].GetName() != "cm-0" {
		t.Error("the cache handed out its own objects")
	}
	c.put("", objs(1))
	if _, ok := c.get(""); ok {
		t.Error("a render without a key was kept")
	}
	c.put("huge", objs(maxCachedObjects+1))
	if _, ok := c.get("huge"); ok {
		t.Error("a render over the object budget was kept")
	}
	c.put("b", objs(maxCachedObjects-3))
	if _, ok := c.get("a"); !ok {
		t.Error("a was dropped although both fit")
	}
	c.put("c", objs(2)) // over budget: the least recently used (b) goes
	if _, ok := c.get("b"); ok {
		t.Error("b is still cached over the budget")
	}
	if _, ok := c.get("c"); !ok || c.objects != 5 {
		t.Errorf("c: %v, objects held %d, want 5", ok, c.objects)
	}
}

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
