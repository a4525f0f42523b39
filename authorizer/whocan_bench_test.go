package authorizer_test

import (
	"context"
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
)

// BenchmarkWhoCan measures `deputy who-can` after the policy is loaded, on
// benchObjects' policies (n ClusterRoleBindings, each to its own user or
// group, all roles allowing pods, and three bootstrap bindings to
// system:authenticated): every binding allows "get pods" (n grants, each
// verified through the composed decision); nobody may "delete pods" (every
// binding's rules are read); "get /version" is allowed by a bootstrap
// binding to system:authenticated, which is expanded to the n/2 users the
// policy names, each verified.
func BenchmarkWhoCan(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		rbac, err := policy.NewRBAC(benchObjects(n), false)
		if err != nil {
			b.Fatal(err)
		}
		snap := &policy.Snapshot{RBAC: rbac}
		cases := []struct {
			name   string
			attrs  authorizer.AttributesRecord
			grants int
		}{
			{"get pods: every binding", authorizer.AttributesRecord{Verb: "get", Namespace: "default", Resource: "pods", APIVersion: "v1", ResourceRequest: true}, n},
			{"delete pods: nobody", authorizer.AttributesRecord{Verb: "delete", Namespace: "default", Resource: "pods", APIVersion: "v1", ResourceRequest: true}, 0},
			{"get /version: system:authenticated expanded", authorizer.AttributesRecord{Verb: "get", Path: "/version"}, 2},
		}
		for _, tc := range cases {
			b.Run(fmt.Sprintf("bindings=%d/%s", n, tc.name), func(b *testing.B) {
				ctx := context.Background()
				var attrs authorizer.Attributes = tc.attrs
				if ans := deputyauthz.WhoCan(ctx, snap, attrs, deputyauthz.WhoCanOptions{}); len(ans.Grants) != tc.grants {
					b.Fatalf("%d grants, want %d", len(ans.Grants), tc.grants)
				}
				b.ReportAllocs()
				for b.Loop() {
					deputyauthz.WhoCan(ctx, snap, attrs, deputyauthz.WhoCanOptions{})
				}
			})
		}
	}
}

// BenchmarkWhoCanImpersonation is the worst case of an impersonation check:
// benchObjects' n ClusterRoleBindings all refer to a ClusterRole granting
// constrained impersonation of every ServiceAccount, and the gate (not
// strict, kube-system protected) may have an opinion on each subject, so
// every one of the n grants is decided in full (gate, then RBAC).
func BenchmarkWhoCanImpersonation(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		objs := benchObjects(n)
		objs.ClusterRoles = append(objs.ClusterRoles, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sa-impersonator"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate:serviceaccount"}},
		}})
		for _, crb := range objs.ClusterRoleBindings {
			crb.RoleRef.Name = "sa-impersonator"
		}
		rbac, err := policy.NewRBAC(objs, false)
		if err != nil {
			b.Fatal(err)
		}
		snap := &policy.Snapshot{RBAC: rbac}
		gate := deputyauthz.NewGate(deputyauthz.GateOptions{ProtectedServiceAccountNamespaces: []string{"kube-system"}},
			func() *policy.Snapshot { return snap }, nil)
		opts := deputyauthz.WhoCanOptions{Gate: gate}
		for _, tc := range []struct {
			ns     string
			grants int
		}{{"team-a", n + 3}, {"kube-system", 0}} {
			b.Run(fmt.Sprintf("bindings=%d/namespace=%s", n, tc.ns), func(b *testing.B) {
				ctx := context.Background()
				var attrs authorizer.Attributes = authorizer.AttributesRecord{Verb: "impersonate:serviceaccount", APIGroup: "authentication.k8s.io",
					Resource: "serviceaccounts", Namespace: tc.ns, Name: "deployer", APIVersion: "v1", ResourceRequest: true}
				if ans := deputyauthz.WhoCan(ctx, snap, attrs, opts); len(ans.Grants) != tc.grants {
					b.Fatalf("%d grants, want %d", len(ans.Grants), tc.grants)
				}
				b.ReportAllocs()
				for b.Loop() {
					deputyauthz.WhoCan(ctx, snap, attrs, opts)
				}
			})
		}
	}
}
