package authorizer

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/policy"
)

// The tenant-isolation rules of the gate (issue 11, items 6 to 13): each case
// is an attack a compromised or hostile sync identity tried, in several
// spellings.

// tenantProject is a project a tenant would be given: one destination
// namespace, every cluster-scoped kind whitelisted (the broadest grant that
// still names a destination).
const tenantProject = "  destinations:\n  - {server: https://kubernetes.default.svc, namespace: team-a}\n" +
	"  clusterResourceWhitelist:\n  - {group: '*', kind: '*'}\n"

func TestGateDecidesByTheRealScopeOfAKind(t *testing.T) {
	g := newTestGate(t, loadSnapshot(t, project("team-a", tenantProject)+widgetCRD+gadgetNamespacedCRD), nil)
	runGateCases(t, g, []gateCase{
		{"listing secrets across all namespaces is denied", on(syncSA, "list", "", "secrets", "", ""), authorizer.DecisionDeny, "Secret across all namespaces"},
		{"watching secrets across all namespaces is denied", on(syncSA, "watch", "", "secrets", "", ""), authorizer.DecisionDeny, "across all namespaces"},
		{"getting a named configmap without a namespace is denied", on(syncSA, "get", "", "configmaps", "", "c"), authorizer.DecisionDeny, "across all namespaces"},
		{"listing deployments across all namespaces is denied", on(syncSA, "list", "apps", "deployments", "", ""), authorizer.DecisionDeny, "Deployment.apps across all namespaces"},
		{"listing roles across all namespaces is denied", on(syncSA, "list", "rbac.authorization.k8s.io", "roles", "", ""), authorizer.DecisionDeny, "across all namespaces"},
		{"a namespaced custom resource across all namespaces is denied", on(syncSA, "list", "example.com", "gadgets", "", ""), authorizer.DecisionDeny, "Gadget.example.com across all namespaces"},
		{"a resource of unknown scope without a namespace is denied", on(syncSA, "list", "example.com", "unknowns", "", ""), authorizer.DecisionDeny, "cannot tell whether"},
		{"secrets in the destination are allowed", on(syncSA, "list", "", "secrets", "team-a", ""), authorizer.DecisionAllow, `namespace "team-a" is a destination`},
		{"a real cluster-scoped kind is allowed by the whitelist", on(syncSA, "get", "rbac.authorization.k8s.io", "clusterroles", "", "view"), authorizer.DecisionAllow, "permits cluster-scoped ClusterRole"},
		{"a cluster-scoped custom resource is allowed by the whitelist", on(syncSA, "list", "example.com", "widgets", "", ""), authorizer.DecisionAllow, "permits cluster-scoped Widget.example.com"},
	})

	t.Run("a project whose destinations are every namespace may act across all namespaces", func(t *testing.T) {
		g := newTestGate(t, loadSnapshot(t, project("all", "  destinations:\n  - {server: https://kubernetes.default.svc, namespace: '*'}\n")), nil)
		runGateCases(t, g, []gateCase{
			{"listing secrets across all namespaces is allowed", on(syncSA, "list", "", "secrets", "", ""), authorizer.DecisionAllow, "every namespace is a destination"},
		})
	})
	t.Run("a negated destination means not every namespace", func(t *testing.T) {
		g := newTestGate(t, loadSnapshot(t, project("all-but", "  destinations:\n  - {server: '*', namespace: '*'}\n  - {server: '*', namespace: '!kube-system'}\n")), nil)
		runGateCases(t, g, []gateCase{
			{"listing secrets across all namespaces is denied", on(syncSA, "list", "", "secrets", "", ""), authorizer.DecisionDeny, "across all namespaces"},
		})
	})
	t.Run("every namespace of another cluster does not count here", func(t *testing.T) {
		g := newTestGate(t, loadSnapshot(t, project("elsewhere", "  destinations:\n  - {server: https://prod.example.com, namespace: '*'}\n")), nil)
		runGateCases(t, g, []gateCase{
			{"listing secrets across all namespaces is denied", on(syncSA, "list", "", "secrets", "", ""), authorizer.DecisionDeny, "across all namespaces"},
		})
	})
	t.Run("the cluster's discovery decides in cluster mode", func(t *testing.T) {
		snap := loadSnapshot(t, project("team-a", tenantProject))
		state := &policy.ClusterState{Synced: true, Resources: policy.BuiltinResources().Merge(policy.CatalogFromDiscovery(discoveryOf("example.com/v1",
			resource("gadgets", "Gadget", true), resource("widgets", "Widget", false))))}
		refreshed := 0
		o := GateOptions{Impersonators: []Impersonator{{UserName: syncSA, ClusterServer: thisServer, APIGroups: []string{"argoproj.io"}}},
			Strict: true, RefreshResources: func() { refreshed++ }}
		g := NewGate(o, func() *policy.Snapshot { return snap }, func() *policy.ClusterState { return state })
		runGateCases(t, g, []gateCase{
			{"a namespaced custom resource across all namespaces is denied", on(syncSA, "list", "example.com", "gadgets", "", ""), authorizer.DecisionDeny, "Gadget.example.com across all namespaces"},
			{"a cluster-scoped custom resource is whitelisted", on(syncSA, "list", "example.com", "widgets", "", ""), authorizer.DecisionAllow, "Widget.example.com"},
			{"an unknown resource is denied", on(syncSA, "list", "example.com", "sprockets", "", ""), authorizer.DecisionDeny, "cannot tell whether"},
		})
		if refreshed != 1 {
			t.Errorf("RefreshResources called %d times, want once for the unknown resource", refreshed)
		}
	})
}

