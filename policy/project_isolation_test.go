package policy

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Argo CD's IsGroupKindNamePermitted table (argo-cd app_project_types.go),
// plus deputy's rule for requests that name no object.
func TestResourcePermitted(t *testing.T) {
	p := projectWith(v1alpha1.AppProjectSpec{
		ClusterResourceWhitelist: []v1alpha1.ClusterResourceRestrictionItem{
			{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "guestbook-*"},
			{Group: "", Kind: "Namespace"},
			{Group: "example.com", Kind: "*"},
		},
		ClusterResourceBlacklist:   []v1alpha1.ClusterResourceRestrictionItem{{Group: "", Kind: "Namespace", Name: "kube-*"}},
		NamespaceResourceBlacklist: []metav1.GroupKind{{Group: "", Kind: "Secret"}},
	})
	for _, tc := range []struct {
		name                 string
		group, kind, objName string
		namespaced           bool
		want                 bool
		wantEntry            string
	}{
		{"a named entry permits a matching name", "rbac.authorization.k8s.io", "ClusterRole", "guestbook-view", false, true, `clusterResourceWhitelist[0] {group: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "guestbook-*"}`},
		{"a named entry does not permit another name", "rbac.authorization.k8s.io", "ClusterRole", "cluster-admin", false, false, "no clusterResourceWhitelist entry matches"},
		{"a named entry does not permit every object", "rbac.authorization.k8s.io", "ClusterRole", "", false, false, "name objects"},
		{"an entry without a name permits every name", "", "Namespace", "team-a", false, true, "clusterResourceWhitelist[1]"},
		{"a named blacklist entry refuses its names", "", "Namespace", "kube-system", false, false, `clusterResourceBlacklist[0] {group: "", kind: "Namespace", name: "kube-*"}`},
		{"a named blacklist entry refuses every object at once", "", "Namespace", "", false, false, "clusterResourceBlacklist[0]"},
		{"a kind glob permits", "example.com", "Widget", "w", false, true, "clusterResourceWhitelist[2]"},
		{"a cluster kind outside the whitelist is refused", "", "Node", "n", false, false, "no clusterResourceWhitelist entry matches"},
		{"namespaced kinds are permitted without a whitelist", "apps", "Deployment", "d", true, true, "no namespaceResourceWhitelist"},
		{"a namespaced blacklist refuses", "", "Secret", "s", true, false, "namespaceResourceBlacklist[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ResourcePermitted(p, tc.group, tc.kind, tc.objName, tc.namespaced)
			if got.Permitted != tc.want || !strings.Contains(got.Entry, tc.wantEntry) {
				t.Errorf("ResourcePermitted = %+v, want permitted %t with entry containing %q", got, tc.want, tc.wantEntry)
			}
		})
	}
	t.Run("an empty namespaced whitelist permits nothing", func(t *testing.T) {
		p := projectWith(v1alpha1.AppProjectSpec{NamespaceResourceWhitelist: []metav1.GroupKind{}})
		if got := ResourcePermitted(p, "", "ConfigMap", "c", true); got.Permitted {
			t.Errorf("got %+v", got)
		}
	})
}

func TestDecodeAppProjectOfArgoCD(t *testing.T) {
	const head = `{"apiVersion":"argoproj.io/v1alpha1","kind":"AppProject","metadata":{"name":"p","namespace":"argocd"},`
	for _, tc := range []struct {
		name, spec string
		wantErr    string // "" for success
	}{
		{"every Argo CD v3.5 field decodes", `"spec":{"sourceRepos":["*"],"destinations":[{"server":"*","namespace":"a","name":"in-cluster"}],"description":"d",` +
			`"roles":[{"name":"ci","description":"x","policies":["p, proj:p:ci, applications, get, p/*, allow"],"jwtTokens":[{"iat":1}],"groups":["g"]}],` +
			`"clusterResourceWhitelist":[{"group":"","kind":"Namespace","name":"a-*"}],"namespaceResourceBlacklist":[{"group":"","kind":"Secret"}],` +
			`"orphanedResources":{"warn":true},"syncWindows":[{"kind":"allow","schedule":"* * * * *","duration":"1h"}],"namespaceResourceWhitelist":[{"group":"","kind":"ConfigMap"}],` +
			`"signatureKeys":[{"keyID":"ABC"}],"clusterResourceBlacklist":[{"group":"","kind":"Node"}],"sourceNamespaces":["team-*"],"permitOnlyProjectScopedClusters":false,` +
			`"destinationServiceAccounts":[{"server":"*","namespace":"a","defaultServiceAccount":"d"}],"sourceIntegrity":{"git":{}}},"status":{"jwtTokensByRole":{}}}`, ""},
		{"a field Argo CD does not have is refused", `"spec":{"sourceRepos":["*"],"allowEverything":true}}`, `unknown field "spec.allowEverything"`},
		{"an unknown field of a list entry is refused", `"spec":{"namespaceResourceWhitelist":[{"group":"","kind":"ConfigMap","name":"only-this"}]}}`, `unknown field "spec.namespaceResourceWhitelist[0].name"`},
		{"project-scoped clusters are refused", `"spec":{"permitOnlyProjectScopedClusters":true}}`, "spec.permitOnlyProjectScopedClusters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodeAppProject(v1alpha1.ArgoCDGroup, []byte(head+tc.spec))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if p.Spec.ClusterResourceWhitelist[0].Name != "a-*" || p.Spec.SourceNamespaces[0] != "team-*" || p.Spec.Roles[0].Groups[0] != "g" {
					t.Errorf("decoded %+v", p.Spec)
				}
				return
			}
			if !errors.Is(err, ErrProjectRefused) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want ErrProjectRefused naming %q", err, tc.wantErr)
			}
		})
	}
}

