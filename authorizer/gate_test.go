package authorizer

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/policy"
)

const (
	syncSA     = "system:serviceaccount:argocd:argocd-application-controller"
	thisServer = "https://kubernetes.default.svc"
)

func project(name, spec string) string {
	return "apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata: {name: " + name + ", namespace: argocd}\nspec:\n" + spec + "---\n"
}

func loadSnapshot(t *testing.T, yaml string) *policy.Snapshot {
	t.Helper()
	snap, err := policy.Load([]policy.SourceFile{{Name: "policy.yaml", Data: []byte(yaml)}})
	if err != nil {
		t.Fatalf("policy does not load: %v", err)
	}
	return snap
}

func newTestGate(t *testing.T, snap *policy.Snapshot, mutate func(*GateOptions)) *Gate {
	t.Helper()
	o := GateOptions{
		Impersonators: []Impersonator{{
			UserName: syncSA, ClusterServer: thisServer, APIGroups: []string{"argoproj.io", "deputy.dev"},
			ApplicationNamespaces: []string{"argocd-apps"},
		}},
		Strict:                            true,
		ExemptGroups:                      []string{"system:masters"},
		ProtectedGroups:                   []string{"system:masters"},
		ProtectedUserPrefixes:             []string{"system:kube-"},
		ProtectedServiceAccountNamespaces: []string{"kube-system"},
	}
	if mutate != nil {
		mutate(&o)
	}
	return NewGate(o, func() *policy.Snapshot { return snap }, nil)
}

// legacySA is the check kube-apiserver's legacy impersonation filter sends for
// `--as system:serviceaccount:ns:name` (group "" from core/v1).
func legacySA(requester, ns, name string) *authorizer.AttributesRecord {
	return &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: requester, Groups: []string{"system:authenticated"}},
		Verb: "impersonate", APIGroup: "", APIVersion: "v1", Resource: "serviceaccounts", Namespace: ns, Name: name, ResourceRequest: true}
}

// constrainedSA is the `impersonate:serviceaccount` check of constrained
// impersonation (group authentication.k8s.io).
func constrainedSA(requester, ns, name string) *authorizer.AttributesRecord {
	return &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: requester, Groups: []string{"system:authenticated"}},
		Verb: "impersonate:serviceaccount", APIGroup: "authentication.k8s.io", APIVersion: "v1", Resource: "serviceaccounts", Namespace: ns, Name: name, ResourceRequest: true}
}

// on is the `impersonate-on:serviceaccount:<verb>` check: the real request's
// attributes with the verb rewritten.
func on(requester, verb, group, resource, ns, name string) *authorizer.AttributesRecord {
	return &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: requester, Groups: []string{"system:authenticated"}},
		Verb: "impersonate-on:serviceaccount:" + verb, APIGroup: group, APIVersion: "v1", Resource: resource, Namespace: ns, Name: name, ResourceRequest: true}
}

func onPath(requester, path string) *authorizer.AttributesRecord {
	return &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: requester}, Verb: "impersonate-on:serviceaccount:get", Path: path}
}

func decisionName(d authorizer.Decision) string {
	switch d {
	case authorizer.DecisionAllow:
		return "Allow"
	case authorizer.DecisionDeny:
		return "Deny"
	}
	return "NoOpinion"
}

type gateCase struct {
	name       string
	attrs      *authorizer.AttributesRecord
	want       authorizer.Decision
	wantReason string // substring
}

func runGateCases(t *testing.T, g *Gate, cases []gateCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, reason, err := g.Authorize(context.Background(), tc.attrs)
			if err != nil {
				t.Errorf("unexpected error %v", err)
			}
			if d != tc.want {
				t.Fatalf("decision %s, want %s (reason %q)", decisionName(d), decisionName(tc.want), reason)
			}
			if !strings.Contains(reason, tc.wantReason) {
				t.Errorf("reason %q lacks %q", reason, tc.wantReason)
			}
		})
	}
}

