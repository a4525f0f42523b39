package authorizer

import (
	"context"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/policy"
)

const whoCanRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pod-reader}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: impersonator}
rules:
- {apiGroups: [""], resources: [serviceaccounts], verbs: [impersonate]}
- {apiGroups: [authentication.k8s.io], resources: [serviceaccounts], verbs: ["impersonate:serviceaccount"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: readers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: alice}
- {kind: ServiceAccount, name: ci, namespace: build}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: team-readers, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}
subjects:
- {kind: Group, apiGroup: rbac.authorization.k8s.io, name: dev}
- {kind: ServiceAccount, name: deployer}
- {kind: Group, apiGroup: rbac.authorization.k8s.io, name: "system:serviceaccounts:team-a"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: other-readers, namespace: team-b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-reader}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: bob}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: broken, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: missing}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: carol}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: sa-users, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: impersonator}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: mallory}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: kube-impersonators, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: impersonator}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: mallory}
---
`

func subjectsOf(ans WhoCanAnswer) []string {
	var out []string
	for _, g := range ans.Grants {
		s := g.Subject.Kind + "/" + g.Subject.Name
		if g.Subject.Kind == rbacv1.ServiceAccountKind {
			s = g.Subject.Kind + "/" + g.Subject.Namespace + "/" + g.Subject.Name
		}
		out = append(out, s)
	}
	return out
}

func pods(verb, ns string) *authorizer.AttributesRecord {
	return &authorizer.AttributesRecord{Verb: verb, Namespace: ns, Resource: "pods", APIVersion: "v1", ResourceRequest: true}
}

func TestWhoCanVisitsWhatAuthorizeVisits(t *testing.T) {
	snap := loadSnapshot(t, whoCanRBAC)
	for _, tc := range []struct {
		name     string
		attrs    *authorizer.AttributesRecord
		want     []string
		warnings int
	}{
		{"a namespaced request reaches ClusterRoleBindings and that namespace's RoleBindings, ServiceAccounts defaulted to the binding's namespace",
			pods("list", "team-a"), []string{"User/alice", "ServiceAccount/build/ci", "Group/dev", "ServiceAccount/team-a/deployer", "Group/system:serviceaccounts:team-a"}, 1},
		{"another namespace's RoleBindings do not apply", pods("list", "team-b"), []string{"User/alice", "ServiceAccount/build/ci", "User/bob"}, 0},
		{"a request without a namespace reaches only ClusterRoleBindings", pods("list", ""), []string{"User/alice", "ServiceAccount/build/ci"}, 0},
		{"a verb no rule has: nobody", pods("delete", "team-a"), nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ans := WhoCan(context.Background(), snap, tc.attrs, WhoCanOptions{})
			if got := subjectsOf(ans); !slices.Equal(got, tc.want) {
				t.Errorf("subjects %q, want %q", got, tc.want)
			}
			if len(ans.Warnings) != tc.warnings {
				t.Errorf("warnings %v, want %d", ans.Warnings, tc.warnings)
			}
			for _, g := range ans.Grants {
				// Every grant is a decision Authorize makes.
				a := *tc.attrs
				a.User = SubjectUser(g.Subject)
				if d, _, _ := NewRBAC(func() *policy.Snapshot { return snap }).Authorize(context.Background(), &a); d != authorizer.DecisionAllow {
					t.Errorf("%s is named but Authorize says %s", g.Subject.Name, decisionName(d))
				}
				if g.Rule == nil || !ruleAllows(&a, g.Rule) {
					t.Errorf("%s: rule %v does not allow the request", g.Subject.Name, g.Rule)
				}
			}
		})
	}
}

func TestWhoCanExpandsGroupsTheAuthenticatorAssignsByName(t *testing.T) {
	snap := loadSnapshot(t, whoCanRBAC)
	ans := WhoCan(context.Background(), snap, pods("get", "team-a"), WhoCanOptions{})
	byGroup := map[string]GroupExpansion{}
	for _, g := range ans.Groups {
		byGroup[g.Group] = g
	}
	if g := byGroup["dev"]; g.Known || len(g.Members) > 0 || !strings.Contains(g.Description, "authenticator") {
		t.Errorf("group dev: %+v, want not expanded, membership from the authenticator", g)
	}
	g := byGroup["system:serviceaccounts:team-a"]
	if want := []string{"system:serviceaccount:team-a:deployer"}; !g.Known || !slices.Equal(g.Members, want) {
		t.Errorf("group system:serviceaccounts:team-a: %+v, want members %q", g, want)
	}
}

func TestWhoCanImpersonationGoesThroughTheGate(t *testing.T) {
	snap := loadSnapshot(t, whoCanRBAC+project("guestbook", `  destinations: [{server: "`+thisServer+`", namespace: guestbook}]
  destinationServiceAccounts: [{server: "`+thisServer+`", namespace: guestbook, defaultServiceAccount: deployer}]
