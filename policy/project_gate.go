package policy

import (
	"fmt"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
)

// This file holds the project checks the impersonation gate and the sync
// engine share: destination and kind permissions (Argo CD AppProject
// isDestinationMatched / IsGroupKindPermitted, pkg/apis/application/v1alpha1
// app_project_types.go and types.go) and the inverse of ServiceAccount
// derivation (which ServiceAccounts can a project make a sync impersonate).

// compiledDestination is one spec.destinations entry with its globs compiled.
// A leading "!" negates the pattern (Argo CD globMatch with allowNegation).
type compiledDestination struct {
	server, name, namespace destPattern
}

type destPattern struct {
	set     bool // the field was not empty
	deny    bool // "!" prefix
	pattern saPattern
	err     error
}

func compileDestPattern(raw string) destPattern {
	p := destPattern{set: raw != ""}
	src := raw
	if strings.HasPrefix(raw, "!") {
		p.deny, src = true, raw[1:]
	}
	p.pattern, p.err = saCompilePattern(src)
	return p
}

// match is Argo CD's globMatch(pattern, val, allowNegation=true): a negated
// pattern matches what the rest does not match; "*" matches everything; an
// empty pattern matches only the empty string. A pattern that does not
// compile matches nothing, and a negated one that does not compile matches
// nothing either (fail closed; upstream's glob.Match logs and returns false,
// which a "!" would turn into true).
func (p *destPattern) match(val string) bool {
	if p.err != nil {
		return false
	}
	ok, err := p.pattern.match(val)
	if err != nil {
		return false
	}
	if p.deny {
		return !ok
	}
	return ok
}

func compileDestinations(p *v1alpha1.AppProject) []compiledDestination {
	out := make([]compiledDestination, len(p.Spec.Destinations))
	for i, d := range p.Spec.Destinations {
		out[i] = compiledDestination{server: compileDestPattern(d.Server), name: compileDestPattern(d.Name), namespace: compileDestPattern(d.Namespace)}
	}
	return out
}

// DestinationPermitted reports whether the project permits a destination
// (cluster server URL and/or registered name, and namespace), exactly as Argo
// CD's AppProject.isDestinationMatched: some entry matches (server or name,
// and namespace), and no entry whose non-matching field is a "!" pattern
// vetoes it. PermitOnlyProjectScopedClusters is not modelled.
func (c *CompiledProject) DestinationPermitted(server, name, namespace string) bool {
	any, veto := false, false
	for i := range c.dests {
		d := &c.dests[i]
		nameMatched := name != "" && d.name.match(name)
		serverMatched := server != "" && d.server.match(server)
		nsMatched := d.namespace.match(namespace)
		if (serverMatched || nameMatched) && nsMatched {
			any = true
		} else if (!nameMatched && d.name.deny) || (!serverMatched && d.server.deny) || (!nsMatched && d.namespace.deny) {
			veto = true
		}
	}
	return any && !veto
}

// ResourcePermission is what ResourcePermitted decided, with the list entry
// that decided it, for reasons users can act on.
type ResourcePermission struct {
	// Permitted reports whether the project permits the object(s).
	Permitted bool
	// Entry names the deciding entry, e.g.
	// `clusterResourceBlacklist[0] {group: "", kind: "Namespace", name: "kube-*"}`,
	// or what is missing, e.g. `no clusterResourceWhitelist entry matches`.
	Entry string
}

