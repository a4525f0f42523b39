package syncer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// testMapper knows a few built-in kinds and nothing else (deny by default:
// an unknown kind does not map).
func testMapper() meta.RESTMapperWithContext {
	m := meta.NewDefaultRESTMapper(nil)
	for _, k := range []struct {
		gvk        schema.GroupVersionKind
		namespaced bool
	}{
		{schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, false},
		{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, true},
		{schema.GroupVersionKind{Version: "v1", Kind: "Service"}, true},
		{schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}, true},
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, true},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}, true},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"}, true},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, false},
		{schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}, false},
	} {
		scope := meta.RESTScopeRoot
		if k.namespaced {
			scope = meta.RESTScopeNamespace
		}
		m.Add(k.gvk, scope)
	}
	return meta.ToRESTMapperWithContext(m)
}

func obj(apiVersion, kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}}
	if ns != "" {
		u.SetNamespace(ns)
	}
	return u
}

func widgetCRD() *unstructured.Unstructured {
	u := obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets.example.com")
	u.Object["spec"] = map[string]any{"group": "example.com", "scope": "Namespaced",
		"names":    map[string]any{"kind": "Widget", "plural": "widgets"},
		"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true}}}
	return u
}

func testOperation(t *testing.T, p *v1alpha1.AppProject) (*operation, *policy.CompiledProject) {
	t.Helper()
	e := &Engine{opts: EngineOptions{Parallelism: 4, Now: time.Now}}
	app := &v1alpha1.Application{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "guestbook"},
		Spec: v1alpha1.ApplicationSpec{Project: p.Name, Destination: v1alpha1.ApplicationDestination{Server: InClusterServer, Namespace: "guestbook"}}}
	op := e.newOperation(Request{Application: app, Project: p}, nil)
	op.server, op.destNamespace = InClusterServer, "guestbook"
	c, err := policy.CompileAppProject(p)
	if err != nil {
		t.Fatal(err)
	}
	return op, c
}

func guestbookProject() *v1alpha1.AppProject {
	p := &v1alpha1.AppProject{Spec: v1alpha1.AppProjectSpec{
		SourceRepos:              []string{"*"},
		Destinations:             []v1alpha1.ApplicationDestination{{Server: InClusterServer, Namespace: "guestbook"}, {Server: InClusterServer, Namespace: "guestbook-*"}},
		ClusterResourceWhitelist: []v1alpha1.ClusterResourceRestrictionItem{{Group: "", Kind: "Namespace"}, {Group: "apiextensions.k8s.io", Kind: "*"}},
	}}
	p.Name = "guestbook"
	return p
}

