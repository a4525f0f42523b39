package authorizer

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"
)

// BenchmarkNew is the cost New's composition adds around its members: a
// gate that has no opinion, then an RBAC stand-in that allows (the allow
// path) or has no opinion (the default-deny path), as kube-apiserver's
// ordinary requests take it.
func BenchmarkNew(b *testing.B) {
	noOpinion := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "", nil
	})
	allow := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	a := &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "alice"}, Verb: "get", Resource: "pods", Namespace: "team-a", ResourceRequest: true}
	for _, bc := range []struct {
		name string
		rbac authorizer.Authorizer
		want authorizer.Decision
	}{{"allow", allow, authorizer.DecisionAllow}, {"default-deny", noOpinion, authorizer.DecisionDeny}} {
		authz, err := New(Options{Default: DefaultDeny},
			union.NamedAuthorizer{AuthorizerName: "impersonation-gate", Authorizer: noOpinion},
			union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: bc.rbac})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name+"/Authorize", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, _, _ := authz.Authorize(b.Context(), a); d != bc.want {
					b.Fatalf("decision %v, want %v", d, bc.want)
				}
			}
		})
		b.Run(bc.name+"/Decide", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := authz.Decide(b.Context(), a); r.Decision != bc.want {
					b.Fatalf("decision %v, want %v", r.Decision, bc.want)
				}
			}
		})
	}
}