// The Argo CD scenarios of destinationServiceAccounts, run backwards: which
// ServiceAccounts may the sync identity impersonate? Each case is checked in
// both the legacy and the constrained shape.
func TestGateDerivesExactlyTheProjectsServiceAccounts(t *testing.T) {
	for _, sc := range []struct {
		name    string
		spec    string
		allowed [][2]string // namespace, name
		denied  [][2]string
	}{
		{
			name:    "one catch-all entry derives that name in every namespace",
			spec:    "  destinationServiceAccounts:\n  - {server: '*', namespace: '*', defaultServiceAccount: deployer}\n",
			allowed: [][2]string{{"guestbook", "deployer"}, {"team-a", "deployer"}},
			denied:  [][2]string{{"guestbook", "other"}, {"kube-system", "deployer"}},
		},
		{
			name: "one entry per namespace derives each namespace's own ServiceAccount",
			spec: "  destinationServiceAccounts:\n  - {server: https://kubernetes.default.svc, namespace: team-a, defaultServiceAccount: a-deployer}\n" +
				"  - {server: https://kubernetes.default.svc, namespace: team-b, defaultServiceAccount: b-deployer}\n",
			allowed: [][2]string{{"team-a", "a-deployer"}, {"team-b", "b-deployer"}},
			denied:  [][2]string{{"team-a", "b-deployer"}, {"team-b", "a-deployer"}, {"team-c", "a-deployer"}},
		},
		{
			name:   "an entry for another cluster's server derives nothing here",
			spec:   "  destinationServiceAccounts:\n  - {server: https://prod.example.com:6443, namespace: '*', defaultServiceAccount: deployer}\n",
			denied: [][2]string{{"guestbook", "deployer"}},
		},
		{
			name: "the first matching entry wins: guestbook-prod, guestbook-*, *",
			spec: "  destinationServiceAccounts:\n  - {server: '*', namespace: guestbook-prod, defaultServiceAccount: prod-sa}\n" +
				"  - {server: '*', namespace: 'guestbook-*', defaultServiceAccount: dev-sa}\n" +
				"  - {server: '*', namespace: '*', defaultServiceAccount: default-sa}\n",
			allowed: [][2]string{{"myns", "default-sa"}, {"guestbook-dev", "dev-sa"}, {"guestbook-prod", "prod-sa"}},
			denied: [][2]string{{"myns", "dev-sa"}, {"myns", "prod-sa"}, {"guestbook-dev", "default-sa"}, {"guestbook-dev", "prod-sa"},
				{"guestbook-prod", "dev-sa"}, {"guestbook-prod", "default-sa"}},
		},
		{
			name:    "the namespace:name form names the ServiceAccount's own namespace",
			spec:    "  destinationServiceAccounts:\n  - {server: '*', namespace: guestbook, defaultServiceAccount: 'deployers:deployer'}\n",
			allowed: [][2]string{{"deployers", "deployer"}},
			denied:  [][2]string{{"guestbook", "deployer"}, {"deployers", "other"}},
		},
		{
			name:    "the namespace:name form with a wildcard destination is reachable unless shadowed",
			spec:    "  destinationServiceAccounts:\n  - {server: '*', namespace: 'team-*', defaultServiceAccount: 'deployers:team-deployer'}\n",
			allowed: [][2]string{{"deployers", "team-deployer"}},
		},
		{
			name: "an entry shadowed by an earlier catch-all derives nothing",
			spec: "  destinationServiceAccounts:\n  - {server: '*', namespace: '*', defaultServiceAccount: first}\n" +
				"  - {server: '*', namespace: 'team-*', defaultServiceAccount: 'deployers:never'}\n",
			allowed: [][2]string{{"team-a", "first"}},
			denied:  [][2]string{{"deployers", "never"}},
		},
		{
			name:    "an empty destination namespace derives the bare name in the Application's namespace",
			spec:    "  sourceNamespaces: [argocd-apps]\n  destinationServiceAccounts:\n  - {server: '*', namespace: '', defaultServiceAccount: app-deployer}\n",
			allowed: [][2]string{{"argocd-apps", "app-deployer"}},
			denied:  [][2]string{{"guestbook", "app-deployer"}},
		},
		{
			name:   "an Application namespace the project's sourceNamespaces do not admit derives nothing",
			spec:   "  destinationServiceAccounts:\n  - {server: '*', namespace: '', defaultServiceAccount: app-deployer}\n",
			denied: [][2]string{{"argocd-apps", "app-deployer"}},
		},
	} {
		t.Run(sc.name, func(t *testing.T) {
			g := newTestGate(t, loadSnapshot(t, project("p", sc.spec)), nil)
			var cases []gateCase
			for _, a := range sc.allowed {
				cases = append(cases,
					gateCase{"legacy impersonate of " + a[0] + "/" + a[1] + " is allowed", legacySA(syncSA, a[0], a[1]), authorizer.DecisionAllow, "derives system:serviceaccount:" + a[0] + ":" + a[1]},
					gateCase{"constrained impersonate of " + a[0] + "/" + a[1] + " is allowed", constrainedSA(syncSA, a[0], a[1]), authorizer.DecisionAllow, "AppProject argoproj.io argocd/p destinationServiceAccounts["})
			}
			for _, d := range sc.denied {
				cases = append(cases,
					gateCase{"legacy impersonate of " + d[0] + "/" + d[1] + " is denied", legacySA(syncSA, d[0], d[1]), authorizer.DecisionDeny, "deputy impersonation gate"},
					gateCase{"constrained impersonate of " + d[0] + "/" + d[1] + " is denied", constrainedSA(syncSA, d[0], d[1]), authorizer.DecisionDeny, "deputy impersonation gate"})
			}
			runGateCases(t, g, cases)
		})
	}
}

