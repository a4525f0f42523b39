package syncer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func TestSelectPruneCandidates(t *testing.T) {
	scope := pruneScope{gvk: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, namespace: "guestbook"}
	yes := true
	now := metav1.Now()
	item := func(name string, ann map[string]string, mutate ...func(*metav1.PartialObjectMetadata)) metav1.PartialObjectMetadata {
		m := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "guestbook", Name: name, UID: types.UID("uid-" + name), Annotations: ann,
			Labels: map[string]string{"app": "guestbook"}}}
		for _, f := range mutate {
			f(&m)
		}
		return m
	}
	ours := map[string]string{TrackingAnnotation: "argocd/guestbook"}
	items := []metav1.PartialObjectMetadata{
		item("removed-from-git", ours),
		item("still-rendered", ours),
		item("same-labels-no-annotation", nil),
		item("other-app", map[string]string{TrackingAnnotation: "argocd/other"}),
		item("prefix-of-ours", map[string]string{TrackingAnnotation: "argocd/guestbook-2"}),
		item("owned-by-a-controller", ours, func(m *metav1.PartialObjectMetadata) {
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "u", Controller: &yes}}
		}),
		item("owned-not-controller", ours, func(m *metav1.PartialObjectMetadata) {
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u"}}
		}),
		item("being-deleted", ours, func(m *metav1.PartialObjectMetadata) { m.DeletionTimestamp = &now }),
	}
	rendered := map[objKey]bool{{kind: "ConfigMap", namespace: "guestbook", name: "still-rendered"}: true}
	var got []string
	for _, c := range selectPruneCandidates(scope, items, "argocd/guestbook", rendered, false) {
		got = append(got, c.name)
		if c.uid != types.UID("uid-"+c.name) {
			t.Errorf("%s carries uid %s", c.name, c.uid)
		}
	}
	if diff := cmp.Diff([]string{"removed-from-git", "owned-not-controller"}, got); diff != "" {
		t.Errorf("only tracked objects that are not rendered, not owned by a controller, not being deleted (-want +got):\n%s", diff)
	}
}

func TestPruneCandidateGroups(t *testing.T) {
	for _, tc := range []struct {
		gvk  schema.GroupVersionKind
		ns   string
		want applyGroup
	}{
		{schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, "", groupNamespaces},
		{schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}, "", groupCRDs},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, "", groupCluster},
		{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "x", groupNamespaced},
	} {
		c := &pruneCandidate{scope: pruneScope{gvk: tc.gvk}, namespace: tc.ns}
		if got := c.applyGroup(); got != tc.want {
			t.Errorf("%s: group %s, want %s", tc.gvk.Kind, got, tc.want)
		}
	}
}

// An object is skipped only when deputy applied exactly this body last and
// nobody else has written it since.
func TestUnchangedFrom(t *testing.T) {
	apply := metav1.ManagedFieldsEntry{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply}
	now := metav1.Now()
	for _, tc := range []struct {
		name   string
		digest string
		fields []metav1.ManagedFieldsEntry
		del    *metav1.Time
		want   bool
	}{
		{"deputy's last apply of the same body", "d1", []metav1.ManagedFieldsEntry{apply}, nil, true},
		{"another body", "d0", []metav1.ManagedFieldsEntry{apply}, nil, false},
		{"edited by someone else since", "d1", []metav1.ManagedFieldsEntry{apply, {Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate}}, nil, false},
		{"an update under deputy's name", "d1", []metav1.ManagedFieldsEntry{apply, {Manager: FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}}, nil, false},
		// A controller's status writes (a rollout) cannot change what
		// deputy applied; a scale subresource write can (spec.replicas).
		{"a status writer", "d1", []metav1.ManagedFieldsEntry{apply, {Manager: "controller", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"}}, nil, true},
		{"a status writer before deputy", "d1", []metav1.ManagedFieldsEntry{{Manager: "controller", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"}, apply}, nil, true},
		{"a status writer alone", "d1", []metav1.ManagedFieldsEntry{{Manager: "controller", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"}}, nil, false},
		{"a scale writer", "d1", []metav1.ManagedFieldsEntry{apply, {Manager: "hpa", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "scale"}}, nil, false},
		{"managed fields cleared", "d1", nil, nil, false},
		{"being deleted", "d1", []metav1.ManagedFieldsEntry{apply}, &now, false},
		{"no digest recorded", "", []metav1.ManagedFieldsEntry{apply}, nil, false},
	} {
		m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x", ManagedFields: tc.fields, DeletionTimestamp: tc.del}}
		if tc.digest != "" {
			m.Annotations = map[string]string{appliedDigestAnnotation: tc.digest}
		}
		if got := liveFrom(m).unchangedFrom("d1"); got != tc.want {
			t.Errorf("%s: unchanged = %t, want %t", tc.name, got, tc.want)
		}
	}
	var missing *liveObject
	if missing.unchangedFrom("d1") {
		t.Error("an object that does not exist is unchanged")
	}
}
