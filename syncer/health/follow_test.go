package health

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Follow's watch is by one name (fieldSelector metadata.name=NAME, which
// kube-apiserver authorizes on that name). deputy validates names only as
// path segments, so a name may hold "," or "=" (RBAC kinds accept such
// names): the selector must stay one term equal to the whole name, never
// become a second requirement that follows another object or widens the
// watch to every name (attack 15, hypothesis 6).
func TestFollowWatchesExactlyOneNameWhateverItHolds(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	const name = `x,metadata.name=victim,metadata.namespace!=a\b`
	cl := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "RoleList"})
	var selectors []fields.Requirements
	cl.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		selectors = append(selectors, a.(k8stesting.WatchActionImpl).WatchRestrictions.Fields.Requirements())
		w := watch.NewFake()
		go w.Add(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
			"metadata": map[string]any{"name": name, "namespace": "ns", "resourceVersion": "2"}}})
		return true, w, nil
	})
	err := Follow(context.Background(), cl.Resource(gvr).Namespace("ns"), name, "1", func(u *unstructured.Unstructured) bool { return u != nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(selectors) != 1 {
		t.Fatalf("watches: %q", selectors)
	}
	if reqs := selectors[0]; len(reqs) != 1 || reqs[0].Field != "metadata.name" || reqs[0].Operator != selection.Equals || reqs[0].Value != name {
		t.Errorf("the watch's fieldSelector parses to %+v, want the one term metadata.name=%q", reqs, name)
	}
}
