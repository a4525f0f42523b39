package authorizer

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/policy"
)

// BenchmarkGate measures one gate decision with 1,000 AppProjects of 10
// destinationServiceAccounts entries (and 10 destinations) each, the issue's
// sizing. Targets sit in the middle and at the end of the project list.
func BenchmarkGate(b *testing.B) {
	var sb strings.Builder
	for p := range 1000 {
		fmt.Fprintf(&sb, "apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata: {name: p%d, namespace: argocd}\nspec:\n  destinations:\n", p)
		for e := range 10 {
			fmt.Fprintf(&sb, "  - {server: https://kubernetes.default.svc, namespace: team-%d-%d}\n", p, e)
		}
		sb.WriteString("  destinationServiceAccounts:\n")
		for e := range 10 {
			fmt.Fprintf(&sb, "  - {server: https://kubernetes.default.svc, namespace: team-%d-%d, defaultServiceAccount: deployer-%d}\n", p, e, e)
		}
		sb.WriteString("---\n")
	}
	snap, err := policy.Load([]policy.SourceFile{{Name: "projects.yaml", Data: []byte(sb.String())}})
	if err != nil {
		b.Fatal(err)
	}
	g := NewGate(GateOptions{
		Impersonators: []Impersonator{{UserName: syncSA, ClusterServer: thisServer, APIGroups: []string{"argoproj.io"}}},
		Strict:        true,
	}, func() *policy.Snapshot { return snap }, nil)
	g.currentIndex() // build outside the timed loop

	for _, bc := range []struct {
		name  string
		attrs *authorizer.AttributesRecord
		want  authorizer.Decision
	}{
		{"impersonate/allowed-middle", constrainedSA(syncSA, "team-500-5", "deployer-5"), authorizer.DecisionAllow},
		{"impersonate/allowed-last", constrainedSA(syncSA, "team-999-9", "deployer-9"), authorizer.DecisionAllow},
		{"impersonate/denied-wrong-namespace", constrainedSA(syncSA, "team-500-4", "deployer-5"), authorizer.DecisionDeny},
		{"impersonate/denied-unknown-name", constrainedSA(syncSA, "team-500-5", "nobody"), authorizer.DecisionDeny},
		{"impersonate-on/allowed", on(syncSA, "patch", "apps", "deployments", "team-999-9", "web"), authorizer.DecisionAllow},
		{"impersonate-on/denied", on(syncSA, "patch", "apps", "deployments", "elsewhere", "web"), authorizer.DecisionDeny},
		{"not-impersonation", &authorizer.AttributesRecord{User: constrainedSA("alice", "", "").User, Verb: "get", Resource: "pods", ResourceRequest: true}, authorizer.DecisionNoOpinion},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, reason, _ := g.Authorize(context.Background(), bc.attrs); d != bc.want {
					b.Fatalf("decision %s (%s)", decisionName(d), reason)
				}
			}
		})
	}
}
