package serve

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/config"
)

func TestGateOptions(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(im *config.Impersonation)
		want   authorizer.GateOptions
	}{
		{
			name:   "the defaults give deputy's own ServiceAccount, strict, constrained, masters exempt and protected",
			mutate: func(*config.Impersonation) {},
			want: authorizer.GateOptions{
				Impersonators: []authorizer.Impersonator{{UserName: "system:serviceaccount:deputy-system:deputy",
					ClusterServer: config.DefaultClusterServer, APIGroups: []string{"deputy.dev"}, Namespaces: []string{"deputy-system"}}},
				Strict: true, RequireConstrained: true,
				ExemptGroups: []string{"system:masters"},
				Subresources: []authorizer.SubresourceRule{{Resource: "*", Subresource: "status", Verbs: []string{"get"}},
					{Resource: "*", Subresource: "scale", Verbs: []string{"get"}}, {Resource: "pods", Subresource: "log", Verbs: []string{"get"}}},
				ProtectedGroups: []string{"system:masters"}, ProtectedUserPrefixes: []string{"system:kube-"},
				ProtectedServiceAccountNamespaces: []string{"kube-system"},
			},
		},
		{
			name: "project namespaces * become every namespace and exempt ServiceAccounts become users",
			mutate: func(im *config.Impersonation) {
				im.Impersonators = []config.Impersonator{{User: "argo", ClusterName: "in-cluster", ApplicationNamespaces: []string{"apps"},
					Projects: config.ProjectSource{APIGroups: []string{"argoproj.io"}, Namespaces: []string{"*"}}}}
				im.Strict, im.RequireConstrained = ptr.To(false), ptr.To(false)
				im.Exempt = []config.Subject{{User: "root"}, {ServiceAccount: "ops/admin"}}
				im.Subresources = []config.GateSubresource{}
				im.ProtectedTargets = &config.ProtectedTargets{}
			},
			want: authorizer.GateOptions{
				Impersonators: []authorizer.Impersonator{{UserName: "argo", ClusterServer: config.DefaultClusterServer, ClusterName: "in-cluster",
					APIGroups: []string{"argoproj.io"}, ApplicationNamespaces: []string{"apps"}}},
				ExemptUsers: []string{"root", "system:serviceaccount:ops:admin"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", "deputy-system")
			var im config.Impersonation
			tt.mutate(&im)
			got, err := GateOptions(im)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GateOptions() mismatch (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := GateOptions(config.Impersonation{Impersonators: []config.Impersonator{{ServiceAccount: "no-slash"}}}); err == nil {
		t.Error("an impersonator without a valid identity was accepted")
	}
}
