package authorizer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
)

// rbacRuleBuilder builds a PolicyRule like rbacv1helpers.NewRule upstream.
type rbacRuleBuilder struct{ r rbacv1.PolicyRule }

func rbacRule(verbs ...string) rbacRuleBuilder {
	return rbacRuleBuilder{rbacv1.PolicyRule{Verbs: verbs}}
}

func (b rbacRuleBuilder) Groups(g ...string) rbacRuleBuilder    { b.r.APIGroups = g; return b }
func (b rbacRuleBuilder) Resources(r ...string) rbacRuleBuilder { b.r.Resources = r; return b }
func (b rbacRuleBuilder) Names(n ...string) rbacRuleBuilder     { b.r.ResourceNames = n; return b }
func (b rbacRuleBuilder) URLs(u ...string) rbacRuleBuilder      { b.r.NonResourceURLs = u; return b }
func (b rbacRuleBuilder) Rule() rbacv1.PolicyRule               { return b.r }

func rbacClusterRole(name string, rules ...rbacRuleBuilder) *rbacv1.ClusterRole {
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, r := range rules {
		cr.Rules = append(cr.Rules, r.Rule())
	}
	return cr
}

func rbacRole(namespace, name string, rules ...rbacRuleBuilder) *rbacv1.Role {
	r := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	for _, rule := range rules {
		r.Rules = append(r.Rules, rule.Rule())
	}
	return r
}

func rbacCRB(name, clusterRole string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   subjects,
	}
}

// rbacRB is a RoleBinding to roleKind ("Role" or "ClusterRole") role.
func rbacRB(namespace, name, roleKind, role string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: roleKind, Name: role},
		Subjects:   subjects,
	}
}

func rbacUser(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

func rbacGroup(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

// rbacSA is a ServiceAccount subject; namespace may be empty.
func rbacSA(namespace, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}
}

func rbacWho(name string, groups ...string) user.Info {
	return &user.DefaultInfo{Name: name, Groups: groups}
}

// rbacResource is a resource request; ns and name may be empty.
func rbacResource(u user.Info, verb, group, resource, subresource, ns, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User: u, Verb: verb, APIGroup: group, APIVersion: "v1", Resource: resource, Subresource: subresource,
		Namespace: ns, Name: name, ResourceRequest: true,
	}
}

func rbacPath(u user.Info, verb, path string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: verb, Path: path}
}

// rbacAuthorizer indexes objs (without aggregation, as in cluster mode) and
// returns an RBAC authorizer over the snapshot.
func rbacAuthorizer(t testing.TB, objs policy.RBACObjects) *deputyauthz.RBAC {
	t.Helper()
	r, err := policy.NewRBAC(objs, false)
	if err != nil {
		t.Fatalf("NewRBAC: %v", err)
	}
	snap := &policy.Snapshot{RBAC: r}
	return deputyauthz.NewRBAC(func() *policy.Snapshot { return snap })
}

// rbacCase is one request and the exact answer expected for it.
type rbacCase struct {
	name   string
	attrs  authorizer.Attributes
	want   authorizer.Decision
	reason string
	err    string // "" for no error
}

