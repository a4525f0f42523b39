package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ResourceInfo is what authorization needs to know of an API resource that a
// request's attributes name only by group and plural resource: the Kind
// AppProject white- and blacklists name, and whether it is namespaced.
type ResourceInfo struct {
	Kind       string
	Namespaced bool
}

// ResourceCatalog maps API resources (group and plural name, no version and
// no subresource) to their kind and scope. The impersonation gate decides a
// request without a namespace by it: a cluster-scoped kind is checked against
// clusterResourceWhitelist, a namespaced kind requested across all namespaces
// needs every namespace to be a destination, and a resource the catalog does
// not know is refused (its scope cannot be told). It is immutable and safe for
// concurrent use; a nil catalog knows nothing.
type ResourceCatalog struct {
	m map[schema.GroupResource]ResourceInfo
}

// Lookup returns what the catalog knows of group/resource.
func (c *ResourceCatalog) Lookup(group, resource string) (ResourceInfo, bool) {
	if c == nil {
		return ResourceInfo{}, false
	}
	info, ok := c.m[schema.GroupResource{Group: group, Resource: resource}]
	return info, ok
}

// Len is the number of resources the catalog knows.
func (c *ResourceCatalog) Len() int {
	if c == nil {
		return 0
	}
	return len(c.m)
}

// Equal reports whether two catalogs know the same resources the same way.
func (c *ResourceCatalog) Equal(o *ResourceCatalog) bool {
	if c == nil || o == nil {
		return c.Len() == 0 && o.Len() == 0
	}
	return maps.Equal(c.m, o.m)
}

var builtinCatalog = &ResourceCatalog{m: builtinResourceTable()}

// BuiltinResources is the catalog of the resources kube-apiserver v1.37 serves
// without extensions (generated from its discovery; a test against the real
// kube-apiserver keeps the table true). File mode decides by it plus the
// CustomResourceDefinitions of the policy files; cluster mode by the
// cluster's discovery on top of it.
func BuiltinResources() *ResourceCatalog { return builtinCatalog }

// Merge returns a catalog holding c's entries and, over them, o's.
func (c *ResourceCatalog) Merge(o *ResourceCatalog) *ResourceCatalog {
	if o.Len() == 0 {
		return c
	}
	if c.Len() == 0 {
		return o
	}
	m := make(map[schema.GroupResource]ResourceInfo, len(c.m)+len(o.m))
	maps.Copy(m, c.m)
	maps.Copy(m, o.m)
	return &ResourceCatalog{m: m}
}

// CatalogFromDiscovery builds a catalog from discovery's resource lists
// (discovery.ServerGroupsAndResources): every resource of every served
// version; subresources ("pods/log") are skipped, since attributes carry them
// apart from the resource.
func CatalogFromDiscovery(lists []*metav1.APIResourceList) *ResourceCatalog {
	m := map[schema.GroupResource]ResourceInfo{}
	for _, l := range lists {
		if l == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if r.Name == "" || strings.Contains(r.Name, "/") {
				continue
			}
			group := gv.Group
			if r.Group != "" {
				group = r.Group
			}
			m[schema.GroupResource{Group: group, Resource: r.Name}] = ResourceInfo{Kind: r.Kind, Namespaced: r.Namespaced}
		}
	}
	return &ResourceCatalog{m: m}
}

// catalogFromCRDs builds a catalog from CustomResourceDefinitions.
func catalogFromCRDs(crds []*apiextensionsv1.CustomResourceDefinition) *ResourceCatalog {
	if len(crds) == 0 {
		return nil
	}
	m := make(map[schema.GroupResource]ResourceInfo, len(crds))
	for _, crd := range crds {
		m[schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}] = ResourceInfo{
			Kind: crd.Spec.Names.Kind, Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped}
	}
	return &ResourceCatalog{m: m}
}

// validateCRDForCatalog checks the fields of a CustomResourceDefinition in a
// policy file that the catalog reads.
func validateCRDForCatalog(crd *apiextensionsv1.CustomResourceDefinition) error {
	var missing []string
	if crd.Spec.Group == "" {
		missing = append(missing, "spec.group")
	}
	if crd.Spec.Names.Plural == "" {
		missing = append(missing, "spec.names.plural")
	}
	if crd.Spec.Names.Kind == "" {
		missing = append(missing, "spec.names.kind")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s required: the impersonation gate reads a CustomResourceDefinition's group, plural, kind and scope", strings.Join(missing, ", "))
	}
	switch crd.Spec.Scope {
	case apiextensionsv1.NamespaceScoped, apiextensionsv1.ClusterScoped:
	default:
		return fmt.Errorf("spec.scope %q: must be Namespaced or Cluster", crd.Spec.Scope)
	}
	if want := crd.Spec.Names.Plural + "." + crd.Spec.Group; crd.Name != want {
		return fmt.Errorf("metadata.name %q: must be %q (<plural>.<group>), as kube-apiserver requires", crd.Name, want)
	}
	return nil
}

// CatalogKeys lists the resources a catalog knows, in no particular order.
func CatalogKeys(c *ResourceCatalog) []schema.GroupResource {
	if c == nil {
		return nil
	}
	return slices.Collect(maps.Keys(c.m))
}
