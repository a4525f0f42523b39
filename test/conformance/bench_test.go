package conformance

import (
	"context"
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
)

// Shape of the side-by-side policy: benchTeams ClusterRoles of
// benchRulesPerTeam rules each (several resources per rule, like the
// bootstrap view and edit roles); the last rule is the one the allowed
// request needs.
const (
	benchTeams        = 10
	benchRulesPerTeam = 8
)

// sideBySidePolicy is kube-apiserver's bootstrap policy plus n
// ClusterRoleBindings, each to a distinct user ("user-<i>", even i) or group
// ("group-<i>", odd i) and one of the team ClusterRoles.
func sideBySidePolicy(n int) *Policy {
	p := &Policy{}
	p.merge(bootstrapPolicy())
	for t := range benchTeams {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("team-%d", t)}}
		for i := range benchRulesPerTeam {
			cr.Rules = append(cr.Rules, rbacv1.PolicyRule{
				Verbs: []string{"get", "list", "watch"}, APIGroups: []string{fmt.Sprintf("group%d.example.com", i)},
				Resources: []string{"widgets", "widgets/status", "gadgets", "gizmos"},
			})
		}
		cr.Rules = append(cr.Rules, rbacv1.PolicyRule{
			Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""},
			Resources: []string{"configmaps", "endpoints", "pods", "pods/log", "services"},
		})
		p.ClusterRoles = append(p.ClusterRoles, cr)
	}
	for i := range n {
		subject := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("user-%d", i)}
		if i%2 == 1 {
			subject = rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("group-%d", i)}
		}
		p.ClusterRoleBindings = append(p.ClusterRoleBindings, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("binding-%d", i)},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: fmt.Sprintf("team-%d", i%benchTeams)},
			Subjects:   []rbacv1.Subject{subject},
		})
	}
	return p
}

// BenchmarkSideBySide measures upstream's RBACAuthorizer, built as
// kube-apiserver builds it (client-go listers over informer indexers), and
// deputy's evaluator on identical policies: the bootstrap policy plus 100 to
// 100,000 ClusterRoleBindings. The user is bound in the middle of the list
// and is in system:authenticated (so the bootstrap bindings of that group
// apply too); "allowed" gets a pod, "denied" deletes one (nothing allows it:
// every binding that applies is evaluated). Each sub-benchmark first checks
// that both give the same answer.
func BenchmarkSideBySide(b *testing.B) {
	for _, n := range []int{100, 1_000, 10_000, 100_000} {
		p := sideBySidePolicy(n)
		rbac, err := policy.NewRBAC(p.DeputyObjects(), false)
		if err != nil {
			b.Fatal(err)
		}
		snap := &policy.Snapshot{RBAC: rbac}
		authorizers := []struct {
			name string
			a    authorizer.Authorizer
		}{
			{"upstream", NewUpstreamIndexed(p)},
			{"deputy", deputyauthz.NewRBAC(func() *policy.Snapshot { return snap })},
		}
		u := &user.DefaultInfo{Name: fmt.Sprintf("user-%d", n/2&^1), Groups: []string{user.AllAuthenticated}}
		requests := []struct {
			name  string
			attrs authorizer.AttributesRecord
			want  authorizer.Decision
		}{
			{"allowed", authorizer.AttributesRecord{User: u, Verb: "get", Namespace: "default", Resource: "pods", Name: "web-0", APIVersion: "v1", ResourceRequest: true}, authorizer.DecisionAllow},
			{"denied", authorizer.AttributesRecord{User: u, Verb: "delete", Namespace: "default", Resource: "pods", Name: "web-0", APIVersion: "v1", ResourceRequest: true}, authorizer.DecisionNoOpinion},
		}
		for _, az := range authorizers {
			for _, req := range requests {
				b.Run(fmt.Sprintf("crbs=%d/%s/%s", n, az.name, req.name), func(b *testing.B) {
					ctx := context.Background()
					var attrs authorizer.Attributes = req.attrs
					if d, reason, _ := az.a.Authorize(ctx, attrs); d != req.want {
						b.Fatalf("%s: %s %q, want %s", az.name, decisionName(d), reason, decisionName(req.want))
					}
					b.ReportAllocs()
					for b.Loop() {
						az.a.Authorize(ctx, attrs)
					}
				})
			}
		}
	}
}