// widgetCRD defines the cluster-scoped widgets.example.com for file mode's
// resource catalog.
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
`

const guestbookProject = "  destinations:\n  - {server: https://kubernetes.default.svc, namespace: guestbook}\n  - {server: https://kubernetes.default.svc, namespace: 'guestbook-*'}\n" +
	"  destinationServiceAccounts:\n  - {server: https://kubernetes.default.svc, namespace: guestbook, defaultServiceAccount: guestbook-deployer}\n"

func TestGateScopesTheActionsOfTheSyncIdentity(t *testing.T) {
	g := newTestGate(t, loadSnapshot(t, project("guestbook", guestbookProject)+
		project("infra", "  destinations:\n  - {server: '*', namespace: infra}\n  clusterResourceWhitelist:\n  - {group: rbac.authorization.k8s.io, kind: ClusterRole}\n  - {group: example.com, kind: Widget}\n")+widgetCRD), nil)
	runGateCases(t, g, []gateCase{
		{"listing pods in a destination namespace is allowed", on(syncSA, "list", "", "pods", "guestbook", ""), authorizer.DecisionAllow, `namespace "guestbook" is a destination of AppProject argoproj.io argocd/guestbook`},
		{"patching a deployment in a wildcard destination is allowed", on(syncSA, "patch", "apps", "deployments", "guestbook-dev", "web"), authorizer.DecisionAllow, "guestbook-dev"},
		{"every sync verb is allowed", on(syncSA, "delete", "", "configmaps", "guestbook", "c"), authorizer.DecisionAllow, ""},
		{"a namespace outside every destination is denied", on(syncSA, "list", "", "pods", "team-b", ""), authorizer.DecisionDeny, "is not a destination of any AppProject of " + syncSA},
		{"a verb a sync does not use is denied", on(syncSA, "deletecollection", "", "pods", "guestbook", ""), authorizer.DecisionDeny, `verb "deletecollection" is not one a sync uses`},
		{"escalate is not a sync verb", on(syncSA, "escalate", "rbac.authorization.k8s.io", "roles", "guestbook", ""), authorizer.DecisionDeny, "not one a sync uses"},
		{"discovery is allowed", onPath(syncSA, "/apis/apps/v1"), authorizer.DecisionAllow, "discovery"},
		{"the version endpoint is allowed", onPath(syncSA, "/version"), authorizer.DecisionAllow, "discovery"},
		{"other non-resource paths are denied", onPath(syncSA, "/metrics"), authorizer.DecisionDeny, "only discovery"},
		{"a prefix that only looks like discovery is denied", onPath(syncSA, "/apisx"), authorizer.DecisionDeny, "only discovery"},
		{"the Namespace object of a destination needs the whitelist like any cluster-scoped object", on(syncSA, "get", "", "namespaces", "guestbook", "guestbook"), authorizer.DecisionDeny, "clusterResourceWhitelist"},
		{"another Namespace object may not be read", on(syncSA, "get", "", "namespaces", "", "kube-system"), authorizer.DecisionDeny, "clusterResourceWhitelist"},
		{"a whitelisted cluster-scoped kind is allowed", on(syncSA, "create", "rbac.authorization.k8s.io", "clusterroles", "", ""), authorizer.DecisionAllow, "permits cluster-scoped ClusterRole.rbac.authorization.k8s.io"},
		{"a whitelisted custom kind of a CustomResourceDefinition in the policy is allowed", on(syncSA, "patch", "example.com", "widgets", "", "w"), authorizer.DecisionAllow, `Widget.example.com "w"`},
		{"a resource of no known definition is denied without a namespace", on(syncSA, "patch", "example.com", "gadgets", "", "g"), authorizer.DecisionDeny, "cannot tell whether gadgets.example.com is namespaced"},
		{"a cluster-scoped kind outside the whitelist is denied", on(syncSA, "create", "rbac.authorization.k8s.io", "clusterrolebindings", "", ""), authorizer.DecisionDeny, "clusterResourceWhitelist"},
		{"listing pods across all namespaces is denied", on(syncSA, "list", "", "pods", "", ""), authorizer.DecisionDeny, "Pod across all namespaces needs an AppProject"},
		{"a self access review (preflight) is allowed", on(syncSA, "create", "authorization.k8s.io", "selfsubjectaccessreviews", "", ""), authorizer.DecisionAllow, "self reviews"},
		{"a self review is allowed", on(syncSA, "create", "authentication.k8s.io", "selfsubjectreviews", "", ""), authorizer.DecisionAllow, "self reviews"},
		{"a subject access review about others is denied", on(syncSA, "create", "authorization.k8s.io", "subjectaccessreviews", "", ""), authorizer.DecisionDeny, "clusterResourceWhitelist"},
	})
}

// Argo CD's documented negation pattern: every namespace but kube-system.
// A "!" entry matches everything its pattern does not, and vetoes what it does.
func TestGateHonoursNegatedDestinations(t *testing.T) {
	g := newTestGate(t, loadSnapshot(t, project("all-but-system", "  destinations:\n  - {server: '*', namespace: '!kube-system'}\n  - {server: '*', namespace: '*'}\n")), nil)
	runGateCases(t, g, []gateCase{
		{"an ordinary namespace is a destination", on(syncSA, "list", "", "pods", "team-b", ""), authorizer.DecisionAllow, "team-b"},
		{"the negated namespace is vetoed although * matches it", on(syncSA, "get", "", "secrets", "kube-system", "s"), authorizer.DecisionDeny, `namespace "kube-system" is not a destination`},
	})
}

func TestGateDeniesEveryOtherImpersonationToTheSyncIdentity(t *testing.T) {
	g := newTestGate(t, loadSnapshot(t, project("catch-all", "  destinations: [{server: '*', namespace: '*'}]\n  destinationServiceAccounts:\n  - {server: '*', namespace: '*', defaultServiceAccount: deployer}\n")), nil)
	u := &user.DefaultInfo{Name: syncSA}
	rec := func(verb, group, resource, ns, name string) *authorizer.AttributesRecord {
		return &authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, Resource: resource, Namespace: ns, Name: name, ResourceRequest: true}
	}
	runGateCases(t, g, []gateCase{
		{"impersonating a user is denied", rec("impersonate", "", "users", "", "alice"), authorizer.DecisionDeny, "may impersonate only the ServiceAccounts"},
		{"impersonating a group is denied", rec("impersonate", "", "groups", "", "developers"), authorizer.DecisionDeny, "may impersonate only"},
		{"impersonating a uid is denied", rec("impersonate", "authentication.k8s.io", "uids", "", "1234"), authorizer.DecisionDeny, "may impersonate only"},
		{"impersonating a user extra is denied", rec("impersonate", "authentication.k8s.io", "userextras", "", "v"), authorizer.DecisionDeny, "may impersonate only"},
		{"the user-info mode is denied", rec("impersonate:user-info", "authentication.k8s.io", "users", "", "alice"), authorizer.DecisionDeny, "mode user-info"},
		{"the arbitrary-node mode is denied", rec("impersonate:arbitrary-node", "authentication.k8s.io", "nodes", "", "n1"), authorizer.DecisionDeny, "mode arbitrary-node"},
		{"acting in the user-info mode is denied", rec("impersonate-on:user-info:get", "", "pods", "guestbook", ""), authorizer.DecisionDeny, "not in impersonation mode user-info"},
		{"a ServiceAccount without a name is denied", legacySA(syncSA, "guestbook", ""), authorizer.DecisionDeny, "needs a namespace and a name"},
		{"a kube-system ServiceAccount is protected even when a project derives it", constrainedSA(syncSA, "kube-system", "deployer"), authorizer.DecisionDeny, "protected targets"},
		{"a request that is not an impersonation has no opinion", rec("get", "", "pods", "guestbook", "p"), authorizer.DecisionNoOpinion, ""},
		{"a verb that only starts like impersonate has no opinion", rec("impersonatex", "", "pods", "guestbook", "p"), authorizer.DecisionNoOpinion, ""},
	})

	t.Run("requireConstrained denies the legacy path and keeps the constrained one", func(t *testing.T) {
		g := newTestGate(t, loadSnapshot(t, project("catch-all", "  destinationServiceAccounts:\n  - {server: '*', namespace: '*', defaultServiceAccount: deployer}\n")),
			func(o *GateOptions) { o.RequireConstrained = true })
		runGateCases(t, g, []gateCase{
			{"legacy is denied", legacySA(syncSA, "guestbook", "deployer"), authorizer.DecisionDeny, "requireConstrained"},
			{"constrained is allowed", constrainedSA(syncSA, "guestbook", "deployer"), authorizer.DecisionAllow, ""},
		})
	})

	t.Run("a denial names the closest entry", func(t *testing.T) {
		g := newTestGate(t, loadSnapshot(t, project("guestbook", guestbookProject)), nil)
		_, reason, _ := g.Authorize(context.Background(), constrainedSA(syncSA, "team-b", "guestbook-deployer"))
		for _, want := range []string{"no AppProject of " + syncSA + " derives system:serviceaccount:team-b:guestbook-deployer", "closest: AppProject argoproj.io argocd/guestbook destinationServiceAccounts[0]", `defaultServiceAccount "guestbook-deployer"`} {
			if !strings.Contains(reason, want) {
				t.Errorf("reason %q lacks %q", reason, want)
			}
		}
	})

	t.Run("projects of groups or namespaces the impersonator does not read grant nothing", func(t *testing.T) {
		snap := loadSnapshot(t, project("catch-all", "  destinationServiceAccounts:\n  - {server: '*', namespace: '*', defaultServiceAccount: deployer}\n"))
		for name, mutate := range map[string]func(*GateOptions){
			"another group":     func(o *GateOptions) { o.Impersonators[0].APIGroups = []string{"deputy.dev"} },
			"another namespace": func(o *GateOptions) { o.Impersonators[0].Namespaces = []string{"elsewhere"} },
		} {
			t.Run(name, func(t *testing.T) {
				runGateCases(t, newTestGate(t, snap, mutate), []gateCase{
					{"the ServiceAccount is denied", constrainedSA(syncSA, "guestbook", "deployer"), authorizer.DecisionDeny, "no AppProject grants this identity"},
				})
			})
		}
	})
}

// The rule the built-in edit role carries through aggregation: impersonate on
// serviceaccounts without resourceNames.
const editLikeRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: sa-impersonator}
rules:
- {apiGroups: [""], resources: [serviceaccounts], verbs: [impersonate]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: carol-impersonates, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sa-impersonator}
subjects: [{kind: User, name: carol}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: impersonate-deployer, namespace: team-a}
rules:
- {apiGroups: [""], resources: [serviceaccounts], verbs: [impersonate], resourceNames: [deployer]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dave-impersonates-deployer, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: impersonate-deployer}
subjects: [{kind: User, name: dave}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: star}
rules:
- {apiGroups: ["*"], resources: ["*"], verbs: ["*"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: erin-star}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: star}
subjects: [{kind: User, name: erin}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: literal-star}
rules:
- {apiGroups: [authentication.k8s.io], resources: [groups], verbs: ["impersonate:user-info"], resourceNames: ["*"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: frank-literal-star}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: literal-star}
subjects: [{kind: User, name: frank}]
`

