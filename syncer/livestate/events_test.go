package livestate

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

func TestChanged(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := func() *metav1.PartialObjectMetadata {
		o := object("Deployment", "a", "web", "argocd/app")
		o.Generation = 3
		o.Labels = map[string]string{"app": "web"}
		o.ManagedFields = []metav1.ManagedFieldsEntry{
			managed("deputy", "", `{"f:spec":{}}`, t0),
			managed("kube-controller-manager", "status", `{"f:status":{}}`, t0),
		}
		return o
	}
	yes := true
	for _, tc := range []struct {
		name string
		edit func(o *metav1.PartialObjectMetadata)
		want bool
	}{
		{"nothing (a resync, a relist)", func(*metav1.PartialObjectMetadata) {}, false},
		{"resourceVersion only", func(o *metav1.PartialObjectMetadata) { o.ResourceVersion = "99" }, false},
		{"status fields and time", func(o *metav1.PartialObjectMetadata) {
			o.ManagedFields[1] = managed("kube-controller-manager", "status", `{"f:status":{"f:ready":{}}}`, t0.Add(time.Hour))
		}, false},
		{"a second status writer", func(o *metav1.PartialObjectMetadata) {
			o.ManagedFields = append(o.ManagedFields, managed("hpa", "status", `{"f:status":{}}`, t0))
		}, false},
		{"entries reordered, times changed", func(o *metav1.PartialObjectMetadata) {
			a, b := o.ManagedFields[0], o.ManagedFields[1]
			a.Time = &metav1.Time{Time: t0.Add(time.Minute)}
			o.ManagedFields = []metav1.ManagedFieldsEntry{b, a}
		}, false},
		{"no owners, empty owners", func(o *metav1.PartialObjectMetadata) { o.OwnerReferences = []metav1.OwnerReference{} }, false},
		{"another manager's fields", func(o *metav1.PartialObjectMetadata) {
			o.ManagedFields = append(o.ManagedFields, managed("kubectl-edit", "", `{"f:spec":{"f:replicas":{}}}`, t0))
		}, true},
		{"a manager's fields", func(o *metav1.PartialObjectMetadata) {
			o.ManagedFields[0].FieldsV1.Raw = []byte(`{"f:spec":{"f:x":{}}}`)
		}, true},
		{"a manager's apiVersion", func(o *metav1.PartialObjectMetadata) { o.ManagedFields[0].APIVersion = "v2" }, true},
		{"a manager's operation", func(o *metav1.PartialObjectMetadata) {
			o.ManagedFields[0].Operation = metav1.ManagedFieldsOperationApply
		}, true},
		{"a scale subresource write", func(o *metav1.PartialObjectMetadata) {
			o.ManagedFields = append(o.ManagedFields, managed("kubectl", "scale", `{"f:spec":{"f:replicas":{}}}`, t0))
		}, true},
		{"generation", func(o *metav1.PartialObjectMetadata) { o.Generation++ }, true},
		{"labels", func(o *metav1.PartialObjectMetadata) { o.Labels["app"] = "db" }, true},
		{"annotations", func(o *metav1.PartialObjectMetadata) { o.Annotations["x"] = "y" }, true},
		{"deletion", func(o *metav1.PartialObjectMetadata) { o.DeletionTimestamp = &metav1.Time{Time: t0} }, true},
		{"owners", func(o *metav1.PartialObjectMetadata) {
			o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u", Controller: &yes}}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := base(), base()
			tc.edit(after)
			if got := Changed(before, after); got != tc.want {
				t.Errorf("Changed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHandler(t *testing.T) {
	var got []string
	scope := Scope{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "a"}
	c := &Cache{opts: Options{TrackingAnnotation: tracking, OnChange: func(s string, in Scope) {
		if in != scope {
			t.Errorf("OnChange(%q) from scope %v, want %v", s, in, scope)
		}
		got = append(got, s)
	}}}
	h := c.handler(scope)
	tracked, untracked := object("ConfigMap", "a", "t", "argocd/app"), object("ConfigMap", "a", "u", "")
	h.OnAdd(tracked, true) // the first list
	h.OnAdd(untracked, false)
	h.OnUpdate(untracked, untracked)
	h.OnUpdate(tracked, tracked) // a resync
	h.OnDelete(untracked)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "a/u", Obj: untracked})
	h.OnDelete("not an object")
	if len(got) != 0 {
		t.Fatalf("OnChange(%v) for the first list, untracked objects, resyncs", got)
	}
	h.OnAdd(tracked, false)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "a/t", Obj: tracked})
	untrack := tracked.DeepCopy()
	delete(untrack.Annotations, tracking)
	h.OnUpdate(tracked, untrack)
	h.OnUpdate(untrack, tracked)
	want := []string{"argocd/app", "argocd/app", "argocd/app", "argocd/app"}
	if len(got) != len(want) {
		t.Fatalf("OnChange calls %v, want %v", got, want)
	}
}