`))
	gate := newTestGate(t, snap, func(o *GateOptions) { o.Strict = false })
	opts := WhoCanOptions{Gate: gate}

	t.Run("the sync identity is named with the AppProject entry", func(t *testing.T) {
		ans := WhoCan(context.Background(), snap, constrainedSA("", "guestbook", "deployer"), opts)
		if len(ans.Grants) != 1 {
			t.Fatalf("grants %q, want the sync identity only", subjectsOf(ans))
		}
		g := ans.Grants[0]
		if g.UserName != syncSA || g.Via != ViaGate || !strings.Contains(g.Reason, "AppProject argoproj.io argocd/guestbook destinationServiceAccounts[0]") {
			t.Errorf("grant %+v, want %s through the gate naming the AppProject entry", g, syncSA)
		}
	})
	t.Run("an RBAC grant of impersonation of a protected target is refused, not named", func(t *testing.T) {
		ans := WhoCan(context.Background(), snap, constrainedSA("", "kube-system", "deployer"), opts)
		if len(ans.Grants) != 0 {
			t.Errorf("grants %q, want none: kube-system is protected", subjectsOf(ans))
		}
		if !slices.ContainsFunc(ans.Refused, func(r Refusal) bool {
			return r.Subject.Name == "mallory" && strings.Contains(r.Reason, "protected")
		}) {
			t.Errorf("refused %+v, want mallory refused as a protected target", ans.Refused)
		}
	})
	t.Run("an RBAC grant of an unprotected target is named (strict off)", func(t *testing.T) {
		ans := WhoCan(context.Background(), snap, constrainedSA("", "team-a", "web"), opts)
		if got := subjectsOf(ans); !slices.Equal(got, []string{"User/mallory"}) {
			t.Errorf("grants %q, want mallory", got)
		}
	})
	t.Run("strict mode refuses RBAC grants without resourceNames", func(t *testing.T) {
		strict := WhoCanOptions{Gate: newTestGate(t, snap, nil)}
		ans := WhoCan(context.Background(), snap, constrainedSA("", "team-a", "web"), strict)
		if len(ans.Grants) != 0 || len(ans.Refused) == 0 {
			t.Errorf("grants %q refused %+v, want mallory refused", subjectsOf(ans), ans.Refused)
		}
	})
}

func TestRulesForListsTheRulesAuthorizeUses(t *testing.T) {
	snap := loadSnapshot(t, whoCanRBAC)
	u := &user.DefaultInfo{Name: "carol", Groups: []string{"dev", user.AllAuthenticated}}
	rules, errs := RulesFor(snap, u, "team-a")
	var got []string
	for _, r := range rules {
		got = append(got, r.Reason())
	}
	want := []string{`RBAC: allowed by RoleBinding "team-readers/team-a" of ClusterRole "pod-reader" to Group "dev"`}
	if !slices.Equal(got, want) {
		t.Errorf("rules from %q, want %q", got, want)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `RoleBinding "broken/team-a" grants nothing: role.rbac.authorization.k8s.io "missing" not found`) {
		t.Errorf("errors %v, want the missing Role of carol's binding", errs)
	}
	if rules, _ := RulesFor(snap, u, ""); len(rules) != 0 {
		t.Errorf("without a namespace: %d rules, want none (only ClusterRoleBindings apply)", len(rules))
	}
}

func TestRightsOfDescribesTheImpersonatorsProjects(t *testing.T) {
	snap := loadSnapshot(t, project("guestbook", `  destinations: [{server: "`+thisServer+`", namespace: "team-*"}]
  destinationServiceAccounts: [{server: "`+thisServer+`", namespace: "team-*", defaultServiceAccount: deployer}]
`))
	gate := newTestGate(t, snap, nil)
	r := gate.RightsOf(&user.DefaultInfo{Name: syncSA})
	if len(r.Projects) != 1 || len(r.Projects[0].ServiceAccounts) != 1 ||
		!strings.Contains(r.Projects[0].ServiceAccounts[0], `deployer in every destination namespace matching "team-*"`) {
		t.Errorf("rights %+v, want the project's wild-namespace entry described", r)
	}
	if other := gate.RightsOf(&user.DefaultInfo{Name: "alice"}); len(other.Projects) != 0 || !strings.Contains(other.Summary, "strict") {
		t.Errorf("alice: %+v, want strict mode described", other)
	}
}
