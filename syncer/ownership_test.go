package syncer

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/cluster"
)

// ownershipCluster is a fake kube-apiserver serving ConfigMaps of namespace
// guestbook (discovery, SelfSubjectAccessReviews, metadata lists and reads,
// server-side apply, delete) and the guestbook-deployer ServiceAccount.
// Everything else is 404. denied verbs on configmaps are refused both by the
// access reviews and by the requests themselves.
type ownershipCluster struct {
	mu      sync.Mutex
	objects map[string]map[string]string // ConfigMap name -> annotations
	denied  map[string]bool              // verb -> refused
	writes  []string                     // "apply NAME", "apply NAME (dry run)", "delete NAME"
}

const ownershipPrefix = "/api/v1/namespaces/guestbook/configmaps"

func (c *ownershipCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	reply := func(code int, v any) {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	status := func(code int, reason metav1.StatusReason) {
		reply(code, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: int32(code), Reason: reason, Message: "the fake says " + string(reason)})
	}
	deny := func(verb string) bool {
		if c.denied[verb] {
			status(http.StatusForbidden, metav1.StatusReasonForbidden)
			return true
		}
		return false
	}
	meta := func(name string) metav1.PartialObjectMetadata {
		return metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "guestbook", Name: name, UID: k8stypes.UID("uid-" + name), Annotations: c.objects[name]}}
	}
	p := r.URL.Path
	switch {
	case r.Method == http.MethodGet && p == "/api":
		reply(200, map[string]any{"kind": "APIVersions", "versions": []string{"v1"},
			"serverAddressByClientCIDRs": []any{map[string]any{"clientCIDR": "0.0.0.0/0", "serverAddress": "fake"}}})
	case r.Method == http.MethodGet && p == "/apis":
		reply(200, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{}})
	case r.Method == http.MethodGet && p == "/api/v1":
		verbs := []string{"create", "delete", "get", "list", "patch", "update", "watch"}
		reply(200, map[string]any{"kind": "APIResourceList", "groupVersion": "v1", "resources": []any{
			map[string]any{"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap", "verbs": verbs},
			map[string]any{"name": "namespaces", "singularName": "namespace", "namespaced": false, "kind": "Namespace", "verbs": verbs},
			map[string]any{"name": "serviceaccounts", "singularName": "serviceaccount", "namespaced": true, "kind": "ServiceAccount", "verbs": verbs},
		}})
	case r.Method == http.MethodGet && p == "/api/v1/namespaces/guestbook/serviceaccounts/guestbook-deployer":
		reply(200, map[string]any{"kind": "ServiceAccount", "apiVersion": "v1", "metadata": map[string]any{"name": "guestbook-deployer", "namespace": "guestbook"}})
	case r.Method == http.MethodPost && p == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
		var review authorizationv1.SelfSubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Spec.ResourceAttributes == nil {
			status(http.StatusBadRequest, metav1.StatusReasonBadRequest)
			return
		}
		a := review.Spec.ResourceAttributes
		review.Status.Allowed = a.Resource == "configmaps" && a.Namespace == "guestbook" && !c.denied[a.Verb]
		reply(http.StatusCreated, review)
	case r.Method == http.MethodGet && p == ownershipPrefix:
		if deny("list") {
			return
		}
		list := metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadataList", APIVersion: "meta.k8s.io/v1"}}
		for _, name := range c.names() {
			list.Items = append(list.Items, meta(name))
		}
		reply(200, list)
	case strings.HasPrefix(p, ownershipPrefix+"/"):
		name := strings.TrimPrefix(p, ownershipPrefix+"/")
		_, exists := c.objects[name]
		switch r.Method {
		case http.MethodGet:
			if deny("get") {
				return
			}
			if !exists {
				status(http.StatusNotFound, metav1.StatusReasonNotFound)
				return
			}
			reply(200, meta(name))
		case http.MethodPatch:
			if deny("patch") || (!exists && deny("create")) {
				return
			}
			body, _ := io.ReadAll(r.Body)
			var u unstructured.Unstructured
			if err := u.UnmarshalJSON(body); err != nil {
				status(http.StatusBadRequest, metav1.StatusReasonBadRequest)
				return
			}
			if r.URL.Query().Get("dryRun") == "All" {
				c.writes = append(c.writes, "apply "+name+" (dry run)")
			} else {
				c.writes = append(c.writes, "apply "+name)
				c.objects[name] = u.GetAnnotations()
			}
			code := http.StatusOK
			if !exists {
				code = http.StatusCreated
			}
			reply(code, u.Object)
		case http.MethodDelete:
			if deny("delete") {
				return
			}
			c.writes = append(c.writes, "delete "+name)
			delete(c.objects, name)
			reply(200, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
		default:
			status(http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed)
		}
	default:
		status(http.StatusNotFound, metav1.StatusReasonNotFound)
	}
}

