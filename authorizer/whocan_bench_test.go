package authorizer_test

import (
	"context"
	"fmt"
	"testing"

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