func TestGateAllowsOnlyListedSubresources(t *testing.T) {
	g := newTestGate(t, loadSnapshot(t, project("team-a", tenantProject)), func(o *GateOptions) {
		o.Subresources = []SubresourceRule{{Resource: "*", Subresource: "status", Verbs: []string{"get"}}, {Resource: "pods", Subresource: "log", Verbs: []string{"get"}}}
	})
	sub := func(verb, group, resource, subresource, ns, name string) *authorizer.AttributesRecord {
		a := on(syncSA, verb, group, resource, ns, name)
		a.Subresource = subresource
		return a
	}
	runGateCases(t, g, []gateCase{
		{"minting a ServiceAccount token is denied", sub("create", "", "serviceaccounts", "token", "team-a", "deployer"), authorizer.DecisionDeny, "subresource serviceaccounts/token"},
		{"exec into a pod is denied", sub("create", "", "pods", "exec", "team-a", "p"), authorizer.DecisionDeny, "pods/exec"},
		{"exec through a websocket GET is denied", sub("get", "", "pods", "exec", "team-a", "p"), authorizer.DecisionDeny, "pods/exec"},
		{"attach is denied", sub("create", "", "pods", "attach", "team-a", "p"), authorizer.DecisionDeny, "pods/attach"},
		{"port-forward is denied", sub("create", "", "pods", "portforward", "team-a", "p"), authorizer.DecisionDeny, "pods/portforward"},
		{"the pod proxy is denied", sub("get", "", "pods", "proxy", "team-a", "p"), authorizer.DecisionDeny, "pods/proxy"},
		{"the service proxy is denied", sub("get", "", "services", "proxy", "team-a", "s"), authorizer.DecisionDeny, "services/proxy"},
		{"the node proxy is denied", sub("get", "", "nodes", "proxy", "", "n"), authorizer.DecisionDeny, "nodes/proxy"},
		{"ephemeral containers are denied", sub("patch", "", "pods", "ephemeralcontainers", "team-a", "p"), authorizer.DecisionDeny, "pods/ephemeralcontainers"},
		{"eviction is denied", sub("create", "", "pods", "eviction", "team-a", "p"), authorizer.DecisionDeny, "pods/eviction"},
		{"approving a certificate request is denied", sub("update", "certificates.k8s.io", "certificatesigningrequests", "approval", "", "c"), authorizer.DecisionDeny, "certificatesigningrequests/approval"},
		{"writing a status is denied", sub("patch", "apps", "deployments", "status", "team-a", "web"), authorizer.DecisionDeny, "deployments/status"},
		{"reading a status is allowed in a destination", sub("get", "apps", "deployments", "status", "team-a", "web"), authorizer.DecisionAllow, "team-a"},
		{"reading a status outside the destinations is denied", sub("get", "apps", "deployments", "status", "team-b", "web"), authorizer.DecisionDeny, "not a destination"},
		{"reading pod logs is allowed in a destination", sub("get", "", "pods", "log", "team-a", "p"), authorizer.DecisionAllow, "team-a"},
		{"reading logs of another kind is denied", sub("get", "", "services", "log", "team-a", "s"), authorizer.DecisionDeny, "services/log"},
	})
}

