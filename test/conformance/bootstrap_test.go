package conformance

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"

	deputyauthz "deputy.dev/deputy/authorizer"
)

// deputy's BootstrapGrants (and so examples/bootstrap.yaml, which the
// authorizer's tests compare with them) are kube-apiserver's own bootstrap
// ClusterRoles and ClusterRoleBindings of the same names: rules, subjects,
// role references, labels and annotations.
func TestBootstrapGrantsAreKubeAPIServers(t *testing.T) {
	roles := map[string]rbacv1.ClusterRole{}
	for _, r := range bootstrappolicy.ClusterRoles() {
		roles[r.Name] = r
	}
	bindings := map[string]rbacv1.ClusterRoleBinding{}
	for _, b := range bootstrappolicy.ClusterRoleBindings() {
		bindings[b.Name] = b
	}
	for _, g := range deputyauthz.BootstrapGrants() {
		t.Run(g.ClusterRole.Name, func(t *testing.T) {
			want, ok := roles[g.ClusterRole.Name]
			if !ok {
				t.Fatalf("kube-apiserver has no bootstrap ClusterRole %q", g.ClusterRole.Name)
			}
			got := g.ClusterRole
			got.TypeMeta = want.TypeMeta
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ClusterRole (-kube-apiserver +deputy):\n%s", diff)
			}
			wantB, ok := bindings[g.ClusterRoleBinding.Name]
			if !ok {
				t.Fatalf("kube-apiserver has no bootstrap ClusterRoleBinding %q", g.ClusterRoleBinding.Name)
			}
			gotB := g.ClusterRoleBinding
			gotB.TypeMeta = wantB.TypeMeta
			if diff := cmp.Diff(wantB, gotB); diff != "" {
				t.Errorf("ClusterRoleBinding (-kube-apiserver +deputy):\n%s", diff)
			}
		})
	}
}