// ResourcePermitted is Argo CD's AppProject.IsGroupKindNamePermitted
// (argo-cd pkg/apis/application/v1alpha1 app_project_types.go, with
// isResourceInList and isNamedResourceInList of types.go): a namespaced kind
// is permitted unless a non-nil namespaceResourceWhitelist omits it or the
// namespaceResourceBlacklist names it; a cluster-scoped object only when a
// clusterResourceWhitelist entry matches it and no clusterResourceBlacklist
// entry does. Group, kind and name are filepath.Match patterns; a cluster
// list entry without a name matches every object of its kind.
//
// name "" asks about every object of the kind at once (a list, a watch, a
// create whose request carries no name): deputy then counts a whitelist
// entry only when it has no name (it cannot grant every object), and a
// blacklist entry whatever its name (some object of the kind is refused).
// Upstream always asks with one object's name, so this only narrows.
func ResourcePermitted(p *v1alpha1.AppProject, group, kind, name string, namespaced bool) ResourcePermission {
	if namespaced {
		wl, bl := p.Spec.NamespaceResourceWhitelist, p.Spec.NamespaceResourceBlacklist
		if i := groupKindIndex(group, kind, bl); i >= 0 {
			return ResourcePermission{Entry: describeGroupKindEntry("namespaceResourceBlacklist", i, bl[i].Group, bl[i].Kind, "")}
		}
		if wl == nil {
			return ResourcePermission{Permitted: true, Entry: "no namespaceResourceWhitelist (every namespaced kind)"}
		}
		if i := groupKindIndex(group, kind, wl); i >= 0 {
			return ResourcePermission{Permitted: true, Entry: describeGroupKindEntry("namespaceResourceWhitelist", i, wl[i].Group, wl[i].Kind, "")}
		}
		return ResourcePermission{Entry: "no namespaceResourceWhitelist entry matches"}
	}
	wl, bl := p.Spec.ClusterResourceWhitelist, p.Spec.ClusterResourceBlacklist
	for i, e := range bl {
		if restrictionMatches(e, group, kind, name, true) {
			return ResourcePermission{Entry: describeGroupKindEntry("clusterResourceBlacklist", i, e.Group, e.Kind, e.Name)}
		}
	}
	for i, e := range wl {
		if restrictionMatches(e, group, kind, name, false) {
			return ResourcePermission{Permitted: true, Entry: describeGroupKindEntry("clusterResourceWhitelist", i, e.Group, e.Kind, e.Name)}
		}
	}
	if name == "" {
		for _, e := range wl {
			if e.Name != "" && restrictionMatches(v1alpha1.ClusterResourceRestrictionItem{Group: e.Group, Kind: e.Kind}, group, kind, "", false) {
				return ResourcePermission{Entry: "clusterResourceWhitelist entries for this kind name objects; a request for every object of it (list, watch, create without a name) needs an entry without a name"}
			}
		}
	}
	return ResourcePermission{Entry: "no clusterResourceWhitelist entry matches"}
}

// restrictionMatches is isNamedResourceInList for one entry; name "" is a
// request for every object (see ResourcePermitted): an entry with a name
// matches it only when it is a blacklist entry.
func restrictionMatches(e v1alpha1.ClusterResourceRestrictionItem, group, kind, name string, blacklist bool) bool {
	if !pathMatch(e.Kind, kind) || !pathMatch(e.Group, group) {
		return false
	}
	switch {
	case e.Name == "":
		return true
	case name == "":
		return blacklist
	}
	return pathMatch(e.Name, name)
}

// groupKindIndex is Argo CD's isResourceInList (filepath.Match on kind, then
// group), returning the index of the first matching entry or -1.
func groupKindIndex(group, kind string, list []metav1.GroupKind) int {
	for i, item := range list {
		if pathMatch(item.Kind, kind) && pathMatch(item.Group, group) {
			return i
		}
	}
	return -1
}

// pathMatch is filepath.Match, where a malformed pattern matches nothing (as
// upstream, which ignores the error).
func pathMatch(pattern, s string) bool {
	ok, err := filepath.Match(pattern, s)
	return ok && err == nil
}

func describeGroupKindEntry(list string, i int, group, kind, name string) string {
	if name != "" {
		return fmt.Sprintf("%s[%d] {group: %q, kind: %q, name: %q}", list, i, group, kind, name)
	}
	return fmt.Sprintf("%s[%d] {group: %q, kind: %q}", list, i, group, kind)
}

// ServiceAccountTarget is what one destinationServiceAccounts entry can
// derive, for indexing: Namespace is the ServiceAccount's namespace when the
// entry fixes it ("namespace:name", or a bare name under a literal destination
// namespace) and "" when it depends on the destination (a wildcard or empty
// namespace pattern).
type ServiceAccountTarget struct {
	Namespace, Name string
}

// ServiceAccountTargets lists what each valid entry can derive.
func (c *CompiledProject) ServiceAccountTargets() []ServiceAccountTarget {
	var out []ServiceAccountTarget
	for i := range c.entries {
		e := &c.entries[i]
		if e.saErr != nil || e.saName == "" || e.serverErr != nil || e.namespaceErr != nil {
			continue
		}
		switch {
		case e.saNamespace != "":
			out = append(out, ServiceAccountTarget{Namespace: e.saNamespace, Name: e.saName})
		case e.namespace.literal && e.namespace.source != "":
			out = append(out, ServiceAccountTarget{Namespace: e.namespace.source, Name: e.saName})
		default:
			out = append(out, ServiceAccountTarget{Name: e.saName})
		}
	}
	return out
}