func TestGateTreatsNamespaceObjectsAsClusterScoped(t *testing.T) {
	// kube-apiserver puts a Namespace object's own name in the namespace of
	// requests on it (/api/v1/namespaces/team-a).
	nsObj := func(verb, name string) *authorizer.AttributesRecord {
		return on(syncSA, verb, "", "namespaces", name, name)
	}
	g := newTestGate(t, loadSnapshot(t, project("team-a", "  destinations:\n  - {server: https://kubernetes.default.svc, namespace: team-a}\n")), nil)
	var cases []gateCase
	for _, verb := range []string{"get", "update", "patch", "delete"} {
		cases = append(cases, gateCase{verb + " of the destination's Namespace object needs the whitelist", nsObj(verb, "team-a"), authorizer.DecisionDeny, "clusterResourceWhitelist"})
	}
	cases = append(cases,
		gateCase{"create of a Namespace needs the whitelist", on(syncSA, "create", "", "namespaces", "", ""), authorizer.DecisionDeny, "clusterResourceWhitelist"},
		gateCase{"the namespace finalizer subresource is denied", func() *authorizer.AttributesRecord {
			a := nsObj("update", "team-a")
			a.Subresource = "finalize"
			return a
		}(), authorizer.DecisionDeny, "namespaces/finalize"},
		gateCase{"objects inside the destination stay allowed", on(syncSA, "delete", "", "configmaps", "team-a", "c"), authorizer.DecisionAllow, "team-a"})
	runGateCases(t, g, cases)

	t.Run("a named whitelist entry permits exactly its Namespace objects", func(t *testing.T) {
		g := newTestGate(t, loadSnapshot(t, project("team-a", "  destinations:\n  - {server: https://kubernetes.default.svc, namespace: 'team-a*'}\n"+
			"  clusterResourceWhitelist:\n  - {group: '', kind: Namespace, name: 'team-a*'}\n")), nil)
		runGateCases(t, g, []gateCase{
			{"deleting a matching Namespace is allowed", nsObj("delete", "team-a-dev"), authorizer.DecisionAllow, `clusterResourceWhitelist[0] {group: "", kind: "Namespace", name: "team-a*"}`},
			{"deleting another Namespace is denied", nsObj("delete", "kube-system"), authorizer.DecisionDeny, "clusterResourceWhitelist"},
			{"listing every Namespace is denied: the entry names some", on(syncSA, "list", "", "namespaces", "", ""), authorizer.DecisionDeny, "entries for this kind name objects"},
		})
	})
}

func TestGateHonoursNamedAndNamespacedListEntries(t *testing.T) {
	g := newTestGate(t, loadSnapshot(t,
		project("guestbook", "  destinations:\n  - {server: https://kubernetes.default.svc, namespace: guestbook}\n"+
			"  clusterResourceWhitelist:\n  - {group: rbac.authorization.k8s.io, kind: ClusterRole, name: 'guestbook-*'}\n  - {group: '', kind: Namespace}\n"+
			"  clusterResourceBlacklist:\n  - {group: '', kind: Namespace, name: 'kube-*'}\n"+
			"  namespaceResourceBlacklist:\n  - {group: '', kind: Secret}\n")+
			project("narrow", "  destinations:\n  - {server: https://kubernetes.default.svc, namespace: narrow}\n"+
				"  namespaceResourceWhitelist:\n  - {group: '', kind: ConfigMap}\n")), nil)
	runGateCases(t, g, []gateCase{
		{"deleting cluster-admin is denied", on(syncSA, "delete", "rbac.authorization.k8s.io", "clusterroles", "", "cluster-admin"), authorizer.DecisionDeny, "clusterResourceWhitelist"},
		{"deleting a whitelisted name is allowed", on(syncSA, "delete", "rbac.authorization.k8s.io", "clusterroles", "", "guestbook-reader"), authorizer.DecisionAllow, `name: "guestbook-*"`},
		{"listing every ClusterRole is denied", on(syncSA, "list", "rbac.authorization.k8s.io", "clusterroles", "", ""), authorizer.DecisionDeny, "entries for this kind name objects"},
		{"a Namespace outside the blacklist is allowed", on(syncSA, "patch", "", "namespaces", "team-x", "team-x"), authorizer.DecisionAllow, "clusterResourceWhitelist[1]"},
		{"a blacklisted Namespace is denied, naming the blacklist entry", on(syncSA, "patch", "", "namespaces", "kube-public", "kube-public"), authorizer.DecisionDeny, `clusterResourceBlacklist[0] {group: "", kind: "Namespace", name: "kube-*"}`},
		{"listing Namespaces is denied: some are blacklisted", on(syncSA, "list", "", "namespaces", "", ""), authorizer.DecisionDeny, "clusterResourceBlacklist[0]"},
		{"a blacklisted namespaced kind in a destination is denied", on(syncSA, "get", "", "secrets", "guestbook", "s"), authorizer.DecisionDeny, "namespaceResourceBlacklist[0]"},
		{"other namespaced kinds in the destination are allowed", on(syncSA, "get", "", "configmaps", "guestbook", "c"), authorizer.DecisionAllow, "guestbook"},
		{"a kind outside a namespaced whitelist is denied", on(syncSA, "create", "apps", "deployments", "narrow", "d"), authorizer.DecisionDeny, "no namespaceResourceWhitelist entry matches"},
		{"a kind on the namespaced whitelist is allowed", on(syncSA, "create", "", "configmaps", "narrow", "c"), authorizer.DecisionAllow, "narrow"},
		{"an unknown kind in a namespace with lists is denied", on(syncSA, "get", "example.com", "things", "narrow", "t"), authorizer.DecisionDeny, "kind of this resource is not known"},
	})
}

