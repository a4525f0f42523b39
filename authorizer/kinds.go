package authorizer

import (
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"deputy.dev/deputy/policy"
)

var (
	builtinKindsOnce sync.Once
	builtinKinds     map[schema.GroupResource]string
)

// kindFor maps a request's group and plural resource to a Kind for
// AppProject white/blacklists, which name kinds while authorization
// attributes name resources. Kubernetes' built-in types come from client-go's
// scheme; for anything else "" is returned and clusterKindPermitted compares
// the list entries' guessed plurals instead (meta.UnsafeGuessKindToResource,
// the rule kubectl and controller-gen use).
func kindFor(group, resource string) string {
	builtinKindsOnce.Do(func() {
		builtinKinds = map[schema.GroupResource]string{}
		for gvk := range scheme.Scheme.AllKnownTypes() {
			if strings.HasSuffix(gvk.Kind, "List") || strings.HasSuffix(gvk.Kind, "Options") || gvk.Kind == "WatchEvent" || gvk.Kind == "Status" {
				continue
			}
			plural, _ := meta.UnsafeGuessKindToResource(gvk)
			builtinKinds[plural.GroupResource()] = gvk.Kind
		}
	})
	return builtinKinds[schema.GroupResource{Group: group, Resource: resource}]
}

// clusterKindPermitted applies policy.GroupKindPermitted for a cluster-scoped
// request. With an unknown kind, each whitelist/blacklist entry with a
// literal kind is compared by its guessed plural, and a "*" kind matches.
func clusterKindPermitted(p *gateProject, group, resource, kind string) bool {
	obj := p.project.Object
	if kind != "" {
		return policy.GroupKindPermitted(obj, group, kind, false)
	}
	for _, wl := range obj.Spec.ClusterResourceWhitelist {
		k := guessKindMatch(wl.Group, wl.Kind, group, resource)
		if k != "" && policy.GroupKindPermitted(obj, group, k, false) {
			return true
		}
	}
	return false
}

// guessKindMatch returns a kind to check when a list entry may name the
// resource: the entry's literal kind if its plural is resource, or a
// placeholder matching "*".
func guessKindMatch(entryGroup, entryKind, group, resource string) string {
	if entryKind == "*" {
		return "*"
	}
	if strings.ContainsAny(entryKind, "*?[") {
		return ""
	}
	plural, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Group: group, Kind: entryKind})
	if plural.Resource == resource {
		return entryKind
	}
	return ""
}
