package permissions

import (
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// The preflight's report: every missing permission, and the RBAC objects
// (Roles, a ClusterRole and their bindings) that grant everything the
// operation needs (package syncer's preflight.go says what is asked).

// Permission is one permission a sync needs (or lacks): Verb on
// Group/Resource in Namespace ("" for cluster-scoped).
type Permission struct {
	Verb, Group, Resource, Namespace string
	// Names restricts the grant to these objects (resourceNames); empty
	// means every name.
	Names []string
	// Objects describes what needs it.
	Objects []string
}

type grantKey struct{ verb, group, resource, namespace string }

// Grants collects permissions, one per (verb, group, resource, namespace):
// for every name (a namespaced one, or a request without a name) or for the
// names added. The zero value is ready to use.
type Grants struct {
	order []grantKey
	names map[grantKey]map[string]bool
	all   map[grantKey]bool
}

// Add grants verb on group/resource in namespace ("" for cluster-scoped),
// for name ("" or a namespace: every name).
func (g *Grants) Add(verb, group, resource, namespace, name string) {
	if g.names == nil {
		g.names, g.all = map[grantKey]map[string]bool{}, map[grantKey]bool{}
	}
	k := grantKey{verb, group, resource, namespace}
	if _, ok := g.names[k]; !ok {
		g.names[k] = map[string]bool{}
		g.order = append(g.order, k)
	}
	if namespace != "" || name == "" {
		g.all[k] = true
		return
	}
	g.names[k][name] = true
}

// List returns the grants in the order they were first added, names
// sorted.
func (g *Grants) List() []Permission {
	out := make([]Permission, 0, len(g.order))
	for _, k := range g.order {
		m := Permission{Verb: k.verb, Group: k.group, Resource: k.resource, Namespace: k.namespace}
		if !g.all[k] {
			for n := range g.names[k] {
				m.Names = append(m.Names, n)
			}
			sort.Strings(m.Names)
		}
		out = append(out, m)
	}
	return out
}

// ResourceString is RESOURCE.GROUP as kubectl writes it (RESOURCE for the
// core group).
func ResourceString(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// verbRank orders verbs in reports as kubectl does.
var verbRank = map[string]int{"get": 0, "list": 1, "watch": 2, "create": 3, "update": 4, "patch": 5, "delete": 6}

// Sort orders permissions by namespace, group, resource and verb (kubectl
// auth can-i's verb order).
func Sort(m []Permission) {
	sort.SliceStable(m, func(i, j int) bool {
		a, b := m[i], m[j]
		switch {
		case a.Namespace != b.Namespace:
			return a.Namespace < b.Namespace
		case a.Group != b.Group:
			return a.Group < b.Group
		case a.Resource != b.Resource:
			return a.Resource < b.Resource
		}
		return verbRank[a.Verb] < verbRank[b.Verb]
	})
}

// maxObjectsShown bounds the objects named per missing permission.
const maxObjectsShown = 3

// Report is a failed preflight's message: every missing permission, the
// problems, and the Roles and ClusterRole (with their bindings) that grant
// everything the operation needs (needed; the missing permissions when it is
// empty): namespaced permissions in a Role per namespace, cluster-scoped ones
// in a ClusterRole. The objects' names are fixed per Application, so applying
// a later suggestion replaces an earlier one, and since each holds all the
// operation needs, one application converges.
func Report(who, appNS, appName string, missing []Permission, problems []string, needed []Permission) string {
	var b strings.Builder
	n := len(missing)
	switch {
	case n == 1:
		fmt.Fprintf(&b, "preflight failed: %s lacks 1 permission this sync needs; nothing was changed\n", who)
	case n > 1:
		fmt.Fprintf(&b, "preflight failed: %s lacks %d permissions this sync needs; nothing was changed\n", who, n)
	default:
		fmt.Fprintf(&b, "preflight failed for %s; nothing was changed\n", who)
	}
	for _, m := range missing {
		fmt.Fprintf(&b, "  - %s\n", describeMissing(m))
	}
	for _, p := range problems {
		fmt.Fprintf(&b, "  - %s\n", p)
	}
	if n == 0 {
		return strings.TrimRight(b.String(), "\n")
	}
	if len(needed) == 0 {
		needed = missing
	}
	b.WriteString("These RBAC objects grant everything this sync needs, not only what is missing, and replace an earlier version of themselves (kubectl apply -f -):\n")
	b.WriteString(rbacFor(who, appNS, appName, needed))
	return strings.TrimRight(b.String(), "\n")
}

func describeMissing(m Permission) string {
	s := m.Verb + " " + ResourceString(m.Group, m.Resource)
	if len(m.Names) > 0 {
		s += " named " + strings.Join(m.Names, ", ")
	}
	if m.Namespace != "" {
		s += " in namespace " + m.Namespace
	} else {
		s += " (cluster-scoped)"
	}
	if len(m.Objects) > 0 {
		shown := m.Objects
		more := ""
		if len(shown) > maxObjectsShown {
			more = fmt.Sprintf(" and %d more", len(shown)-maxObjectsShown)
			shown = shown[:maxObjectsShown]
		}
		s += ", for " + strings.Join(shown, ", ") + more
	}
	return s
}

// rbacFor renders the Roles, ClusterRole and bindings granting perms as YAML
// documents.
func rbacFor(who, appNS, appName string, perms []Permission) string {
	subject := map[string]any{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": who}
	if rest, ok := strings.CutPrefix(who, "system:serviceaccount:"); ok {
		if ns, name, ok := strings.Cut(rest, ":"); ok {
			subject = map[string]any{"kind": "ServiceAccount", "namespace": ns, "name": name}
		}
	}
	byNS := map[string][]Permission{}
	var namespaces []string
	for _, m := range perms {
		if _, ok := byNS[m.Namespace]; !ok {
			namespaces = append(namespaces, m.Namespace)
		}
		byNS[m.Namespace] = append(byNS[m.Namespace], m)
	}
	sort.Strings(namespaces) // "" (cluster-scoped) first
	var docs []string
	for _, ns := range namespaces {
		name := "deputy-sync-" + appName
		roleKind, bindingKind := "Role", "RoleBinding"
		meta := map[string]any{"name": name, "namespace": ns}
		if ns == "" {
			name = "deputy-sync-" + appNS + "-" + appName
			roleKind, bindingKind = "ClusterRole", "ClusterRoleBinding"
			meta = map[string]any{"name": name}
		}
		docs = append(docs, mustYAML(map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": roleKind, "metadata": meta, "rules": rulesFor(byNS[ns]),
		}))
		docs = append(docs, mustYAML(map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": bindingKind, "metadata": meta,
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": roleKind, "name": name},
			"subjects": []any{subject},
		}))
	}
	return "---\n" + strings.Join(docs, "---\n")
}

// rulesFor merges permissions into few rules: one per (group,
// resourceNames, verbs), listing the resources that share them.
func rulesFor(perms []Permission) []any {
	type resKey struct{ group, resource, names string }
	verbs := map[resKey]map[string]bool{}
	var keys []resKey
	for _, m := range perms {
		k := resKey{m.Group, m.Resource, strings.Join(m.Names, "\x00")}
		if verbs[k] == nil {
			verbs[k] = map[string]bool{}
			keys = append(keys, k)
		}
		verbs[k][m.Verb] = true
	}
	type ruleKey struct{ group, names, verbs string }
	rules := map[ruleKey][]string{}
	var order []ruleKey
	for _, k := range keys {
		var vs []string
		for v := range verbs[k] {
			vs = append(vs, v)
		}
		sort.Slice(vs, func(i, j int) bool { return verbRank[vs[i]] < verbRank[vs[j]] })
		rk := ruleKey{k.group, k.names, strings.Join(vs, ",")}
		if _, ok := rules[rk]; !ok {
			order = append(order, rk)
		}
		rules[rk] = append(rules[rk], k.resource)
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.group != b.group {
			return a.group < b.group
		}
		if a.verbs != b.verbs {
			return a.verbs < b.verbs
		}
		return a.names < b.names
	})
	var out []any
	for _, rk := range order {
		res := rules[rk]
		sort.Strings(res)
		r := map[string]any{"apiGroups": []string{rk.group}, "resources": res, "verbs": strings.Split(rk.verbs, ",")}
		if rk.names != "" {
			r["resourceNames"] = strings.Split(rk.names, "\x00")
		}
		out = append(out, r)
	}
	return out
}

func mustYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil { // maps of strings and slices always marshal
		return fmt.Sprintf("# failed to render: %v\n", err)
	}
	return string(b)
}