func TestGateWildcardTargetsNeverPassProtection(t *testing.T) {
	u := &user.DefaultInfo{Name: "carol", Groups: []string{"system:authenticated"}}
	rec := func(verb, group, resource, sub, ns, name string) *authorizer.AttributesRecord {
		return &authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name, ResourceRequest: true}
	}
	for _, strict := range []bool{true, false} {
		g := newTestGate(t, loadSnapshot(t, editLikeRBAC), func(o *GateOptions) {
			o.Strict = strict
			o.ProtectedGroups = append(o.ProtectedGroups, "ops:admins")
		})
		mode := map[bool]string{true: "strict", false: "non-strict"}[strict]
		t.Run(mode, func(t *testing.T) {
			runGateCases(t, g, []gateCase{
				{"every group through constrained user-info is denied", rec("impersonate:user-info", "authentication.k8s.io", "groups", "", "", "*"), authorizer.DecisionDeny, "includes protected targets"},
				{"every group through legacy impersonate is denied", rec("impersonate", "", "groups", "", "", "*"), authorizer.DecisionDeny, "includes protected targets"},
				{"every user is denied", rec("impersonate:user-info", "authentication.k8s.io", "users", "", "", "*"), authorizer.DecisionDeny, "includes protected targets"},
				{"ServiceAccounts of every namespace are denied", rec("impersonate", "", "serviceaccounts", "", "*", "deployer"), authorizer.DecisionDeny, "includes protected targets"},
				{"a configured protected group is denied", rec("impersonate:user-info", "authentication.k8s.io", "groups", "", "", "ops:admins"), authorizer.DecisionDeny, "protected target"},
			})
		})
	}
}

func TestGateClaimsOnlyTheImpersonationShapesKubeAPIServerSends(t *testing.T) {
	g := newTestGate(t, loadSnapshot(t, editLikeRBAC), nil) // strict
	u := &user.DefaultInfo{Name: "carol"}
	rec := func(verb, group, resource, sub string) *authorizer.AttributesRecord {
		return &authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, Resource: resource, Subresource: sub, Name: "x", ResourceRequest: true}
	}
	runGateCases(t, g, []gateCase{
		{"impersonate on jobs.batch has no opinion", rec("impersonate", "batch", "jobs", ""), authorizer.DecisionNoOpinion, ""},
		{"impersonate on configmaps has no opinion", rec("impersonate", "", "configmaps", ""), authorizer.DecisionNoOpinion, ""},
		{"impersonate on a subresource of users has no opinion", rec("impersonate", "", "users", "status"), authorizer.DecisionNoOpinion, ""},
		{"impersonate on a non-resource path has no opinion", &authorizer.AttributesRecord{User: u, Verb: "impersonate", Path: "/healthz"}, authorizer.DecisionNoOpinion, ""},
		{"an unknown constrained mode has no opinion", rec("impersonate:something", "authentication.k8s.io", "users", ""), authorizer.DecisionNoOpinion, ""},
		{"a known mode on another resource has no opinion", rec("impersonate:serviceaccount", "authentication.k8s.io", "users", ""), authorizer.DecisionNoOpinion, ""},
		{"a constrained mode in another group has no opinion", rec("impersonate:serviceaccount", "", "serviceaccounts", ""), authorizer.DecisionNoOpinion, ""},
		{"impersonate-on with an unknown mode has no opinion", rec("impersonate-on:something:get", "", "pods", ""), authorizer.DecisionNoOpinion, ""},
		{"impersonate-on without a verb has no opinion", rec("impersonate-on:serviceaccount", "", "pods", ""), authorizer.DecisionNoOpinion, ""},
		{"legacy users are claimed", rec("impersonate", "", "users", ""), authorizer.DecisionDeny, "strict"},
		{"legacy uids are claimed", rec("impersonate", "authentication.k8s.io", "uids", ""), authorizer.DecisionDeny, "strict"},
		{"legacy user extras are claimed", rec("impersonate", "authentication.k8s.io", "userextras", "scopes"), authorizer.DecisionDeny, "strict"},
		{"constrained nodes are claimed", rec("impersonate:arbitrary-node", "authentication.k8s.io", "nodes", ""), authorizer.DecisionDeny, "strict"},
	})
}