func (c *ownershipCluster) names() []string {
	var out []string
	for n := range c.objects {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ownershipSync runs an operation's cluster phases (plan, preflight, apply,
// prune) for the ConfigMaps named against the fake cluster, as the
// guestbook-deployer ServiceAccount, and returns its final state.
func ownershipSync(t *testing.T, c *ownershipCluster, prune, dryRun bool, rendered ...string) *v1alpha1.OperationState {
	t.Helper()
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	op, compiled := testOperation(t, guestbookProject())
	// JSON: the fake speaks no protobuf.
	op.e.opts.Clusters = cluster.NewRegistry(cluster.InCluster(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}))
	op.req.Sync.Prune, op.req.Sync.DryRun = prune, dryRun
	id := identity{username: "system:serviceaccount:guestbook:guestbook-deployer", status: "system:serviceaccount:guestbook:guestbook-deployer"}
	op.setIdentity(id.status)
	cl, err := op.clientsFor(t.Context(), InClusterServer, id)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, name := range rendered {
		u := obj("v1", "ConfigMap", "", name)
		u.Object["data"] = map[string]any{"k": "v"}
		objs = append(objs, u)
	}
	p, err := op.plan(t.Context(), cl, compiled, objs)
	if err != nil {
		t.Fatal(err)
	}
	if pf, err := op.preflight(t.Context(), cl, id, p); err != nil {
		op.fail(err)
	} else {
		op.run(t.Context(), cl, p, pf)
	}
	return op.finish()
}

// ownershipResults maps each resource's name to "Status: message".
func ownershipResults(st *v1alpha1.OperationState) map[string]string {
	out := map[string]string{}
	if st.SyncResult != nil {
		for _, r := range st.SyncResult.Resources {
			out[r.Name] = r.Status + ": " + r.Message
		}
	}
	return out
}

// An object is managed by one Application only: one whose live tracking
// annotation names another Application is neither applied nor pruned by
// this one, and its resource fails naming the other Application and the fix
// (Argo CD's shared-resource rule, as an error).
func TestObjectsTrackedByAnotherApplication(t *testing.T) {
	const self, other = "argocd/guestbook", "argocd/other"
	tracked := func(app string) map[string]string { return map[string]string{TrackingAnnotation: app} }
	newCluster := func(denied ...string) *ownershipCluster {
		c := &ownershipCluster{objects: map[string]map[string]string{
			"shared":  tracked(other),
			"adopted": {"note": "created by hand, tracked by nobody"},
			"mine":    tracked(self),
			"orphan":  tracked(self), // this Application's, no longer rendered
		}, denied: map[string]bool{}}
		for _, v := range denied {
			c.denied[v] = true
		}
		return c
	}
	wantShared := func(t *testing.T, got string) {
		t.Helper()
		for _, want := range []string{"SyncFailed: ", "ConfigMap guestbook/shared is tracked by Application " + other,
			"remove it from one of the two repositories", "Applications " + other + " and " + self} {
			if !strings.Contains(got, want) {
				t.Errorf("shared: %q, want it to contain %q", got, want)
			}
		}
	}

	for _, tc := range []struct {
		name       string
		denied     []string
		prune, dry bool
		rendered   []string
		wantPhase  string
		wantWrites []string
		want       map[string]string // name -> prefix of "Status: message"; "shared" is checked by wantShared
	}{
		{name: "the other Application's object fails untouched while the rest is applied, and prune waits",
			prune: true, rendered: []string{"shared", "adopted", "mine", "new"}, wantPhase: v1alpha1.OperationFailed,
			wantWrites: []string{"apply adopted", "apply mine", "apply new"},
			want: map[string]string{"adopted": "Synced: configured", "mine": "Synced: configured", "new": "Synced: created",
				"orphan": "PruneSkipped: not pruned: 1 resources failed"}},
		{name: "a dry run reports the same failure",
			dry: true, rendered: []string{"shared", "adopted"}, wantPhase: v1alpha1.OperationFailed,
			wantWrites: []string{"apply adopted (dry run)"},
			want:       map[string]string{"adopted": "Synced: configured (dry run)"}},
		{name: "where the identity may not list, each object is read to see its tracking annotation",
			denied: []string{"list"}, rendered: []string{"shared", "adopted", "new"}, wantPhase: v1alpha1.OperationFailed,
			wantWrites: []string{"apply adopted", "apply new"},
			want:       map[string]string{"adopted": "Synced: configured", "new": "Synced: created"}},
		{name: "objects tracked by nobody or by this Application are applied, and prune deletes only this Application's",
			prune: true, rendered: []string{"adopted", "mine"}, wantPhase: v1alpha1.OperationSucceeded,
			wantWrites: []string{"apply adopted", "apply mine", "delete orphan"},
			want:       map[string]string{"adopted": "Synced: configured", "mine": "Synced: configured", "orphan": "Pruned: pruned"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(tc.denied...)
			st := ownershipSync(t, c, tc.prune, tc.dry, tc.rendered...)
			if st.Phase != tc.wantPhase {
				t.Errorf("phase %s (%s), want %s", st.Phase, st.Message, tc.wantPhase)
			}
			got := ownershipResults(st)
			if slices.Contains(tc.rendered, "shared") {
				wantShared(t, got["shared"])
			}
			for name, want := range tc.want {
				if !strings.HasPrefix(got[name], want) {
					t.Errorf("%s: %q, want it to start with %q", name, got[name], want)
				}
			}
			if _, ok := got["shared"]; ok != slices.Contains(tc.rendered, "shared") {
				t.Errorf("results %v: shared is reported only when rendered", got)
			}
			writes := slices.Clone(c.writes)
			sort.Strings(writes)
			if !slices.Equal(writes, tc.wantWrites) {
				t.Errorf("writes %q, want %q", writes, tc.wantWrites)
			}
			if c.objects["shared"][TrackingAnnotation] != other {
				t.Errorf("the other Application's object now carries %v", c.objects["shared"])
			}
		})
	}

	t.Run("where the identity may neither list nor read, get is reported missing and nothing is applied blind", func(t *testing.T) {
		c := newCluster("list", "get")
		st := ownershipSync(t, c, false, false, "shared", "adopted", "new")
		want := "get configmaps named adopted, new, shared in namespace guestbook, for ConfigMap guestbook/adopted (to check its tracking annotation), "
		if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "preflight failed") || !strings.Contains(st.Message, want) {
			t.Errorf("phase %s, message:\n%s\nwant Error with %q", st.Phase, st.Message, want)
		}
		// The Role holds everything the sync needs (preflight_rbac_test.go), get included.
		if !strings.Contains(st.Message, "  resources:\n  - configmaps\n  verbs:\n  - get\n  - list\n  - create\n  - patch\n") {
			t.Errorf("the report's Role does not grant get (and the rest the sync needs) on ConfigMaps:\n%s", st.Message)
		}
		if len(c.writes) != 0 {
			t.Errorf("writes %q, want none", c.writes)
		}
	})
}