func rbacRun(t *testing.T, a authorizer.Authorizer, cases []rbacCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, reason, err := a.Authorize(t.Context(), tc.attrs)
			if d != tc.want || reason != tc.reason || errString(err) != tc.err {
				t.Errorf("Authorize = %s, %q, %q\n          want %s, %q, %q",
					decisionName(d), reason, errString(err), decisionName(tc.want), tc.reason, tc.err)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func decisionName(d authorizer.Decision) string {
	switch d {
	case authorizer.DecisionAllow:
		return "Allow"
	case authorizer.DecisionDeny:
		return "Deny"
	case authorizer.DecisionNoOpinion:
		return "NoOpinion"
	}
	return fmt.Sprintf("Decision(%d)", d)
}

const allowedAlice = `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to User "alice"`

// TestRBACRuleMatching checks every matching rule of DESIGN.md against one
// rule bound to alice: "b" -> ClusterRole "r" -> the rule under test.
func TestRBACRuleMatching(t *testing.T) {
	alice := rbacWho("alice")
	tests := []struct {
		name  string
		rule  rbacRuleBuilder
		attrs authorizer.AttributesRecord
		allow bool
	}{
		// Verbs.
		{"a * verb allows any verb", rbacRule("*").Groups("").Resources("pods"), rbacResource(alice, "escalate", "", "pods", "", "ns", ""), true},
		{"an exact verb allows that verb", rbacRule("get").Groups("").Resources("pods"), rbacResource(alice, "get", "", "pods", "", "ns", "p"), true},
		{"an exact verb allows no other verb", rbacRule("get").Groups("").Resources("pods"), rbacResource(alice, "list", "", "pods", "", "ns", ""), false},
		{"any verb of the list allows", rbacRule("get", "list", "watch").Groups("").Resources("pods"), rbacResource(alice, "watch", "", "pods", "", "ns", ""), true},
		{"verbs are case-sensitive: get does not allow GET", rbacRule("get").Groups("").Resources("pods"), rbacResource(alice, "GET", "", "pods", "", "ns", ""), false},
		{"verbs are case-sensitive: GET does not allow get", rbacRule("GET").Groups("").Resources("pods"), rbacResource(alice, "get", "", "pods", "", "ns", ""), false},
		{"a request for verb * is allowed by a * verb", rbacRule("*").Groups("").Resources("pods"), rbacResource(alice, "*", "", "pods", "", "ns", ""), true},
		{"a request for verb * is not allowed by every verb listed", rbacRule("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection").Groups("").Resources("pods"), rbacResource(alice, "*", "", "pods", "", "ns", ""), false},
		{"a literal * verb allows a request for verb *", rbacRule("get", "*").Groups("").Resources("pods"), rbacResource(alice, "*", "", "pods", "", "", ""), true},

		// API groups.
		{"a * group allows any group", rbacRule("get").Groups("*").Resources("deployments"), rbacResource(alice, "get", "apps", "deployments", "", "ns", ""), true},
		{"a * group allows the core group", rbacRule("get").Groups("*").Resources("pods"), rbacResource(alice, "get", "", "pods", "", "ns", ""), true},
		{"the core group allows only the core group", rbacRule("get").Groups("").Resources("deployments"), rbacResource(alice, "get", "apps", "deployments", "", "ns", ""), false},
		{"an exact group allows that group", rbacRule("get").Groups("extensions", "apps").Resources("deployments"), rbacResource(alice, "get", "apps", "deployments", "", "ns", ""), true},
		{"a named group does not allow the core group", rbacRule("get").Groups("apps").Resources("pods"), rbacResource(alice, "get", "", "pods", "", "ns", ""), false},
		{"groups are case-sensitive", rbacRule("get").Groups("Apps").Resources("deployments"), rbacResource(alice, "get", "apps", "deployments", "", "ns", ""), false},
		{"a rule without groups allows no resource request", rbacRule("get").Resources("pods"), rbacResource(alice, "get", "", "pods", "", "ns", ""), false},
		{"the apiVersion is ignored", rbacRule("get").Groups("apps").Resources("deployments"), func() authorizer.AttributesRecord {
			a := rbacResource(alice, "get", "apps", "deployments", "", "ns", "")
			a.APIVersion = "v1beta2"
			return a
		}(), true},
		{"a group/version in the rule is a different group", rbacRule("get").Groups("apps/v1").Resources("deployments"), rbacResource(alice, "get", "apps", "deployments", "", "ns", ""), false},

		// Resources and subresources.
		{"a * resource allows any resource", rbacRule("get").Groups("").Resources("*"), rbacResource(alice, "get", "", "secrets", "", "ns", ""), true},
		{"a * resource allows any subresource", rbacRule("get").Groups("").Resources("*"), rbacResource(alice, "get", "", "pods", "log", "ns", "p"), true},
		{"an exact resource allows that resource", rbacRule("get").Groups("").Resources("pods"), rbacResource(alice, "get", "", "pods", "", "ns", ""), true},
		{"resources are case-sensitive", rbacRule("get").Groups("").Resources("Pods"), rbacResource(alice, "get", "", "pods", "", "ns", ""), false},
		{"a bare resource does not cover its subresources", rbacRule("get").Groups("").Resources("pods"), rbacResource(alice, "get", "", "pods", "status", "ns", "p"), false},
		{"res/sub allows that subresource", rbacRule("get").Groups("").Resources("pods/status"), rbacResource(alice, "get", "", "pods", "status", "ns", "p"), true},
		{"res/sub does not allow another subresource", rbacRule("get").Groups("").Resources("pods/status"), rbacResource(alice, "get", "", "pods", "log", "ns", "p"), false},
		{"res/sub does not allow the resource itself", rbacRule("get").Groups("").Resources("pods/status"), rbacResource(alice, "get", "", "pods", "", "ns", "p"), false},
		{"res/sub does not allow that subresource of another resource", rbacRule("get").Groups("").Resources("pods/status"), rbacResource(alice, "get", "", "nodes", "status", "", "n"), false},
		{"*/sub allows that subresource of any resource", rbacRule("update").Groups("*").Resources("*/scale"), rbacResource(alice, "update", "apps", "deployments", "scale", "ns", "d"), true},
		{"*/sub does not allow the resource itself", rbacRule("update").Groups("*").Resources("*/scale"), rbacResource(alice, "update", "apps", "deployments", "", "ns", "d"), false},
		{"*/sub does not allow another subresource", rbacRule("update").Groups("*").Resources("*/scale"), rbacResource(alice, "update", "apps", "deployments", "status", "ns", "d"), false},
		{"res/* is literal: it does not allow a subresource", rbacRule("get").Groups("").Resources("pods/*"), rbacResource(alice, "get", "", "pods", "log", "ns", "p"), false},
		{"res/* is literal: it allows the subresource named *", rbacRule("get").Groups("").Resources("pods/*"), rbacResource(alice, "get", "", "pods", "*", "ns", "p"), true},
		{"*/* is literal: it does not allow every subresource", rbacRule("get").Groups("").Resources("*/*"), rbacResource(alice, "get", "", "pods", "log", "ns", "p"), false},
		{"a resource prefix is no wildcard", rbacRule("get").Groups("").Resources("pod*"), rbacResource(alice, "get", "", "pods", "", "ns", ""), false},
		{"a request for resource * needs a * resource", rbacRule("get").Groups("").Resources("pods", "secrets"), rbacResource(alice, "get", "", "*", "", "ns", ""), false},
		{"*/sub matches a subresource with slashes as a whole", rbacRule("get").Groups("").Resources("*/other/segment"), rbacResource(alice, "get", "", "foo", "other/segment", "ns", ""), true},
		{"*/sub does not match part of a subresource", rbacRule("get").Groups("").Resources("*/other"), rbacResource(alice, "get", "", "foo", "other/segment", "ns", ""), false},

		// Resource names.
		{"no resourceNames allows every name", rbacRule("get").Groups("").Resources("secrets"), rbacResource(alice, "get", "", "secrets", "", "ns", "anything"), true},
		{"no resourceNames allows the empty name of list", rbacRule("list").Groups("").Resources("secrets"), rbacResource(alice, "list", "", "secrets", "", "ns", ""), true},
		{"no resourceNames allows the empty name of create", rbacRule("create").Groups("").Resources("secrets"), rbacResource(alice, "create", "", "secrets", "", "ns", ""), true},
		{"resourceNames allow a listed name", rbacRule("get").Groups("").Resources("secrets").Names("a", "b"), rbacResource(alice, "get", "", "secrets", "", "ns", "b"), true},
		{"resourceNames allow no other name", rbacRule("get").Groups("").Resources("secrets").Names("a", "b"), rbacResource(alice, "get", "", "secrets", "", "ns", "c"), false},
		{"resourceNames do not allow the empty name of list", rbacRule("list").Groups("").Resources("secrets").Names("a"), rbacResource(alice, "list", "", "secrets", "", "ns", ""), false},
		{"resourceNames do not allow the empty name of create", rbacRule("create").Groups("").Resources("secrets").Names("a"), rbacResource(alice, "create", "", "secrets", "", "ns", ""), false},
		{"resourceName * is literal: it does not allow other names", rbacRule("get").Groups("").Resources("secrets").Names("*"), rbacResource(alice, "get", "", "secrets", "", "ns", "a"), false},
		{"resourceName * is literal: it allows the name *", rbacRule("get").Groups("").Resources("secrets").Names("*"), rbacResource(alice, "get", "", "secrets", "", "ns", "*"), true},
		{"resourceNames are case-sensitive", rbacRule("get").Groups("").Resources("secrets").Names("a"), rbacResource(alice, "get", "", "secrets", "", "ns", "A"), false},
		{"an empty resourceName allows the empty name", rbacRule("list").Groups("").Resources("secrets").Names(""), rbacResource(alice, "list", "", "secrets", "", "ns", ""), true},

		// Non-resource URLs.
		{"a * URL allows every path", rbacRule("get").URLs("*"), rbacPath(alice, "get", "/apis/apps/v1"), true},
		{"a * URL allows the empty path", rbacRule("get").URLs("*"), rbacPath(alice, "get", ""), true},
		{"an exact URL allows that path", rbacRule("get").URLs("/healthz"), rbacPath(alice, "get", "/healthz"), true},
		{"an exact URL allows no sub-path", rbacRule("get").URLs("/healthz"), rbacPath(alice, "get", "/healthz/etcd"), false},
		{"an exact URL allows no trailing slash", rbacRule("get").URLs("/version"), rbacPath(alice, "get", "/version/"), false},
		{"a trailing * is a prefix: /api* allows /api", rbacRule("get").URLs("/api*"), rbacPath(alice, "get", "/api"), true},
		{"a trailing * is a prefix: /api* allows /apis", rbacRule("get").URLs("/api*"), rbacPath(alice, "get", "/apis"), true},
		{"a trailing * is a prefix: /api* allows /api/v1/x", rbacRule("get").URLs("/api*"), rbacPath(alice, "get", "/api/v1/x"), true},
		{"a trailing * is a prefix: /api* does not allow /ap", rbacRule("get").URLs("/api*"), rbacPath(alice, "get", "/ap"), false},
		{"/apis/* allows paths below /apis/", rbacRule("get").URLs("/apis/*"), rbacPath(alice, "get", "/apis/apps"), true},
		{"/apis/* does not allow /apis itself", rbacRule("get").URLs("/apis/*"), rbacPath(alice, "get", "/apis"), false},
		{"multiple trailing stars are one prefix", rbacRule("get").URLs("/healthz**"), rbacPath(alice, "get", "/healthz"), true},
		{"multiple trailing stars allow longer paths", rbacRule("get").URLs("/healthz**"), rbacPath(alice, "get", "/healthz/ping"), true},
		{"a star inside a URL is literal", rbacRule("get").URLs("/api/*/pods"), rbacPath(alice, "get", "/api/v1/pods"), false},
		{"a star inside a URL matches itself", rbacRule("get").URLs("/api/*/pods"), rbacPath(alice, "get", "/api/*/pods"), true},
		{"URLs are case-sensitive", rbacRule("get").URLs("/healthz"), rbacPath(alice, "get", "/Healthz"), false},
		{"a non-resource rule checks the verb", rbacRule("get").URLs("/healthz"), rbacPath(alice, "post", "/healthz"), false},
		{"a non-resource request is decided by verb and path only", rbacRule("get").URLs("/healthz"), authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/healthz", APIGroup: "apps", Resource: "deployments", Namespace: "ns", Name: "x"}, true},
		{"a non-resource rule does not allow resource requests", rbacRule("*").URLs("*"), rbacResource(alice, "get", "", "pods", "", "ns", ""), false},
		{"a resource rule does not allow non-resource requests", rbacRule("*").Groups("*").Resources("*"), rbacPath(alice, "get", "/healthz"), false},
		{"a resource request is decided without its path", rbacRule("get").Groups("").Resources("pods"), func() authorizer.AttributesRecord {
			a := rbacResource(alice, "get", "", "pods", "", "ns", "")
			a.Path = "/not/a/rule/path"
			return a
		}(), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := rbacAuthorizer(t, policy.RBACObjects{
				ClusterRoles:        []*rbacv1.ClusterRole{rbacClusterRole("r", tc.rule)},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{rbacCRB("b", "r", rbacUser("alice"))},
			})
			want := rbacCase{want: authorizer.DecisionNoOpinion}
			if tc.allow {
				want = rbacCase{want: authorizer.DecisionAllow, reason: allowedAlice}
			}
			d, reason, err := a.Authorize(t.Context(), tc.attrs)
			if d != want.want || reason != want.reason || err != nil {
				t.Errorf("Authorize = %s, %q, %v; want %s, %q, nil", decisionName(d), reason, err, decisionName(want.want), want.reason)
			}
			rule := tc.rule.Rule()
			if got := deputyauthz.RuleAllows(tc.attrs, &rule); got != tc.allow {
				t.Errorf("RuleAllows = %v, want %v", got, tc.allow)
			}
		})
	}
}

// TestRBACBindingScope: ClusterRoleBindings always apply; RoleBindings only
// to requests in their namespace, never to cluster-wide requests.
func TestRBACBindingScope(t *testing.T) {
	a := rbacAuthorizer(t, policy.RBACObjects{
		ClusterRoles: []*rbacv1.ClusterRole{
			rbacClusterRole("pod-reader", rbacRule("get", "list").Groups("").Resources("pods")),
			rbacClusterRole("node-reader", rbacRule("get").Groups("").Resources("nodes")),
		},
		Roles: []*rbacv1.Role{
			rbacRole("ns1", "secret-reader", rbacRule("get").Groups("").Resources("secrets")),
			rbacRole("ns2", "secret-reader", rbacRule("list").Groups("").Resources("secrets")),
		},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{rbacCRB("readers", "pod-reader", rbacUser("alice"))},
		RoleBindings: []*rbacv1.RoleBinding{
			rbacRB("ns1", "bob-pods", "ClusterRole", "pod-reader", rbacUser("bob")),
			rbacRB("ns1", "carol-secrets", "Role", "secret-reader", rbacUser("carol")),
			rbacRB("ns1", "dave-nodes", "ClusterRole", "node-reader", rbacUser("dave")),
		},
	})
	rbacRun(t, a, []rbacCase{
		{
			name:   "a ClusterRoleBinding applies in any namespace",
			attrs:  rbacResource(rbacWho("alice"), "get", "", "pods", "", "ns2", "p"),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "pod-reader" to User "alice"`,
		},
		{
			name:   "a ClusterRoleBinding applies to cluster-wide requests",
			attrs:  rbacResource(rbacWho("alice"), "list", "", "pods", "", "", ""),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "pod-reader" to User "alice"`,
		},
		{
			name:   "a RoleBinding applies in its namespace",
			attrs:  rbacResource(rbacWho("bob"), "get", "", "pods", "", "ns1", "p"),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by RoleBinding "bob-pods/ns1" of ClusterRole "pod-reader" to User "bob"`,
		},
		{
			name:  "a RoleBinding does not apply in another namespace",
			attrs: rbacResource(rbacWho("bob"), "get", "", "pods", "", "ns2", "p"),
			want:  authorizer.DecisionNoOpinion,
		},
		{
			name:  "a RoleBinding does not apply to a cluster-wide request",
			attrs: rbacResource(rbacWho("bob"), "list", "", "pods", "", "", ""),
			want:  authorizer.DecisionNoOpinion,
		},
		{
			name:  "namespaces are compared exactly",
			attrs: rbacResource(rbacWho("bob"), "get", "", "pods", "", "NS1", "p"),
			want:  authorizer.DecisionNoOpinion,
		},
		{
			name:   "a RoleBinding to a Role uses the Role of its own namespace",
			attrs:  rbacResource(rbacWho("carol"), "get", "", "secrets", "", "ns1", "s"),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by RoleBinding "carol-secrets/ns1" of Role "secret-reader" to User "carol"`,
		},
		{
			name:  "a Role of the same name in another namespace does not count",
			attrs: rbacResource(rbacWho("carol"), "list", "", "secrets", "", "ns1", ""),
			want:  authorizer.DecisionNoOpinion,
		},
		{
			name:  "a RoleBinding granting a cluster-scoped resource does not allow it cluster-wide",
			attrs: rbacResource(rbacWho("dave"), "get", "", "nodes", "", "", "n1"),
			want:  authorizer.DecisionNoOpinion,
		},
		{
			name:   "a RoleBinding's rules match any request carrying its namespace, as upstream",
			attrs:  rbacResource(rbacWho("dave"), "get", "", "nodes", "", "ns1", "n1"),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by RoleBinding "dave-nodes/ns1" of ClusterRole "node-reader" to User "dave"`,
		},
		{
			name:  "a RoleBinding does not apply to non-resource requests",
			attrs: rbacPath(rbacWho("bob"), "get", "/healthz"),
			want:  authorizer.DecisionNoOpinion,
		},
	})
}

// TestRBACSubjects: User and Group match exactly; ServiceAccount subjects
// match system:serviceaccount:<ns>:<name>, their namespace defaulting to the
// RoleBinding's.
func TestRBACSubjects(t *testing.T) {
	a := rbacAuthorizer(t, policy.RBACObjects{
		ClusterRoles: []*rbacv1.ClusterRole{rbacClusterRole("view", rbacRule("get").Groups("").Resources("pods"))},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			rbacCRB("users", "view", rbacUser("alice")),
			rbacCRB("groups", "view", rbacGroup("devs")),
			rbacCRB("sa", "view", rbacSA("build", "ci")),
			// The file loader rejects this, as kube-apiserver does; it can
			// only come from NewRBAC directly.
			rbacCRB("sa-without-namespace", "view", rbacSA("", "orphan")),
			rbacCRB("sa-shaped-user", "view", rbacUser("system:serviceaccount:tools:runner")),
			rbacCRB("stars", "view", rbacUser("*"), rbacGroup("*")),
			rbacCRB("unknown-kind", "view", rbacv1.Subject{Kind: "user", Name: "erin"}, rbacv1.Subject{Kind: "", Name: "erin"}),
		},
		RoleBindings: []*rbacv1.RoleBinding{
			rbacRB("ns1", "local-sa", "ClusterRole", "view", rbacSA("", "deployer")),
			rbacRB("ns1", "remote-sa", "ClusterRole", "view", rbacSA("build", "builder")),
		},
	})
	const (
		users  = `RBAC: allowed by ClusterRoleBinding "users" of ClusterRole "view" to User "alice"`
		groups = `RBAC: allowed by ClusterRoleBinding "groups" of ClusterRole "view" to Group "devs"`
	)
	pods := func(u user.Info, ns string) authorizer.AttributesRecord {
		return rbacResource(u, "get", "", "pods", "", ns, "p")
	}
	rbacRun(t, a, []rbacCase{
		{name: "a User subject matches the user name", attrs: pods(rbacWho("alice"), "ns"), want: authorizer.DecisionAllow, reason: users},
		{name: "a User subject is case-sensitive", attrs: pods(rbacWho("Alice"), "ns"), want: authorizer.DecisionNoOpinion},
		{name: "a User subject does not match a group of that name", attrs: pods(rbacWho("bob", "alice"), "ns"), want: authorizer.DecisionNoOpinion},
		{name: "a Group subject matches one of the user's groups", attrs: pods(rbacWho("bob", "qa", "devs"), "ns"), want: authorizer.DecisionAllow, reason: groups},
		{name: "a Group subject does not match a user of that name", attrs: pods(rbacWho("devs"), "ns"), want: authorizer.DecisionNoOpinion},
		{name: "a Group subject is case-sensitive", attrs: pods(rbacWho("bob", "Devs"), "ns"), want: authorizer.DecisionNoOpinion},
		{
			name:   "a ServiceAccount subject matches system:serviceaccount:<ns>:<name>",
			attrs:  pods(rbacWho("system:serviceaccount:build:ci", "system:serviceaccounts", "system:serviceaccounts:build"), "anywhere"),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by ClusterRoleBinding "sa" of ClusterRole "view" to ServiceAccount "ci/build"`,
		},
		{name: "a ServiceAccount subject does not match the same name in another namespace", attrs: pods(rbacWho("system:serviceaccount:other:ci"), "build"), want: authorizer.DecisionNoOpinion},
		{name: "a ServiceAccount subject does not match its bare name", attrs: pods(rbacWho("ci"), "build"), want: authorizer.DecisionNoOpinion},
		{name: "a ServiceAccount subject does not match a user name with extra parts", attrs: pods(rbacWho("system:serviceaccount:build:ci:x"), "build"), want: authorizer.DecisionNoOpinion},
		{name: "a ServiceAccount subject does not match the service-account groups", attrs: pods(rbacWho("x", "system:serviceaccount:build:ci"), "build"), want: authorizer.DecisionNoOpinion},
		{name: "a ServiceAccount subject without namespace in a ClusterRoleBinding never matches", attrs: pods(rbacWho("system:serviceaccount::orphan"), ""), want: authorizer.DecisionNoOpinion},
		{name: "a ServiceAccount subject without namespace in a ClusterRoleBinding does not take the request's", attrs: pods(rbacWho("system:serviceaccount:default:orphan"), "default"), want: authorizer.DecisionNoOpinion},
		{
			name:   "a ServiceAccount subject of a RoleBinding defaults to the binding's namespace",
			attrs:  pods(rbacWho("system:serviceaccount:ns1:deployer"), "ns1"),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by RoleBinding "local-sa/ns1" of ClusterRole "view" to ServiceAccount "deployer/ns1"`,
		},
		{name: "a defaulted ServiceAccount subject does not match another namespace's account", attrs: pods(rbacWho("system:serviceaccount:ns2:deployer"), "ns1"), want: authorizer.DecisionNoOpinion},
		{
			name:   "a ServiceAccount subject of a RoleBinding may name another namespace",
			attrs:  pods(rbacWho("system:serviceaccount:build:builder"), "ns1"),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by RoleBinding "remote-sa/ns1" of ClusterRole "view" to ServiceAccount "builder/build"`,
		},
		{name: "that ServiceAccount is not granted anything outside the RoleBinding's namespace", attrs: pods(rbacWho("system:serviceaccount:build:builder"), "build"), want: authorizer.DecisionNoOpinion},
		{
			name:   "a User subject spelled like a ServiceAccount matches that ServiceAccount's user",
			attrs:  pods(rbacWho("system:serviceaccount:tools:runner"), "tools"),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by ClusterRoleBinding "sa-shaped-user" of ClusterRole "view" to User "system:serviceaccount:tools:runner"`,
		},
		{name: "* as a User or Group name is literal", attrs: pods(rbacWho("frank", "everyone"), "ns"), want: authorizer.DecisionNoOpinion},
		{
			name:   "a user literally named * matches the * subject",
			attrs:  pods(rbacWho("*"), "ns"),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by ClusterRoleBinding "stars" of ClusterRole "view" to User "*"`,
		},
		{name: "subject kinds are case-sensitive and an empty kind matches nobody", attrs: pods(rbacWho("erin"), "ns"), want: authorizer.DecisionNoOpinion},
		{name: "a user without name or groups matches nothing", attrs: pods(rbacWho(""), "ns"), want: authorizer.DecisionNoOpinion},
	})
}

// TestRBACMissingRoles: a role reference that does not resolve is not fatal.
// It is reported (reason and error) only when nothing allows.
func TestRBACMissingRoles(t *testing.T) {
	a := rbacAuthorizer(t, policy.RBACObjects{
		ClusterRoles: []*rbacv1.ClusterRole{rbacClusterRole("view", rbacRule("get").Groups("").Resources("pods"))},
		Roles:        []*rbacv1.Role{rbacRole("ns1", "local", rbacRule("get").Groups("").Resources("secrets"))},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			rbacCRB("broken", "x", rbacUser("alice"), rbacUser("carol"), rbacUser("erin")),
			rbacCRB("also-broken", "y", rbacUser("alice")),
			rbacCRB("works", "view", rbacUser("alice")),
			rbacCRB("broken-again", "x", rbacUser("erin")),
			rbacCRB("late-broken", "z", rbacUser("grace")),
			{ // kinds the loader rejects, through NewRBAC directly
				ObjectMeta: metav1.ObjectMeta{Name: "to-a-role"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "local"},
				Subjects:   []rbacv1.Subject{rbacUser("henry")},
			},
			{
				ObjectMeta: metav1.ObjectMeta{Name: "to-a-bogus-kind"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Bogus", Name: "view"},
				Subjects:   []rbacv1.Subject{rbacUser("henry")},
			},
		},
		RoleBindings: []*rbacv1.RoleBinding{
			rbacRB("ns1", "missing-role", "Role", "gone", rbacUser("dave")),
			rbacRB("ns2", "role-of-another-namespace", "Role", "local", rbacUser("dave")),
			rbacRB("ns1", "works-late", "ClusterRole", "view", rbacUser("grace")),
		},
	})
	const notFoundX = `clusterrole.rbac.authorization.k8s.io "x" not found`
	rbacRun(t, a, []rbacCase{
		{
			name:   "a missing ClusterRole does not keep another binding from allowing",
			attrs:  rbacResource(rbacWho("alice"), "get", "", "pods", "", "ns", "p"),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by ClusterRoleBinding "works" of ClusterRole "view" to User "alice"`,
		},
		{
			name:   "when nothing allows, every missing role met is in the reason and the error",
			attrs:  rbacResource(rbacWho("alice"), "delete", "", "pods", "", "ns", "p"),
			want:   authorizer.DecisionNoOpinion,
			reason: `RBAC: [clusterrole.rbac.authorization.k8s.io "x" not found, clusterrole.rbac.authorization.k8s.io "y" not found]`,
			err:    `[clusterrole.rbac.authorization.k8s.io "x" not found, clusterrole.rbac.authorization.k8s.io "y" not found]`,
		},
		{
			name:   "one missing ClusterRole and nothing else is reported alone",
			attrs:  rbacResource(rbacWho("carol"), "get", "", "pods", "", "ns", "p"),
			want:   authorizer.DecisionNoOpinion,
			reason: "RBAC: " + notFoundX,
			err:    notFoundX,
		},
		{
			name:   "the same missing role met through two bindings is reported once",
			attrs:  rbacResource(rbacWho("erin"), "get", "", "pods", "", "", ""),
			want:   authorizer.DecisionNoOpinion,
			reason: "RBAC: " + notFoundX,
			err:    notFoundX,
		},
		{
			name:   "a missing role met before the allowing binding is not reported",
			attrs:  rbacResource(rbacWho("grace"), "get", "", "pods", "", "ns1", "p"),
			want:   authorizer.DecisionAllow,
			reason: `RBAC: allowed by RoleBinding "works-late/ns1" of ClusterRole "view" to User "grace"`,
		},
		{
			name:   "a missing Role of a RoleBinding is reported for requests in its namespace",
			attrs:  rbacResource(rbacWho("dave"), "get", "", "secrets", "", "ns1", "s"),
			want:   authorizer.DecisionNoOpinion,
			reason: `RBAC: role.rbac.authorization.k8s.io "gone" not found`,
			err:    `role.rbac.authorization.k8s.io "gone" not found`,
		},
		{
			name:   "a RoleBinding does not resolve a Role of another namespace",
			attrs:  rbacResource(rbacWho("dave"), "get", "", "secrets", "", "ns2", "s"),
			want:   authorizer.DecisionNoOpinion,
			reason: `RBAC: role.rbac.authorization.k8s.io "local" not found`,
			err:    `role.rbac.authorization.k8s.io "local" not found`,
		},
		{
			name:  "a missing Role is not consulted outside its namespace",
			attrs: rbacResource(rbacWho("dave"), "get", "", "secrets", "", "ns3", "s"),
			want:  authorizer.DecisionNoOpinion,
		},
		{
			name:   "a ClusterRoleBinding to a Role or an unknown kind resolves to errors, as upstream",
			attrs:  rbacResource(rbacWho("henry"), "get", "", "secrets", "", "ns1", "s"),
			want:   authorizer.DecisionNoOpinion,
			reason: `RBAC: [role.rbac.authorization.k8s.io "local" not found, unsupported role reference kind: "Bogus"]`,
			err:    `[role.rbac.authorization.k8s.io "local" not found, unsupported role reference kind: "Bogus"]`,
		},
		{
			name:  "a user no binding names gets no opinion and no error",
			attrs: rbacResource(rbacWho("nobody", "system:authenticated"), "get", "", "pods", "", "ns", "p"),
			want:  authorizer.DecisionNoOpinion,
		},
	})
}

// TestRBACReasons checks the allow reason for every binding and subject kind
// (clusterRoleBindingDescriber / roleBindingDescriber upstream).
func TestRBACReasons(t *testing.T) {
	a := rbacAuthorizer(t, policy.RBACObjects{
		ClusterRoles: []*rbacv1.ClusterRole{rbacClusterRole("r", rbacRule("get").Groups("").Resources("pods"))},
		Roles:        []*rbacv1.Role{rbacRole("ns", "role", rbacRule("list").Groups("").Resources("pods"))},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			rbacCRB("b", "r", rbacUser("alice"), rbacGroup("g"), rbacSA("sa-ns", "sa")),
		},
		RoleBindings: []*rbacv1.RoleBinding{
			rbacRB("ns", "b", "Role", "role", rbacUser("alice"), rbacGroup("g"), rbacSA("", "sa"), rbacSA("other", "sa")),
		},
	})
	rbacRun(t, a, []rbacCase{
		{"ClusterRoleBinding to a User", rbacResource(rbacWho("alice"), "get", "", "pods", "", "", ""), authorizer.DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to User "alice"`, ""},
		{"ClusterRoleBinding to a Group", rbacResource(rbacWho("x", "g"), "get", "", "pods", "", "", ""), authorizer.DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to Group "g"`, ""},
		{"ClusterRoleBinding to a ServiceAccount prints name/namespace", rbacResource(rbacWho("system:serviceaccount:sa-ns:sa"), "get", "", "pods", "", "", ""), authorizer.DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to ServiceAccount "sa/sa-ns"`, ""},
		{"RoleBinding to a User prints name/namespace of the binding", rbacResource(rbacWho("alice"), "list", "", "pods", "", "ns", ""), authorizer.DecisionAllow,
			`RBAC: allowed by RoleBinding "b/ns" of Role "role" to User "alice"`, ""},
		{"RoleBinding to a Group", rbacResource(rbacWho("x", "g"), "list", "", "pods", "", "ns", ""), authorizer.DecisionAllow,
			`RBAC: allowed by RoleBinding "b/ns" of Role "role" to Group "g"`, ""},
		{"RoleBinding to a ServiceAccount without namespace prints the binding's", rbacResource(rbacWho("system:serviceaccount:ns:sa"), "list", "", "pods", "", "ns", ""), authorizer.DecisionAllow,
			`RBAC: allowed by RoleBinding "b/ns" of Role "role" to ServiceAccount "sa/ns"`, ""},
		{"RoleBinding to a ServiceAccount with a namespace prints that one", rbacResource(rbacWho("system:serviceaccount:other:sa"), "list", "", "pods", "", "ns", ""), authorizer.DecisionAllow,
			`RBAC: allowed by RoleBinding "b/ns" of Role "role" to ServiceAccount "sa/other"`, ""},
	})
}

// TestRBACFirstMatchingSubject: when several subjects of one binding match,
// the first one (appliesTo's index upstream) is reported.
func TestRBACFirstMatchingSubject(t *testing.T) {
	a := rbacAuthorizer(t, policy.RBACObjects{
		ClusterRoles: []*rbacv1.ClusterRole{rbacClusterRole("r", rbacRule("get").Groups("").Resources("pods"))},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			rbacCRB("mixed", "r", rbacUser("bob"), rbacGroup("devs"), rbacUser("alice"), rbacGroup("ops"), rbacGroup("devs")),
			rbacCRB("sa-user-first", "r", rbacUser("system:serviceaccount:ns:one"), rbacSA("ns", "one")),
			rbacCRB("sa-first", "r", rbacSA("ns", "two"), rbacUser("system:serviceaccount:ns:two")),
		},
		RoleBindings: []*rbacv1.RoleBinding{
			rbacRB("ns", "rb", "ClusterRole", "r", rbacSA("other", "three"), rbacSA("", "three"), rbacUser("system:serviceaccount:ns:three")),
		},
	})
	mixed := func(subject string) string {
		return `RBAC: allowed by ClusterRoleBinding "mixed" of ClusterRole "r" to ` + subject
	}
	get := func(u user.Info, ns string) authorizer.AttributesRecord {
		return rbacResource(u, "get", "", "pods", "", ns, "p")
	}
	rbacRun(t, a, []rbacCase{
		{"a group listed before the user's name is reported", get(rbacWho("alice", "ops", "devs"), ""), authorizer.DecisionAllow, mixed(`Group "devs"`), ""},
		{"the user's name is reported when it comes first", get(rbacWho("bob", "devs"), ""), authorizer.DecisionAllow, mixed(`User "bob"`), ""},
		{"the user's name is reported when no earlier group matches", get(rbacWho("alice", "ops"), ""), authorizer.DecisionAllow, mixed(`User "alice"`), ""},
		{"the first of several matching groups is reported, whatever the user's group order", get(rbacWho("x", "ops", "devs"), ""), authorizer.DecisionAllow, mixed(`Group "devs"`), ""},
		{"a group the user has twice is reported once, at its first subject", get(rbacWho("x", "ops", "ops"), ""), authorizer.DecisionAllow, mixed(`Group "ops"`), ""},
		{"a User subject spelled like the ServiceAccount, listed first, is reported",
			get(rbacWho("system:serviceaccount:ns:one"), ""), authorizer.DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "sa-user-first" of ClusterRole "r" to User "system:serviceaccount:ns:one"`, ""},
		{"a ServiceAccount subject listed first is reported",
			get(rbacWho("system:serviceaccount:ns:two"), ""), authorizer.DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "sa-first" of ClusterRole "r" to ServiceAccount "two/ns"`, ""},
		{"the first subject matching after namespace defaulting is reported",
			get(rbacWho("system:serviceaccount:ns:three"), "ns"), authorizer.DecisionAllow,
			`RBAC: allowed by RoleBinding "rb/ns" of ClusterRole "r" to ServiceAccount "three/ns"`, ""},
	})
}

// TestRBACBindingOrder: the first binding in load order that allows gives the
// reason; ClusterRoleBindings come before RoleBindings.
func TestRBACBindingOrder(t *testing.T) {
	a := rbacAuthorizer(t, policy.RBACObjects{
		ClusterRoles: []*rbacv1.ClusterRole{
			rbacClusterRole("get", rbacRule("get").Groups("").Resources("pods")),
			rbacClusterRole("list", rbacRule("list").Groups("").Resources("pods")),
			rbacClusterRole("watch", rbacRule("watch").Groups("").Resources("pods")),
			rbacClusterRole("get-watch-delete", rbacRule("get", "watch", "delete").Groups("").Resources("pods")),
		},
		RoleBindings: []*rbacv1.RoleBinding{
			rbacRB("ns", "rb-first-in-file", "ClusterRole", "get", rbacUser("alice")),
			rbacRB("ns", "rb-list", "ClusterRole", "list", rbacUser("alice")),
		},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			rbacCRB("z-loaded-first", "get", rbacUser("alice")),
			rbacCRB("a-loaded-second", "get", rbacUser("alice")),
			// The user in many groups: u with groups g1, g2, g3, g8, g9.
			rbacCRB("b0", "list", rbacGroup("g9")),
			rbacCRB("b1", "get", rbacGroup("g3"), rbacGroup("g1")),
			rbacCRB("b2", "get", rbacUser("u")),
			rbacCRB("b3", "watch", rbacGroup("g1")),
			rbacCRB("b4", "get-watch-delete", rbacGroup("g8"), rbacGroup("g2")),
			rbacCRB("b5", "get-watch-delete", rbacGroup("g7")),
		},
	})
	u := rbacWho("u", "g1", "g2", "g3", "g8", "g9", "g1")
	reason := func(binding, role, subject string) string {
		return fmt.Sprintf(`RBAC: allowed by ClusterRoleBinding %q of ClusterRole %q to %s`, binding, role, subject)
	}
	rbacRun(t, a, []rbacCase{
		{"the first ClusterRoleBinding in load order gives the reason, not the first by name",
			rbacResource(rbacWho("alice"), "get", "", "pods", "", "", ""), authorizer.DecisionAllow, reason("z-loaded-first", "get", `User "alice"`), ""},
		{"ClusterRoleBindings are visited before RoleBindings",
			rbacResource(rbacWho("alice"), "get", "", "pods", "", "ns", ""), authorizer.DecisionAllow, reason("z-loaded-first", "get", `User "alice"`), ""},
		{"a RoleBinding allows what no ClusterRoleBinding does",
			rbacResource(rbacWho("alice"), "list", "", "pods", "", "ns", ""), authorizer.DecisionAllow, `RBAC: allowed by RoleBinding "rb-list/ns" of ClusterRole "list" to User "alice"`, ""},
		{"a user in many groups: the earliest allowing binding, through a group",
			rbacResource(u, "get", "", "pods", "", "", ""), authorizer.DecisionAllow, reason("b1", "get", `Group "g3"`), ""},
		{"a user in many groups: a later binding through another group",
			rbacResource(u, "watch", "", "pods", "", "", ""), authorizer.DecisionAllow, reason("b3", "watch", `Group "g1"`), ""},
		{"a user in many groups: the binding listing two of the user's groups reports the first",
			rbacResource(u, "delete", "", "pods", "", "", ""), authorizer.DecisionAllow, reason("b4", "get-watch-delete", `Group "g8"`), ""},
		{"a user in many groups: the first binding of all",
			rbacResource(u, "list", "", "pods", "", "", ""), authorizer.DecisionAllow, reason("b0", "list", `Group "g9"`), ""},
		{"a user in many groups: nothing allows",
			rbacResource(u, "create", "", "pods", "", "", ""), authorizer.DecisionNoOpinion, "", ""},
		{"fewer groups: the user's own binding comes next",
			rbacResource(rbacWho("u", "g2"), "get", "", "pods", "", "", ""), authorizer.DecisionAllow, reason("b2", "get", `User "u"`), ""},
		{"fewer groups: the second subject of a binding is reported when the first does not match",
			rbacResource(rbacWho("v", "g2"), "delete", "", "pods", "", "", ""), authorizer.DecisionAllow, reason("b4", "get-watch-delete", `Group "g2"`), ""},
	})
}