// DerivesServiceAccount reports whether some Application of this project
// deploying to cluster server would impersonate exactly the ServiceAccount
// saNamespace/saName, honouring first-match order, and returns the deciding
// entry's index. Three ways lead there (Argo CD DeriveServiceAccountToImpersonate
// run backwards):
//   - destination namespace saNamespace, where the first matching entry names
//     the bare saName or "saNamespace:saName";
//   - an empty destination namespace in an Application living in saNamespace,
//     when isAppNamespace(saNamespace) (the SA namespace falls back to the
//     Application's namespace);
//   - an entry naming "saNamespace:saName" reached for some other destination
//     namespace: with a literal namespace pattern that destination is tried
//     exactly; with a wildcard pattern the entry counts unless an earlier
//     entry provably covers every destination it matches.
//
// Errors of entries on the way make that way fail (closed).
func (c *CompiledProject) DerivesServiceAccount(server, saNamespace, saName string, isAppNamespace func(string) bool) (int, bool) {
	if ns, name, i, err := c.DeriveRef(server, saNamespace, saNamespace); err == nil && i >= 0 && ns == saNamespace && name == saName {
		return i, true
	}
	if isAppNamespace != nil && isAppNamespace(saNamespace) {
		if ns, name, i, err := c.DeriveRef(server, "", saNamespace); err == nil && i >= 0 && ns == saNamespace && name == saName {
			return i, true
		}
	}
	for i := range c.entries {
		e := &c.entries[i]
		if e.saErr != nil || e.saNamespace != saNamespace || e.saName != saName || e.serverErr != nil || e.namespaceErr != nil {
			continue
		}
		if ok, err := e.server.match(server); err != nil || !ok {
			continue
		}
		if e.namespace.literal {
			// The destination that reaches this entry is exactly its namespace.
			if _, _, j, err := c.DeriveRef(server, e.namespace.source, saNamespace); err == nil && j == i {
				return i, true
			}
			continue
		}
		shadowed := false
		for j := 0; j < i && !shadowed; j++ {
			prev := &c.entries[j]
			if prev.serverErr != nil || prev.namespaceErr != nil {
				continue
			}
			if ok, err := prev.server.match(server); err != nil || !ok {
				continue
			}
			shadowed = saPatternCovers(&prev.namespace, e.namespace.source)
		}
		if !shadowed {
			return i, true
		}
	}
	return -1, false
}

// ClosestEntry names the entry that comes closest to deriving
// saNamespace/saName for server, for deny reasons: one naming saName (and
// preferably saNamespace), else one whose namespace pattern matches
// saNamespace, else "".
func (c *CompiledProject) ClosestEntry(server, saNamespace, saName string) string {
	best, bestScore := -1, 0
	for i := range c.entries {
		e := &c.entries[i]
		score := 0
		if e.saErr == nil && e.saName == saName {
			score += 4
			if e.saNamespace == saNamespace {
				score += 2
			}
		}
		if ok, err := e.namespace.match(saNamespace); err == nil && ok && e.namespaceErr == nil {
			score++
		}
		if ok, err := e.server.match(server); err == nil && ok && e.serverErr == nil {
			score++
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		return ""
	}
	e := &c.entries[best]
	target := e.saName
	if e.saNamespace != "" {
		target = e.saNamespace + ":" + e.saName
	}
	return fmt.Sprintf("destinationServiceAccounts[%d] (server %q, namespace %q, defaultServiceAccount %q)", best, e.server.source, e.namespace.source, target)
}

// DestinationNamespaceIndex describes the project's destination namespaces
// for indexing: the literal namespaces of plain (not negated) entries, and
// whether any entry has a wildcard or negated namespace (such a project must
// be checked for every namespace).
func (c *CompiledProject) DestinationNamespaceIndex() (literals []string, patterns bool) {
	for i := range c.dests {
		ns := &c.dests[i].namespace
		if ns.err != nil {
			continue
		}
		if !ns.deny && ns.pattern.literal {
			literals = append(literals, ns.pattern.source)
			continue
		}
		patterns = true
	}
	return literals, patterns
}