func TestAppNamespacePermitted(t *testing.T) {
	c, err := CompileAppProject(&v1alpha1.AppProject{ObjectMeta: metav1.ObjectMeta{Namespace: "deputy-system", Name: "p"},
		Spec: v1alpha1.AppProjectSpec{SourceNamespaces: []string{"team-*", "/^prod-[0-9]+$/", "/[/"}}})
	if err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]bool{
		"deputy-system": true, "team-a": true, "team-": true, "prod-12": true,
		"prod-x": false, "other": false, "": false, "[": false,
	} {
		if got := c.AppNamespacePermitted(ns); got != want {
			t.Errorf("AppNamespacePermitted(%q) = %t, want %t", ns, got, want)
		}
	}
}

func TestResolveAppProject(t *testing.T) {
	projects := map[string]*v1alpha1.AppProject{
		"deputy-system/shared": {ObjectMeta: metav1.ObjectMeta{Namespace: "deputy-system", Name: "shared"}, Spec: v1alpha1.AppProjectSpec{SourceNamespaces: []string{"team-a"}}},
		"deputy-system/closed": {ObjectMeta: metav1.ObjectMeta{Namespace: "deputy-system", Name: "closed"}},
		"team-b/closed":        {ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "closed"}, Spec: v1alpha1.AppProjectSpec{SourceNamespaces: []string{"*"}}},
		"apps/local":           {ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "local"}},
	}
	find := func(ns, name string) *v1alpha1.AppProject { return projects[ns+"/"+name] }
	app := func(ns, project string) *v1alpha1.Application {
		return &v1alpha1.Application{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: v1alpha1.ApplicationSpec{Project: project}}
	}
	for _, tc := range []struct {
		name       string
		app        *v1alpha1.Application
		namespaces []string
		want       string // namespace/name of the project, or an error substring
	}{
		{"an Application in a project namespace uses its project", app("deputy-system", "closed"), []string{"deputy-system"}, "deputy-system/closed"},
		{"an admitted namespace uses the project", app("team-a", "shared"), []string{"deputy-system"}, "deputy-system/shared"},
		{"a namespace the project does not admit is refused", app("team-b", "shared"), []string{"deputy-system"}, `namespace "team-b" is not in the project's spec.sourceNamespaces`},
		{"a project a tenant wrote in its own namespace is never used", app("team-b", "closed"), []string{"deputy-system"}, `namespace "team-b" is not in the project's spec.sourceNamespaces`},
		{"a missing project is named with the namespaces searched", app("team-a", "nope"), []string{"deputy-system"}, `does not exist in the project namespaces (deputy-system, sync.projectNamespaces)`},
		{"the Application's own project namespace comes first", app("apps", "local"), []string{"deputy-system", "apps"}, "apps/local"},
		{"* keeps projects next to their Applications", app("team-b", "closed"), []string{"*"}, "team-b/closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ResolveAppProject(tc.app, tc.namespaces, find)
			if err != nil {
				if !errors.Is(err, ErrProjectNotUsable) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("err = %v, want ErrProjectNotUsable containing %q", err, tc.want)
				}
				return
			}
			if got := p.Namespace + "/" + p.Name; got != tc.want {
				t.Errorf("project %s, want %s", got, tc.want)
			}
		})
	}
}

func TestAllNamespacesPermitted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dests []v1alpha1.ApplicationDestination
		want  bool
	}{
		{"a * namespace on this cluster", []v1alpha1.ApplicationDestination{{Server: inCluster, Namespace: "*"}}, true},
		{"a * namespace by cluster name", []v1alpha1.ApplicationDestination{{Name: "in-cluster", Namespace: "*"}}, true},
		{"one namespace", []v1alpha1.ApplicationDestination{{Server: inCluster, Namespace: "team-a"}}, false},
		{"a prefix glob", []v1alpha1.ApplicationDestination{{Server: "*", Namespace: "team-*"}}, false},
		{"a * namespace with a negation", []v1alpha1.ApplicationDestination{{Server: "*", Namespace: "*"}, {Server: "*", Namespace: "!kube-system"}}, false},
		{"a * namespace on another cluster", []v1alpha1.ApplicationDestination{{Server: remote, Namespace: "*"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := CompileAppProject(projectWith(v1alpha1.AppProjectSpec{Destinations: tc.dests}))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.AllNamespacesPermitted(inCluster, "in-cluster"); got != tc.want {
				t.Errorf("AllNamespacesPermitted = %t, want %t", got, tc.want)
			}
		})
	}
}