// Apply order without waves: Argo CD's kind order (a Role before the
// RoleBinding that needs it, a CustomResourceDefinition before its custom
// resources, unknown kinds last), then name; objects of one kind rank form
// one parallel run.
func TestPlanOrdersByKind(t *testing.T) {
	op, c := testOperation(t, guestbookProject())
	op.project.Spec.ClusterResourceWhitelist = append(op.project.Spec.ClusterResourceWhitelist, v1alpha1.ClusterResourceRestrictionItem{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"})
	rendered := []*unstructured.Unstructured{
		obj("apps/v1", "Deployment", "", "web"),
		obj("v1", "Service", "", "web"),
		obj("example.com/v1", "Widget", "", "w"),
		obj("rbac.authorization.k8s.io/v1", "RoleBinding", "", "rb"),
		obj("v1", "ConfigMap", "guestbook-staging", "b"),
		obj("v1", "ConfigMap", "", "a"),
		obj("rbac.authorization.k8s.io/v1", "Role", "", "r"),
		obj("rbac.authorization.k8s.io/v1", "ClusterRole", "", "cr"),
		widgetCRD(),
		obj("v1", "Namespace", "", "guestbook-staging"),
		obj("v1", "ServiceAccount", "", "sa"),
	}
	p, err := op.plan(t.Context(), &clients{mapper: testMapper()}, c, rendered)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range runs(p.objects) {
		var wave []string
		for _, o := range w {
			wave = append(wave, o.key.String())
		}
		got = append(got, strings.Join(wave, ", "))
	}
	want := []string{
		"Namespace guestbook-staging",
		"ServiceAccount guestbook/sa",
		"ConfigMap guestbook/a, ConfigMap guestbook-staging/b",
		"CustomResourceDefinition.apiextensions.k8s.io widgets.example.com",
		"ClusterRole.rbac.authorization.k8s.io cr",
		"Role.rbac.authorization.k8s.io guestbook/r",
		"RoleBinding.rbac.authorization.k8s.io guestbook/rb",
		"Service guestbook/web",
		"Deployment.apps guestbook/web",
		"Widget.example.com guestbook/w",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("waves (-want +got):\n%s", diff)
	}
	if n := len(steps(p.objects)); n != 1 {
		t.Errorf("%d steps, want 1 (every object in phase Sync, wave 0)", n)
	}
	for _, o := range p.objects {
		if o.obj.GetAnnotations()[TrackingAnnotation] != "argocd/guestbook" {
			t.Errorf("%s lacks the tracking annotation", o.key)
		}
		if o.key.kind == "Widget" && (!o.crdDefined || o.gvr.Resource != "widgets" || !o.namespaced) {
			t.Errorf("a custom resource maps through its CRD of the same sync: %+v", o)
		}
		if o.key.kind == "ClusterRole" && o.obj.GetNamespace() != "" {
			t.Errorf("a cluster-scoped object keeps a namespace")
		}
	}
}

func TestPlanReportsEveryViolation(t *testing.T) {
	op, c := testOperation(t, guestbookProject())
	op.project.Spec.NamespaceResourceBlacklist = []metav1.GroupKind{{Group: "", Kind: "Service"}}
	rendered := []*unstructured.Unstructured{
		obj("v1", "ConfigMap", "", "ok"),
		obj("v1", "Service", "", "blacklisted"),
		obj("rbac.authorization.k8s.io/v1", "ClusterRole", "", "not-whitelisted"),
		obj("v1", "ConfigMap", "kube-system", "elsewhere"),
		obj("example.com/v1", "Gadget", "", "unknown-kind"),
		obj("v1", "ConfigMap", "", "ok"),
		obj("v1", "ConfigMap", "", "../secrets"),
	}
	_, err := op.plan(t.Context(), &clients{mapper: testMapper()}, c, rendered)
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{
		"(6 problems; nothing was changed)",
		"resource :Service is not permitted in project guestbook",
		"resource rbac.authorization.k8s.io:ClusterRole is not permitted in project guestbook (cluster-scoped",
		"namespace kube-system is not permitted in project 'guestbook'",
		"the cluster does not serve kind Gadget in example.com/v1",
		"ConfigMap guestbook/ok is rendered more than once",
		`ConfigMap "../secrets" (apiVersion v1) has an invalid name`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestPlanPruneScopes(t *testing.T) {
	op, c := testOperation(t, guestbookProject())
	op.req.Sync.Prune = true
	op.app.Status.OperationState = &v1alpha1.OperationState{SyncResult: &v1alpha1.SyncOperationResult{Resources: []*v1alpha1.ResourceResult{
		{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "guestbook-old", Name: "gone"},
		{Version: "v1", Kind: "ConfigMap", Namespace: "kube-system", Name: "not-a-destination"},
		{Group: "example.com", Version: "v1", Kind: "Gone", Namespace: "guestbook", Name: "unserved"},
	}}}
	p, err := op.plan(t.Context(), &clients{mapper: testMapper()}, c, []*unstructured.Unstructured{obj("v1", "ConfigMap", "", "a")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range p.pruneScopes {
		got = append(got, s.gvr.Resource+"@"+s.namespace)
	}
	want := []string{"configmaps@guestbook", "configmaps@guestbook-old", "deployments@guestbook", "deployments@guestbook-old"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("prune scopes: kinds rendered now and recorded before, in permitted namespaces (-want +got):\n%s", diff)
	}

	op.app.Spec.SyncPolicy = &v1alpha1.SyncPolicy{SyncOptions: []string{"Prune=false"}}
	p, err = op.plan(t.Context(), &clients{mapper: testMapper()}, c, []*unstructured.Unstructured{obj("v1", "ConfigMap", "", "a")})
	if err != nil || len(p.pruneScopes) != 0 {
		t.Errorf("Prune=false still lists %v (%v)", p.pruneScopes, err)
	}
}

func TestPruneEnabled(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prune     bool
		automated bool
		policy    *v1alpha1.SyncPolicy
		want      bool
	}{
		{"an explicit prune", true, false, nil, true},
		{"no prune asked", false, false, nil, false},
		{"an automated sync with automated prune", false, true, &v1alpha1.SyncPolicy{Automated: &v1alpha1.SyncPolicyAutomated{Prune: true}}, true},
		{"a manual sync of an app with automated prune", false, false, &v1alpha1.SyncPolicy{Automated: &v1alpha1.SyncPolicyAutomated{Prune: true}}, false},
		{"Prune=false wins over an explicit prune", true, false, &v1alpha1.SyncPolicy{SyncOptions: []string{"Prune=false"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, _ := testOperation(t, guestbookProject())
			op.req.Sync.Prune, op.req.InitiatedBy.Automated, op.app.Spec.SyncPolicy = tc.prune, tc.automated, tc.policy
			op.options = parseSyncOptions(tc.policy)
			if got := op.pruneEnabled(); got != tc.want {
				t.Errorf("pruneEnabled = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestResourcePath(t *testing.T) {
	for _, tc := range []struct {
		gvr      schema.GroupVersionResource
		ns, name string
		want     string
	}{
		{gvrNamespaces, "", "x", "/api/v1/namespaces/x"},
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ns", "a", "/api/v1/namespaces/ns/configmaps/a"},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "ns", "", "/apis/apps/v1/namespaces/ns/deployments"},
		{gvrCRDs, "", "w.example.com", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/w.example.com"},
	} {
		if got := resourcePath(tc.gvr, tc.ns, tc.name); got != tc.want {
			t.Errorf("resourcePath = %s, want %s", got, tc.want)
		}
	}
}

func TestPrepareForApplyDigest(t *testing.T) {
	a := obj("v1", "ConfigMap", "ns", "a")
	a.SetResourceVersion("12")
	a.SetAnnotations(map[string]string{appliedDigestAnnotation: "stale", "x": "y"})
	body1, d1, err := prepareForApply(a, "argocd/app")
	if err != nil {
		t.Fatal(err)
	}
	b := obj("v1", "ConfigMap", "ns", "a")
	b.SetAnnotations(map[string]string{"x": "y"})
	_, d2, _ := prepareForApply(b, "argocd/app")
	if d1 != d2 {
		t.Errorf("the digest depends on server-owned metadata or on a stale digest: %s vs %s", d1, d2)
	}
	_, d3, _ := prepareForApply(obj("v1", "ConfigMap", "ns", "a"), "argocd/app")
	if d3 == d1 {
		t.Error("different objects share a digest")
	}
	if !strings.Contains(string(body1), `"deputy.dev/applied-digest":"`+d1+`"`) || !strings.Contains(string(body1), `"deputy.dev/tracking-id":"argocd/app"`) || strings.Contains(string(body1), "resourceVersion") {
		t.Errorf("body: %s", body1)
	}
}

func TestListTargetsMergeObjectsAndPruneScopes(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	p := &plan{
		objects: []*planObject{
			{gvr: cm, obj: obj("v1", "ConfigMap", "a", "x")},
			{gvr: cm, obj: obj("v1", "ConfigMap", "a", "y")},
			{gvr: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, obj: obj("example.com/v1", "Widget", "a", "w"), crdDefined: true},
		},
		pruneScopes: []pruneScope{{gvr: cm, namespace: "a"}, {gvr: cm, namespace: "b"}},
	}
	var got []string
	for _, t := range listTargets(p) {
		got = append(got, fmt.Sprintf("%s@%s prune=%t", t.gvr.Resource, t.namespace, t.prune))
	}
	if diff := cmp.Diff([]string{"configmaps@a prune=true", "configmaps@b prune=true"}, got); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
}
