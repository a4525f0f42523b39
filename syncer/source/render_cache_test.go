package source

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	c := NewRenderCache()
	c.Put("a", objs(3))
	got, ok := c.Get("a")
	if !ok || len(got) != 3 {
		t.Fatalf("get(a) = %d objects, %v", len(got), ok)
	}
	got[0].SetName("changed")
	if again, _ := c.Get("a"); again[0].GetName() != "cm-0" {
		t.Error("the cache handed out its own objects")
	}
	c.Put("", objs(1))
	if _, ok := c.Get(""); ok {
		t.Error("a render without a key was kept")
	}
	c.Put("huge", objs(MaxCachedObjects+1))
	if _, ok := c.Get("huge"); ok {
		t.Error("a render over the object budget was kept")
	}
	c.Put("b", objs(MaxCachedObjects-3))
	if _, ok := c.Get("a"); !ok {
		t.Error("a was dropped although both fit")
	}
	c.Put("c", objs(2)) // over budget: the least recently used (b) goes
	if _, ok := c.Get("b"); ok {
		t.Error("b is still cached over the budget")
	}
	if _, ok := c.Get("c"); !ok || c.objects != 5 {
		t.Errorf("c: %v, objects held %d, want 5", ok, c.objects)
	}
}