func TestGateStrictModeCountsOnlyRulesNamingTheTarget(t *testing.T) {
	snap := loadSnapshot(t, editLikeRBAC)
	strict := newTestGate(t, snap, nil)
	runGateCases(t, strict, []gateCase{
		{"a rule without resourceNames does not allow", legacySA("carol", "team-a", "deployer"), authorizer.DecisionDeny, "only through an RBAC rule that names the target in resourceNames"},
		{"a rule naming the target allows", legacySA("dave", "team-a", "deployer"), authorizer.DecisionAllow, `RoleBinding "dave-impersonates-deployer/team-a"`},
		{"a rule naming another target does not allow", legacySA("dave", "team-a", "admin"), authorizer.DecisionDeny, "strict"},
		{"* verbs on * resources do not count", legacySA("erin", "team-a", "deployer"), authorizer.DecisionDeny, "strict"},
		{"constrained checks of non-impersonators follow the same rule", constrainedSA("carol", "team-a", "deployer"), authorizer.DecisionDeny, "strict"},
		{"impersonate-on without a named object is denied", on("erin", "list", "", "pods", "team-a", ""), authorizer.DecisionDeny, "strict"},
		{"impersonating a protected group is denied", &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "dave"}, Verb: "impersonate", Resource: "groups", Name: "system:masters", ResourceRequest: true}, authorizer.DecisionDeny, "protected target"},
		{"impersonating a protected user is denied", &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "dave"}, Verb: "impersonate", Resource: "users", Name: "system:kube-scheduler", ResourceRequest: true}, authorizer.DecisionDeny, "protected target"},
		{"an exempt group is left to RBAC", legacySA("root", "team-a", "deployer"), authorizer.DecisionDeny, "strict"},
		{"a rule with resourceNames [*] does not cover the wildcard group check", &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "frank"}, Verb: "impersonate:user-info", APIGroup: "authentication.k8s.io", Resource: "groups", Name: "*", ResourceRequest: true}, authorizer.DecisionDeny, "includes protected targets"},
	})
	masters := legacySA("root", "team-a", "deployer")
	masters.User = &user.DefaultInfo{Name: "root", Groups: []string{"system:masters"}}
	runGateCases(t, strict, []gateCase{{"system:masters is exempt", masters, authorizer.DecisionNoOpinion, ""}})

	lax := newTestGate(t, snap, func(o *GateOptions) { o.Strict = false })
	runGateCases(t, lax, []gateCase{
		{"without strict the gate has no opinion and RBAC decides", legacySA("carol", "team-a", "deployer"), authorizer.DecisionNoOpinion, ""},
		{"without strict protected targets stay protected", constrainedSA("carol", "kube-system", "x"), authorizer.DecisionDeny, "protected"},
	})
}

