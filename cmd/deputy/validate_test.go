package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A policy served with defaultDecision Deny must keep kube-apiserver's
// bootstrap grants: validate names each missing one, what it denies and the
// fix; with NoOpinion (RBAC grants them) it says nothing.
func TestValidateWarnsWhenADenyPolicyLacksTheBootstrapGrants(t *testing.T) {
	examples := filepath.Join("..", "..", "examples")
	withoutBootstrap := t.TempDir()
	for _, f := range []string{"rbac.yaml", "projects.yaml"} {
		data, err := os.ReadFile(filepath.Join(examples, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(withoutBootstrap, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	denyConfig := filepath.Join(t.TempDir(), "deputy.yaml")
	if err := os.WriteFile(denyConfig, []byte("apiVersion: config.deputy.dev/v1alpha1\nkind: DeputyConfiguration\nauthorization: {defaultDecision: Deny}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const warning = "warning: authorization.defaultDecision is Deny and the policy lacks kube-apiserver's bootstrap grant "
	tests := []struct {
		name string
		args []string
		want []string // nil: no bootstrap warning
	}{
		{
			name: "Deny from the configuration file, the bootstrap grants missing",
			args: []string{"validate", "--config", denyConfig, "--policy", withoutBootstrap},
			want: []string{
				warning + "system:discovery (API discovery, which every kubectl command and client library starts with): deputy denies get /api, ",
				`get /version/ for group system:authenticated; add the ClusterRole and ClusterRoleBinding "system:discovery" of examples/bootstrap.yaml to the policy, or run with defaultDecision NoOpinion`,
				warning + "system:basic-user (self reviews: kubectl auth can-i and auth whoami, and the SelfSubjectAccessReviews of deputy's sync preflight): deputy denies create selfsubjectaccessreviews.authorization.k8s.io, ",
				warning + "system:public-info-viewer (",
				"get /version/ for group system:unauthenticated; add the ClusterRole and ClusterRoleBinding \"system:public-info-viewer\"",
			},
		},
		{
			name: "Deny from the flag",
			args: []string{"validate", "--default-decision", "Deny", "--policy", withoutBootstrap},
			want: []string{warning + "system:discovery", warning + "system:basic-user", warning + "system:public-info-viewer"},
		},
		{
			name: "Deny with examples/bootstrap.yaml in the policy",
			args: []string{"validate", "--default-decision", "Deny", "--policy", withoutBootstrap, "--policy", filepath.Join(examples, "bootstrap.yaml")},
		},
		{
			name: "Deny with the embedded example policy, which ships them",
			args: []string{"validate", "--config", denyConfig},
		},
		{
			name: "NoOpinion: kube-apiserver's RBAC grants them",
			args: []string{"validate", "--policy", withoutBootstrap},
		},
		{
			name: "the flag overrides the file",
			args: []string{"validate", "--config", denyConfig, "--default-decision", "NoOpinion", "--policy", withoutBootstrap},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d (warnings do not fail validate)\n%s%s", code, out, errOut)
			}
			if tc.want == nil && strings.Contains(out, "bootstrap grant") {
				t.Errorf("unexpected bootstrap warning:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	t.Run("a wrong --default-decision is refused before anything is loaded", func(t *testing.T) {
		code, out, errOut := runCLI(t, "validate", "--default-decision", "deny")
		if code == 0 || out != "" || !strings.Contains(errOut, `--default-decision: unsupported default decision "deny": use NoOpinion or Deny`) {
			t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	})
}
