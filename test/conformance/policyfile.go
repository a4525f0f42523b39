package conformance

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// YAML renders p as a multi-document YAML stream of
// rbac.authorization.k8s.io/v1 objects, as deputy's --policy files hold them.
func (p *Policy) YAML() ([]byte, error) {
	var b bytes.Buffer
	gv := rbacv1.SchemeGroupVersion
	write := func(kind string, obj interface{ GetObjectKind() schema.ObjectKind }) error {
		obj.GetObjectKind().SetGroupVersionKind(gv.WithKind(kind))
		data, err := yaml.Marshal(obj)
		if err != nil {
			return fmt.Errorf("failed to marshal %s: %w", kind, err)
		}
		b.WriteString("---\n")
		b.Write(data)
		return nil
	}
	for _, o := range p.ClusterRoles {
		o = o.DeepCopy()
		if err := write("ClusterRole", o); err != nil {
			return nil, err
		}
	}
	for _, o := range p.Roles {
		o = o.DeepCopy()
		if err := write("Role", o); err != nil {
			return nil, err
		}
	}
	for _, o := range p.ClusterRoleBindings {
		o = o.DeepCopy()
		if err := write("ClusterRoleBinding", o); err != nil {
			return nil, err
		}
	}
	for _, o := range p.RoleBindings {
		o = o.DeepCopy()
		if err := write("RoleBinding", o); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// WriteFile writes p as YAML to dir/name.
func (p *Policy) WriteFile(dir, name string) error {
	data, err := p.YAML()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), data, 0o600)
}

// dumpPolicy is p's YAML for failure messages.
func dumpPolicy(p *Policy) string {
	data, err := p.YAML()
	if err != nil {
		return err.Error()
	}
	return string(data)
}
