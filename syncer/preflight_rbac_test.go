package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/cluster"
	"deputy.dev/deputy/syncer/permissions"
)

// rbacCluster is ownershipCluster with the ServiceAccount's permissions on
// ConfigMaps of guestbook given by RBAC rules, as kube-apiserver decides
// them: the Role the preflight suggests (which applying the suggestion
// replaces) plus other grants. The access reviews and the requests
// themselves both follow the rules; a server-side apply that creates needs
// create too.
type rbacCluster struct {
	*ownershipCluster
	mu sync.Mutex
	// role is the suggested Role deputy-sync-guestbook in guestbook.
	role []rbacv1.PolicyRule
}

func (c *rbacCluster) allows(verb, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "system:serviceaccount:guestbook:guestbook-deployer"},
		Verb: verb, Namespace: "guestbook", Resource: "configmaps", Name: name, ResourceRequest: true}
	// deputy's RBAC evaluator over the Role, bound to the ServiceAccount.
	rbac, err := policy.NewRBAC(policy.RBACObjects{
		Roles: []*rbacv1.Role{{ObjectMeta: metav1.ObjectMeta{Namespace: "guestbook", Name: "granted"}, Rules: c.role}},
		RoleBindings: []*rbacv1.RoleBinding{{ObjectMeta: metav1.ObjectMeta{Namespace: "guestbook", Name: "granted"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "granted"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "guestbook", Name: "guestbook-deployer"}}}},
	}, false)
	if err != nil {
		return false
	}
	d, _, _ := deputyauthz.NewRBAC(func() *policy.Snapshot { return &policy.Snapshot{RBAC: rbac} }).Authorize(context.Background(), a)
	return d == authorizer.DecisionAllow
}

func (c *rbacCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	forbid := func() {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: "the RBAC fake says no"})
	}
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && p == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
		var review authorizationv1.SelfSubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Spec.ResourceAttributes == nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		a := review.Spec.ResourceAttributes
		review.Status.Allowed = a.Group == "" && a.Resource == "configmaps" && a.Namespace == "guestbook" && c.allows(a.Verb, a.Name)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(review)
		return
	case p == ownershipPrefix && r.Method == http.MethodGet:
		if !c.allows("list", "") {
			forbid()
			return
		}
	case strings.HasPrefix(p, ownershipPrefix+"/"):
		name := strings.TrimPrefix(p, ownershipPrefix+"/")
		c.ownershipCluster.mu.Lock()
		_, exists := c.objects[name]
		c.ownershipCluster.mu.Unlock()
		verb := map[string]string{http.MethodGet: "get", http.MethodPatch: "patch", http.MethodDelete: "delete"}[r.Method]
		if !c.allows(verb, name) || (r.Method == http.MethodPatch && !exists && !c.allows("create", name)) {
			forbid()
			return
		}
	}
	c.ownershipCluster.ServeHTTP(w, r)
}

