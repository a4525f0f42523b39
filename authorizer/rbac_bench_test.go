package authorizer_test

import (
	"context"
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
)

// benchRoleCount is the number of distinct "team" ClusterRoles the benchmark
// bindings refer to; each has benchRulesPerRole rules shaped like the
// bootstrap view/edit roles (several resources per rule).
const (
	benchRoleCount    = 10
	benchRulesPerRole = 8
)

// benchObjects returns n ClusterRoleBindings, each to a distinct user
// ("user-<i>", even i) or group ("group-<i>", odd i), preceded — as in the
// bootstrap policy — by three bindings to system:authenticated whose roles
// never allow the benchmark's resource requests, so every request also
// evaluates those.
func benchObjects(n int) policy.RBACObjects {
	var objs policy.RBACObjects
	objs.ClusterRoles = append(objs.ClusterRoles,
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:discovery"}, Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"get"}, NonResourceURLs: []string{"/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/"}},
		}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:basic-user"}, Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}},
			{Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}},
		}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:public-info-viewer"}, Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/livez", "/readyz", "/version", "/version/"}},
		}},
	)
	for r := range benchRoleCount {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("team-%d", r)}}
		for i := range benchRulesPerRole {
			role.Rules = append(role.Rules, rbacv1.PolicyRule{
				Verbs:     []string{"get", "list", "watch"},
				APIGroups: []string{fmt.Sprintf("group%d.example.com", i)},
				Resources: []string{"widgets", "widgets/status", "gadgets", "gizmos"},
			})
		}
		// The last rule is the one the allowed requests need.
		role.Rules = append(role.Rules, rbacv1.PolicyRule{
			Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""},
			Resources: []string{"configmaps", "endpoints", "pods", "pods/log", "services"},
		})
		objs.ClusterRoles = append(objs.ClusterRoles, role)
	}
	for _, name := range []string{"system:discovery", "system:basic-user", "system:public-info-viewer"} {
		objs.ClusterRoleBindings = append(objs.ClusterRoleBindings, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: user.AllAuthenticated}},
		})
	}
	for i := range n {
		subj := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("user-%d", i)}
		if i%2 == 1 {
			subj = rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("group-%d", i)}
		}
		objs.ClusterRoleBindings = append(objs.ClusterRoleBindings, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("binding-%d", i)},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: fmt.Sprintf("team-%d", i%benchRoleCount)},
			Subjects:   []rbacv1.Subject{subj},
		})
	}
	return objs
}

func BenchmarkRBACAuthorize(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		rbac, err := policy.NewRBAC(benchObjects(n), false)
		if err != nil {
			b.Fatal(err)
		}
		snap := &policy.Snapshot{RBAC: rbac}
		authz := deputyauthz.NewRBAC(func() *policy.Snapshot { return snap })

		// A user bound in the middle of the list, and a user bound through
		// 5 groups spread over the list (its only allowing binding is the
		// last one).
		mid := n / 2 &^ 1
		single := &user.DefaultInfo{Name: fmt.Sprintf("user-%d", mid), Groups: []string{user.AllAuthenticated}}
		var groups []string
		for k := range 5 {
			groups = append(groups, fmt.Sprintf("group-%d", (n/5*k)|1))
		}
		groups = append(groups, user.AllAuthenticated)
		grouped := &user.DefaultInfo{Name: "nobody", Groups: groups}

		pods := func(u user.Info, verb string) authorizer.AttributesRecord {
			return authorizer.AttributesRecord{User: u, Verb: verb, Namespace: "default", Resource: "pods", Name: "web-0", APIVersion: "v1", ResourceRequest: true}
		}
		cases := []struct {
			name  string
			attrs authorizer.AttributesRecord
			want  authorizer.Decision
		}{
			{"allowed", pods(single, "get"), authorizer.DecisionAllow},
			{"denied", pods(single, "delete"), authorizer.DecisionNoOpinion},
			{"5 groups allowed", pods(grouped, "list"), authorizer.DecisionAllow},
			{"5 groups denied", pods(grouped, "delete"), authorizer.DecisionNoOpinion},
			{"unbound user denied", pods(&user.DefaultInfo{Name: "stranger", Groups: []string{user.AllAuthenticated}}, "get"), authorizer.DecisionNoOpinion},
			{"non-resource allowed", authorizer.AttributesRecord{User: single, Verb: "get", Path: "/version"}, authorizer.DecisionAllow},
		}
		for _, tc := range cases {
			b.Run(fmt.Sprintf("bindings=%d/%s", n, tc.name), func(b *testing.B) {
				ctx := context.Background()
				// Box once: converting the record to the interface allocates,
				// and that cost belongs to the caller, not to Authorize.
				var attrs authorizer.Attributes = tc.attrs
				if d, reason, err := authz.Authorize(ctx, attrs); d != tc.want || err != nil {
					b.Fatalf("Authorize = %v, %q, %v; want %v", d, reason, err, tc.want)
				}
				b.ReportAllocs()
				for b.Loop() {
					authz.Authorize(ctx, attrs)
				}
			})
		}
		// The same requests through New with authorization.defaultDecision
		// Deny, as deputy serve composes it: an allow must cost what it
		// costs above; a denial also explains itself.
		deny, err := deputyauthz.New(deputyauthz.Options{Default: deputyauthz.DefaultDeny},
			union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: authz})
		if err != nil {
			b.Fatal(err)
		}
		for _, tc := range cases {
			want := tc.want
			if want == authorizer.DecisionNoOpinion {
				want = authorizer.DecisionDeny
			}
			b.Run(fmt.Sprintf("bindings=%d/default Deny/%s", n, tc.name), func(b *testing.B) {
				ctx := context.Background()
				var attrs authorizer.Attributes = tc.attrs
				if d, reason, err := deny.Authorize(ctx, attrs); d != want || err != nil {
					b.Fatalf("Authorize = %v, %q, %v; want %v", d, reason, err, want)
				}
				b.ReportAllocs()
				for b.Loop() {
					deny.Authorize(ctx, attrs)
				}
			})
		}
	}
}

func BenchmarkNewRBAC(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		objs := benchObjects(n)
		b.Run(fmt.Sprintf("bindings=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := policy.NewRBAC(objs, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