// TestRBACManyGroups exercises users with bindings through more groups than
// the evaluator merges on the stack, against a plain scan of the bindings.
func TestRBACManyGroups(t *testing.T) {
	const n = 60
	var objs policy.RBACObjects
	for v := range 7 {
		objs.ClusterRoles = append(objs.ClusterRoles, rbacClusterRole(fmt.Sprintf("v%d", v), rbacRule(fmt.Sprintf("v%d", v)).Groups("").Resources("pods")))
	}
	// Binding i names groups g(i), g(i*7 mod n) and, every fifth, the user.
	for i := range n {
		subjects := []rbacv1.Subject{rbacGroup(fmt.Sprintf("g%d", (i*7)%n)), rbacGroup(fmt.Sprintf("g%d", i))}
		if i%5 == 4 {
			subjects = append([]rbacv1.Subject{rbacUser("u")}, subjects...)
		}
		objs.ClusterRoleBindings = append(objs.ClusterRoleBindings, rbacCRB(fmt.Sprintf("b%d", i), fmt.Sprintf("v%d", (i*3)%7), subjects...))
	}
	a := rbacAuthorizer(t, objs)
	for _, groupCount := range []int{0, 1, 2, 15, 16, 17, 40, n} {
		var groups []string
		for g := range groupCount {
			groups = append(groups, fmt.Sprintf("g%d", (g*11)%n))
		}
		u := rbacWho("u", groups...)
		for v := range 8 {
			verb := fmt.Sprintf("v%d", v)
			t.Run(fmt.Sprintf("%d groups, verb %s", groupCount, verb), func(t *testing.T) {
				// Reference: the first binding in order with a role allowing
				// the verb and a subject naming the user or one of its groups.
				wantDecision, wantReason := authorizer.DecisionNoOpinion, ""
			scan:
				for _, b := range objs.ClusterRoleBindings {
					if b.RoleRef.Name != verb {
						continue
					}
					for _, s := range b.Subjects {
						if (s.Kind == rbacv1.UserKind && s.Name == "u") || (s.Kind == rbacv1.GroupKind && containsString(groups, s.Name)) {
							wantDecision = authorizer.DecisionAllow
							wantReason = fmt.Sprintf(`RBAC: allowed by ClusterRoleBinding %q of ClusterRole %q to %s %q`, b.Name, verb, s.Kind, s.Name)
							break scan
						}
					}
				}
				d, reason, err := a.Authorize(t.Context(), rbacResource(u, verb, "", "pods", "", "", ""))
				if d != wantDecision || reason != wantReason || err != nil {
					t.Errorf("Authorize = %s, %q, %v; want %s, %q, nil", decisionName(d), reason, err, decisionName(wantDecision), wantReason)
				}
			})
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestRBACFromFiles decides over a snapshot built by policy.Load, with the
// aggregation file mode performs.
func TestRBACFromFiles(t *testing.T) {
	snap, err := policy.Load([]policy.SourceFile{{Name: "rbac.yaml", Data: []byte(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: monitoring
aggregationRule:
  clusterRoleSelectors:
  - matchLabels: {rbac.example.com/aggregate-to-monitoring: "true"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: metrics
  labels: {rbac.example.com/aggregate-to-monitoring: "true"}
rules:
- {verbs: [get], nonResourceURLs: [/metrics]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: prometheus
roleRef: {kind: ClusterRole, name: monitoring}
subjects:
- {kind: ServiceAccount, name: prometheus, namespace: monitoring}
`)}})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	a := deputyauthz.NewRBAC(func() *policy.Snapshot { return snap })
	prometheus := rbacWho("system:serviceaccount:monitoring:prometheus")
	rbacRun(t, a, []rbacCase{
		{"an aggregated ClusterRole allows what the roles it selects allow", rbacPath(prometheus, "get", "/metrics"), authorizer.DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "prometheus" of ClusterRole "monitoring" to ServiceAccount "prometheus/monitoring"`, ""},
		{"an aggregated ClusterRole allows nothing more", rbacPath(prometheus, "get", "/metrics/cadvisor"), authorizer.DecisionNoOpinion, "", ""},
	})
}

func TestRBACWithoutSnapshot(t *testing.T) {
	a := deputyauthz.NewRBAC(func() *policy.Snapshot { return nil })
	attrs := rbacResource(rbacWho("alice"), "get", "", "pods", "", "", "")

	t.Run("no snapshot loaded: no opinion and ErrNotLoaded", func(t *testing.T) {
		d, reason, err := a.Authorize(t.Context(), attrs)
		if d != authorizer.DecisionNoOpinion || reason != "" || !errors.Is(err, policy.ErrNotLoaded) {
			t.Errorf("Authorize = %s, %q, %v; want NoOpinion, \"\", ErrNotLoaded", decisionName(d), reason, err)
		}
	})
	t.Run("the conditions-aware form gives the same answer", func(t *testing.T) {
		cd := a.ConditionsAwareAuthorize(t.Context(), attrs)
		if !cd.IsNoOpinion() || !errors.Is(cd.Error(), policy.ErrNotLoaded) {
			t.Errorf("ConditionsAwareAuthorize = %+v, want NoOpinion with ErrNotLoaded", cd)
		}
	})
	t.Run("conditions are never evaluated", func(t *testing.T) {
		d, _, err := a.EvaluateConditions(t.Context(), authorizer.ConditionsAwareDecision{}, nil)
		if d != authorizer.DecisionDeny || !errors.Is(err, authorizer.ErrorConditionEvaluationNotSupported) {
			t.Errorf("EvaluateConditions = %s, %v; want Deny, ErrorConditionEvaluationNotSupported", decisionName(d), err)
		}
	})
	t.Run("Explain without a snapshot reports ErrNotLoaded", func(t *testing.T) {
		ex := deputyauthz.Explain(nil, attrs)
		if ex.Binding != nil || ex.Reason() != "" || len(ex.Errors) != 1 || !errors.Is(ex.Errors[0], policy.ErrNotLoaded) {
			t.Errorf("Explain(nil) = %+v", ex)
		}
	})
	t.Run("a snapshot without RBAC objects has no opinion and no error", func(t *testing.T) {
		snap := &policy.Snapshot{}
		a := deputyauthz.NewRBAC(func() *policy.Snapshot { return snap })
		d, reason, err := a.Authorize(t.Context(), attrs)
		if d != authorizer.DecisionNoOpinion || reason != "" || err != nil {
			t.Errorf("Authorize = %s, %q, %v; want NoOpinion, \"\", nil", decisionName(d), reason, err)
		}
	})
}

func TestExplain(t *testing.T) {
	r, err := policy.NewRBAC(policy.RBACObjects{
		ClusterRoles: []*rbacv1.ClusterRole{rbacClusterRole("r",
			rbacRule("list").Groups("").Resources("pods"),
			rbacRule("get").Groups("").Resources("pods"),
			rbacRule("get", "list").Groups("").Resources("pods"))},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			rbacCRB("missing", "nope", rbacGroup("devs")),
			rbacCRB("b", "r", rbacUser("x"), rbacGroup("devs")),
		},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	snap := &policy.Snapshot{RBAC: r}
	t.Run("the deciding binding, subject and first allowing rule are named", func(t *testing.T) {
		ex := deputyauthz.Explain(snap, rbacResource(rbacWho("alice", "devs"), "get", "", "pods", "", "", ""))
		if ex.Binding == nil || ex.Binding.Name != "b" || ex.Subject != 1 || ex.Rule != &ex.Binding.Rules[1] {
			t.Fatalf("Explain = %+v", ex)
		}
		if want := `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to Group "devs"`; ex.Reason() != want {
			t.Errorf("Reason() = %q, want %q", ex.Reason(), want)
		}
		if got, want := deputyauthz.DescribeRule(ex.Rule), `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`; got != want {
			t.Errorf("DescribeRule = %q, want %q", got, want)
		}
		if len(ex.Errors) != 1 || ex.Errors[0].Error() != `clusterrole.rbac.authorization.k8s.io "nope" not found` {
			t.Errorf("Errors = %v, want the missing role met on the way", ex.Errors)
		}
	})
	t.Run("nothing allows: no binding, the errors met", func(t *testing.T) {
		ex := deputyauthz.Explain(snap, rbacResource(rbacWho("alice", "devs"), "delete", "", "pods", "", "", ""))
		if ex.Binding != nil || ex.Rule != nil || ex.Reason() != "" || len(ex.Errors) != 1 {
			t.Errorf("Explain = %+v", ex)
		}
	})
}

// rbacFake answers every request the same.
type rbacFake struct {
	d      authorizer.Decision
	reason string
	err    error
}

func (f rbacFake) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return f.d, f.reason, f.err
}

func (f rbacFake) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(f.Authorize(ctx, a))
}

func (f rbacFake) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

func TestNewDefaultDecision(t *testing.T) {
	rbac := rbacAuthorizer(t, policy.RBACObjects{
		ClusterRoles: []*rbacv1.ClusterRole{rbacClusterRole("view", rbacRule("get").Groups("").Resources("pods"))},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			rbacCRB("b", "view", rbacUser("alice")),
			rbacCRB("broken", "x", rbacUser("bob")),
		},
	})
	notLoaded := deputyauthz.NewRBAC(func() *policy.Snapshot { return nil })
	named := func(a authorizer.Authorizer) union.NamedAuthorizer {
		return union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: a}
	}
	const noRule = "deputy: no policy rule allows this request"
	tests := []struct {
		name   string
		dflt   deputyauthz.DefaultDecision
		authz  authorizer.Authorizer
		attrs  authorizer.Attributes
		want   authorizer.Decision
		reason string
		err    string
	}{
		{
			name: "NoOpinion by default: an allow stays an allow", dflt: "", authz: rbac,
			attrs: rbacResource(rbacWho("alice"), "get", "", "pods", "", "", ""),
			want:  authorizer.DecisionAllow, reason: `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "view" to User "alice"`,
		},
		{
			name: "NoOpinion by default: no opinion stays no opinion", dflt: deputyauthz.DefaultNoOpinion, authz: rbac,
			attrs: rbacResource(rbacWho("carol"), "get", "", "pods", "", "", ""),
			want:  authorizer.DecisionNoOpinion,
		},
		{
			name: "NoOpinion by default: the union prefixes reasons and aggregates errors", dflt: deputyauthz.DefaultNoOpinion, authz: rbac,
			attrs: rbacResource(rbacWho("bob"), "get", "", "pods", "", "", ""),
			want:  authorizer.DecisionNoOpinion, reason: `rbac: RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`, err: `clusterrole.rbac.authorization.k8s.io "x" not found`,
		},
		{
			name: "Deny by default: an allow stays an allow", dflt: deputyauthz.DefaultDeny, authz: rbac,
			attrs: rbacResource(rbacWho("alice"), "get", "", "pods", "", "", ""),
			want:  authorizer.DecisionAllow, reason: `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "view" to User "alice"`,
		},
		{
			name: "Deny by default: no opinion becomes a deny", dflt: deputyauthz.DefaultDeny, authz: rbac,
			attrs: rbacResource(rbacWho("carol"), "get", "", "pods", "", "", ""),
			want:  authorizer.DecisionDeny, reason: noRule + `; no binding applies to User "carol" (no groups) cluster-wide`,
		},
		{
			name: "Deny by default: a denial names the closest binding", dflt: deputyauthz.DefaultDeny, authz: rbac,
			attrs: rbacResource(rbacWho("alice"), "delete", "", "pods", "", "", ""),
			want:  authorizer.DecisionDeny, reason: noRule + `; closest: ClusterRoleBinding "b" of ClusterRole "view" to User "alice" has {APIGroups:[""], Resources:["pods"], Verbs:["get"]}, which lacks verb "delete"`,
		},
		{
			name: "Deny by default: no opinion with an error becomes a deny keeping reason and error", dflt: deputyauthz.DefaultDeny, authz: rbac,
			attrs: rbacResource(rbacWho("bob"), "get", "", "pods", "", "", ""),
			want:  authorizer.DecisionDeny, reason: noRule + ` (rbac: RBAC: clusterrole.rbac.authorization.k8s.io "x" not found)`, err: `clusterrole.rbac.authorization.k8s.io "x" not found`,
		},
		{
			name: "Deny by default: no policy loaded is a deny with ErrNotLoaded", dflt: deputyauthz.DefaultDeny, authz: notLoaded,
			attrs: rbacResource(rbacWho("alice"), "get", "", "pods", "", "", ""),
			want:  authorizer.DecisionDeny, reason: noRule, err: policy.ErrNotLoaded.Error(),
		},
		{
			name: "NoOpinion by default: no policy loaded is no opinion with ErrNotLoaded", dflt: deputyauthz.DefaultNoOpinion, authz: notLoaded,
			attrs: rbacResource(rbacWho("alice"), "get", "", "pods", "", "", ""),
			want:  authorizer.DecisionNoOpinion, err: policy.ErrNotLoaded.Error(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := deputyauthz.New(deputyauthz.Options{Default: tc.dflt}, named(tc.authz))
			if err != nil {
				t.Fatal(err)
			}
			d, reason, err := a.Authorize(t.Context(), tc.attrs)
			if d != tc.want || reason != tc.reason || errString(err) != tc.err {
				t.Errorf("Authorize = %s, %q, %q\n          want %s, %q, %q", decisionName(d), reason, errString(err), decisionName(tc.want), tc.reason, tc.err)
			}
			if tc.err == policy.ErrNotLoaded.Error() && !errors.Is(err, policy.ErrNotLoaded) {
				t.Errorf("errors.Is(%v, ErrNotLoaded) = false", err)
			}
		})
	}

	t.Run("Deny by default never turns anything into an allow", func(t *testing.T) {
		boom := errors.New("boom")
		for _, d := range []authorizer.Decision{authorizer.DecisionDeny, authorizer.DecisionAllow, authorizer.DecisionNoOpinion} {
			for _, err := range []error{nil, boom} {
				for _, dflt := range []deputyauthz.DefaultDecision{deputyauthz.DefaultNoOpinion, deputyauthz.DefaultDeny} {
					a, nerr := deputyauthz.New(deputyauthz.Options{Default: dflt}, named(rbacFake{d, "r", err}))
					if nerr != nil {
						t.Fatal(nerr)
					}
					got, _, gotErr := a.Authorize(t.Context(), rbacPath(rbacWho("x"), "get", "/"))
					want := d
					if d == authorizer.DecisionNoOpinion && dflt == deputyauthz.DefaultDeny {
						want = authorizer.DecisionDeny
					}
					if got != want || !errors.Is(gotErr, err) || (err == nil && gotErr != nil) {
						t.Errorf("default %s over (%s, %v) = (%s, %v); want (%s, %v)", dflt, decisionName(d), err, decisionName(got), gotErr, decisionName(want), err)
					}
					cd := a.ConditionsAwareAuthorize(t.Context(), rbacPath(rbacWho("x"), "get", "/"))
					if cd.IsAllow() != (d == authorizer.DecisionAllow) {
						t.Errorf("default %s over (%s, %v): ConditionsAwareAuthorize allow = %v", dflt, decisionName(d), err, cd.IsAllow())
					}
				}
			}
		}
	})

	t.Run("the first authorizer with an opinion wins", func(t *testing.T) {
		a, err := deputyauthz.New(deputyauthz.Options{Default: deputyauthz.DefaultDeny},
			union.NamedAuthorizer{AuthorizerName: "first", Authorizer: rbacFake{authorizer.DecisionNoOpinion, "no idea", nil}},
			union.NamedAuthorizer{AuthorizerName: "second", Authorizer: rbacFake{authorizer.DecisionDeny, "denied here", nil}},
			union.NamedAuthorizer{AuthorizerName: "third", Authorizer: rbacFake{authorizer.DecisionAllow, "too late", nil}},
		)
		if err != nil {
			t.Fatal(err)
		}
		d, reason, err := a.Authorize(t.Context(), rbacPath(rbacWho("x"), "get", "/"))
		if d != authorizer.DecisionDeny || reason != "denied here" || err != nil {
			t.Errorf("Authorize = %s, %q, %v; want Deny, \"denied here\", nil", decisionName(d), reason, err)
		}
	})

	t.Run("authorizer names must be set and unique", func(t *testing.T) {
		if _, err := deputyauthz.New(deputyauthz.Options{}, union.NamedAuthorizer{Authorizer: rbac}); err == nil {
			t.Errorf("New accepted an empty name")
		}
		if _, err := deputyauthz.New(deputyauthz.Options{}, named(rbac), named(rbac)); err == nil || !strings.Contains(err.Error(), `duplicate AuthorizerName "rbac"`) {
			t.Errorf("New with a duplicate name = %v", err)
		}
	})
}

func TestParseDefaultDecision(t *testing.T) {
	tests := []struct {
		in      string
		want    deputyauthz.DefaultDecision
		wantErr string
	}{
		{"", deputyauthz.DefaultNoOpinion, ""},
		{"NoOpinion", deputyauthz.DefaultNoOpinion, ""},
		{"Deny", deputyauthz.DefaultDeny, ""},
		{"deny", "", `unsupported default decision "deny": use NoOpinion or Deny`},
		{"Allow", "", `unsupported default decision "Allow": use NoOpinion or Deny`},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q parses to %q", tc.in, tc.want), func(t *testing.T) {
			got, err := deputyauthz.ParseDefaultDecision(tc.in)
			if got != tc.want || errString(err) != tc.wantErr {
				t.Errorf("ParseDefaultDecision(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
