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

// GroupKindPermitted is Argo CD's AppProject.IsGroupKindPermitted: a
// namespaced kind is permitted unless a non-nil namespaceResourceWhitelist
// omits it or the blacklist names it; a cluster-scoped kind only when the
// clusterResourceWhitelist names it and the blacklist does not. List entries
// are path.Match patterns on group and kind.
func GroupKindPermitted(p *v1alpha1.AppProject, group, kind string, namespaced bool) bool {
	res := metav1.GroupKind{Group: group, Kind: kind}
	if namespaced {
		wl, bl := p.Spec.NamespaceResourceWhitelist, p.Spec.NamespaceResourceBlacklist
		white := wl == nil || len(wl) != 0 && groupKindInList(res, wl)
		black := len(bl) != 0 && groupKindInList(res, bl)
		return white && !black
	}
	wl, bl := p.Spec.ClusterResourceWhitelist, p.Spec.ClusterResourceBlacklist
	return len(wl) != 0 && groupKindInList(res, wl) && !(len(bl) != 0 && groupKindInList(res, bl))
}

// groupKindInList is Argo CD's isResourceInList (filepath.Match on kind, then group).
func groupKindInList(res metav1.GroupKind, list []metav1.GroupKind) bool {
	for _, item := range list {
		if ok, err := filepath.Match(item.Kind, res.Kind); ok && err == nil {
			if ok, err := filepath.Match(item.Group, res.Group); ok && err == nil {
				return true
			}
		}
	}
	return false
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