func TestGateRefusesLegacyImpersonationToImpersonatorsByDefault(t *testing.T) {
	// The configuration maps to RequireConstrained by default (requireConstrained:
	// true); the legacy fallback let the controller's token read ConfigMaps
	// outside every destination.
	g := newTestGate(t, loadSnapshot(t, project("catch-all", "  destinations: [{server: '*', namespace: guestbook}]\n  destinationServiceAccounts:\n  - {server: '*', namespace: '*', defaultServiceAccount: deployer}\n")),
		func(o *GateOptions) { o.RequireConstrained = true })
	runGateCases(t, g, []gateCase{
		{"legacy impersonation of a derived ServiceAccount is denied", legacySA(syncSA, "other", "deployer"), authorizer.DecisionDeny, "requireConstrained"},
		{"constrained impersonation of it is allowed", constrainedSA(syncSA, "other", "deployer"), authorizer.DecisionAllow, ""},
		{"its actions stay capped to the destinations", on(syncSA, "list", "", "configmaps", "other", ""), authorizer.DecisionDeny, "not a destination"},
	})
}

func TestGateAppProjectsGrantOnlyFromTheirNamespacesAndSourceNamespaces(t *testing.T) {
	tenantWritten := "apiVersion: deputy.dev/v1alpha1\nkind: AppProject\nmetadata: {name: evil, namespace: team-b}\nspec:\n" +
		"  destinations: [{server: '*', namespace: '*'}]\n  destinationServiceAccounts:\n  - {server: '*', namespace: '*', defaultServiceAccount: 'team-a:deployer'}\n---\n"
	operatorWritten := "apiVersion: deputy.dev/v1alpha1\nkind: AppProject\nmetadata: {name: team-b, namespace: deputy-system}\nspec:\n" +
		"  sourceNamespaces: [team-b]\n  destinations: [{server: '*', namespace: team-b}]\n" +
		"  destinationServiceAccounts:\n  - {server: '*', namespace: '', defaultServiceAccount: deployer}\n---\n"
	snap := loadSnapshot(t, tenantWritten+operatorWritten)
	g := newTestGate(t, snap, func(o *GateOptions) {
		o.Impersonators[0].APIGroups = []string{"deputy.dev"}
		o.Impersonators[0].Namespaces = []string{"deputy-system"}
		o.Impersonators[0].ApplicationNamespaces = []string{"team-b", "team-c"}
	})
	runGateCases(t, g, []gateCase{
		{"a project a tenant wrote in its own namespace grants nothing", constrainedSA(syncSA, "team-a", "deployer"), authorizer.DecisionDeny, "no AppProject"},
		{"an Application namespace the project admits derives its ServiceAccount", constrainedSA(syncSA, "team-b", "deployer"), authorizer.DecisionAllow, "deputy-system/team-b"},
		{"an Application namespace the project does not admit derives nothing", constrainedSA(syncSA, "team-c", "deployer"), authorizer.DecisionDeny, "no AppProject"},
	})
}

func discoveryOf(gv string, resources ...metav1.APIResource) []*metav1.APIResourceList {
	return []*metav1.APIResourceList{{GroupVersion: gv, APIResources: resources}}
}

func resource(plural, kind string, namespaced bool) metav1.APIResource {
	return metav1.APIResource{Name: plural, Kind: kind, Namespaced: namespaced, Verbs: metav1.Verbs{"get", "list"}}
}

// gadgetNamespacedCRD defines the namespaced gadgets.example.com.
const gadgetNamespacedCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
`