// applySuggestion does what `kubectl apply -f -` of a failed preflight's
// RBAC objects does to this cluster: the Role deputy-sync-guestbook in
// guestbook becomes the suggested one (its binding is assumed). Anything
// else the suggestion holds fails the test: the sync needs nothing else.
func (c *rbacCluster) applySuggestion(t *testing.T, message string) {
	t.Helper()
	_, docs, ok := strings.Cut(message, "(kubectl apply -f -):\n")
	if !ok {
		t.Fatalf("no RBAC objects in the report:\n%s", message)
	}
	for _, doc := range strings.Split(strings.TrimPrefix(docs, "---\n"), "---\n") {
		var obj struct {
			Kind     string
			Metadata metav1.ObjectMeta
			Rules    []rbacv1.PolicyRule
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		switch {
		case obj.Kind == "Role" && obj.Metadata.Namespace == "guestbook" && obj.Metadata.Name == "deputy-sync-guestbook":
			c.mu.Lock()
			c.role = obj.Rules
			c.mu.Unlock()
		case obj.Kind == "RoleBinding" && obj.Metadata.Namespace == "guestbook" && obj.Metadata.Name == "deputy-sync-guestbook":
		default:
			t.Errorf("unexpected object in the suggestion:\n%s", doc)
		}
	}
}

// preflightSync runs an operation's cluster phases against h as
// ownershipSync does.
func preflightSync(t *testing.T, h http.Handler, prune bool, rendered ...string) *v1alpha1.OperationState {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	op, compiled := testOperation(t, guestbookProject())
	op.e.opts.Clusters = cluster.NewRegistry(cluster.InCluster(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}))
	op.req.Sync.Prune = prune
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

// The preflight reports every permission the whole operation needs in one
// go (prune's list and delete too, though what prune would delete is not
// known until it may list), and its Role holds everything the operation
// needs, so that applying it converges in one step: no alternation between
// apply's and prune's permissions under the Role's fixed name.
func TestPreflightSuggestionConvergesInOneStep(t *testing.T) {
	tracked := map[string]string{TrackingAnnotation: "argocd/guestbook"}
	everything := "- apiGroups:\n  - \"\"\n  resources:\n  - configmaps\n  verbs:\n  - get\n  - list\n  - create\n  - patch\n  - delete\n"
	for _, tc := range []struct {
		name string
		// granted is the Role before the first sync.
		granted     []rbacv1.PolicyRule
		wantMissing []string // the report's lines, in order
	}{
		{
			name: "nothing granted: one report names list, get, create, patch and delete",
			wantMissing: []string{
				"  - get configmaps named mine, new in namespace guestbook, for ConfigMap guestbook/mine (to check its tracking annotation), ConfigMap guestbook/new (to check its tracking annotation)\n",
				"  - list configmaps in namespace guestbook, for prune: objects of ConfigMap tracked as argocd/guestbook\n",
				"  - create configmaps in namespace guestbook, for ConfigMap guestbook/mine, ConfigMap guestbook/new\n",
				"  - patch configmaps in namespace guestbook, for ConfigMap guestbook/mine, ConfigMap guestbook/new\n",
				"  - delete configmaps in namespace guestbook, for prune: objects of ConfigMap tracked as argocd/guestbook\n",
			},
		},
		{
			name:    "an earlier suggestion granted apply only: prune's list and delete are added, apply's permissions kept",
			granted: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "patch"}}},
			wantMissing: []string{
				"  - list configmaps in namespace guestbook, for prune: objects of ConfigMap tracked as argocd/guestbook\n",
				"  - delete configmaps in namespace guestbook, for prune: objects of ConfigMap tracked as argocd/guestbook\n",
			},
		},
		{
			name:    "apply and list granted: delete of what prune found",
			granted: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create", "patch"}}},
			wantMissing: []string{
				"  - delete configmaps in namespace guestbook, for ConfigMap guestbook/orphan (prune)\n",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &rbacCluster{ownershipCluster: &ownershipCluster{objects: map[string]map[string]string{
				"mine": tracked, "orphan": tracked, "unrelated": {},
			}}, role: tc.granted}
			st := preflightSync(t, c, true, "mine", "new")
			if st.Phase != v1alpha1.OperationError {
				t.Fatalf("first sync: phase %s, want Error:\n%s", st.Phase, st.Message)
			}
			head, _, _ := strings.Cut(st.Message, "These RBAC objects")
			want := "preflight failed: system:serviceaccount:guestbook:guestbook-deployer lacks " + plural(len(tc.wantMissing)) + " this sync needs; nothing was changed\n" +
				strings.Join(tc.wantMissing, "")
			if head != want {
				t.Errorf("report:\n%s\nwant:\n%s", head, want)
			}
			if !strings.Contains(st.Message, "kind: Role\nmetadata:\n  name: deputy-sync-guestbook\n  namespace: guestbook\nrules:\n"+everything) {
				t.Errorf("the suggested Role does not hold everything the sync needs:\n%s", st.Message)
			}
			if len(c.writes) != 0 {
				t.Errorf("writes %q after a failed preflight", c.writes)
			}

			c.applySuggestion(t, st.Message)
			st = preflightSync(t, c, true, "mine", "new")
			if st.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("after applying the suggestion: phase %s, want Succeeded:\n%s", st.Phase, st.Message)
			}
			writes := slices.Clone(c.writes)
			sort.Strings(writes)
			if want := []string{"apply mine", "apply new", "delete orphan"}; !slices.Equal(writes, want) {
				t.Errorf("writes %q, want %q", writes, want)
			}
		})
	}
}

func plural(n int) string {
	if n == 1 {
		return "1 permission"
	}
	return fmt.Sprintf("%d permissions", n)
}

// What the suggested RBAC objects hold: namespaced permissions for every
// name of their namespace, cluster-scoped ones for the objects involved,
// requests without a name (list, create of a Namespace) for every name.
func TestGrantSetNamesOnlyClusterScopedObjects(t *testing.T) {
	var g permissions.Grants
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	g.Add("patch", cm.Group, cm.Resource, "guestbook", "a")
	g.Add("patch", cm.Group, cm.Resource, "guestbook", "b")
	g.Add("get", gvrCRDs.Group, gvrCRDs.Resource, "", "widgets.example.com")
	g.Add("get", gvrCRDs.Group, gvrCRDs.Resource, "", "gadgets.example.com")
	g.Add("get", gvrCRDs.Group, gvrCRDs.Resource, "", "widgets.example.com")
	g.Add("create", gvrNamespaces.Group, gvrNamespaces.Resource, "", "")
	got := g.List()
	want := []missingPermission{
		{Verb: "patch", Resource: "configmaps", Namespace: "guestbook"},
		{Verb: "get", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Names: []string{"gadgets.example.com", "widgets.example.com"}},
		{Verb: "create", Resource: "namespaces"},
	}
	if !slices.EqualFunc(got, want, func(a, b missingPermission) bool {
		return a.Verb == b.Verb && a.Group == b.Group && a.Resource == b.Resource && a.Namespace == b.Namespace && slices.Equal(a.Names, b.Names)
	}) {
		t.Errorf("grants %+v\nwant %+v", got, want)
	}
}