func TestGateFailsClosedUntilTheClusterIsSynced(t *testing.T) {
	snap := loadSnapshot(t, project("catch-all", "  destinationServiceAccounts:\n  - {server: '*', namespace: '*', defaultServiceAccount: deployer}\n"))
	var state *policy.ClusterState
	o := GateOptions{Impersonators: []Impersonator{{UserName: syncSA, ClusterServer: thisServer, APIGroups: []string{"argoproj.io"}}}, Strict: true}
	g := NewGate(o, func() *policy.Snapshot { return snap }, func() *policy.ClusterState { return state })
	for _, s := range []*policy.ClusterState{nil, {Synced: false}} {
		state = s
		d, _, err := g.Authorize(context.Background(), constrainedSA(syncSA, "guestbook", "deployer"))
		if d != authorizer.DecisionDeny || !errors.Is(err, ErrProjectsNotSynced) {
			t.Errorf("state %+v: decision %s err %v, want Deny with ErrProjectsNotSynced", s, decisionName(d), err)
		}
	}
	state = &policy.ClusterState{Synced: true}
	if d, reason, err := g.Authorize(context.Background(), constrainedSA(syncSA, "guestbook", "deployer")); d != authorizer.DecisionAllow || err != nil {
		t.Errorf("after sync: %s %q %v, want Allow from the file project", decisionName(d), reason, err)
	}
	// Requests that are not impersonation never wait for the cluster.
	state = nil
	if d, _, err := g.Authorize(context.Background(), &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "alice"}, Verb: "get", Resource: "pods", ResourceRequest: true}); d != authorizer.DecisionNoOpinion || err != nil {
		t.Errorf("ordinary request before sync: %s %v", decisionName(d), err)
	}
}

func TestGateSeesANewSnapshot(t *testing.T) {
	snap := loadSnapshot(t, project("p", "  destinationServiceAccounts:\n  - {server: '*', namespace: guestbook, defaultServiceAccount: deployer}\n"))
	g := newTestGate(t, nil, nil)
	g.file = func() *policy.Snapshot { return snap }
	runGateCases(t, g, []gateCase{{"allowed while the entry exists", constrainedSA(syncSA, "guestbook", "deployer"), authorizer.DecisionAllow, ""}})
	snap = loadSnapshot(t, project("p", "  destinationServiceAccounts: []\n"))
	runGateCases(t, g, []gateCase{{"denied once the entry is gone", constrainedSA(syncSA, "guestbook", "deployer"), authorizer.DecisionDeny, ""}})
}
