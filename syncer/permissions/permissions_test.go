package permissions

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The YAML a failed preflight prints is valid RBAC that grants exactly the
// permissions given: decode it and compare.
func TestPreflightRBACDecodes(t *testing.T) {
	perms := []Permission{
		{Verb: "create", Resource: "services", Namespace: "guestbook"},
		{Verb: "patch", Resource: "services", Namespace: "guestbook"},
		{Verb: "patch", Resource: "configmaps", Namespace: "guestbook"},
		{Verb: "create", Group: "apps", Resource: "deployments", Namespace: "guestbook", Names: []string{"a", "b"}},
		{Verb: "create", Resource: "namespaces"},
	}
	out := rbacFor("system:serviceaccount:guestbook:deployer", "argocd", "guestbook", perms)
	docs := strings.Split(strings.TrimPrefix(out, "---\n"), "---\n")
	if len(docs) != 4 {
		t.Fatalf("%d documents, want ClusterRole, ClusterRoleBinding, Role, RoleBinding:\n%s", len(docs), out)
	}
	var cr rbacv1.ClusterRole
	var crb rbacv1.ClusterRoleBinding
	var role rbacv1.Role
	var rb rbacv1.RoleBinding
	for i, into := range []any{&cr, &crb, &role, &rb} {
		if err := yaml.UnmarshalStrict([]byte(docs[i]), into); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, docs[i])
		}
	}
	if diff := cmp.Diff([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"create"}}}, cr.Rules); diff != "" {
		t.Errorf("ClusterRole rules (-want +got):\n%s", diff)
	}
	wantRole := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"create"}, ResourceNames: []string{"a", "b"}},
	}
	if diff := cmp.Diff(wantRole, role.Rules); diff != "" {
		t.Errorf("Role rules (-want +got):\n%s", diff)
	}
	if role.Namespace != "guestbook" || rb.RoleRef.Name != role.Name || rb.RoleRef.Kind != "Role" || crb.RoleRef.Name != cr.Name {
		t.Errorf("bindings do not refer to their roles: %+v %+v", rb, crb)
	}
	if diff := cmp.Diff([]rbacv1.Subject{{Kind: "ServiceAccount", Name: "deployer", Namespace: "guestbook"}}, rb.Subjects); diff != "" {
		t.Errorf("subjects (-want +got):\n%s", diff)
	}
}
