package authorizer

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/policy"
)

// The gate's decisions for impersonators (the ServiceAccounts their
// AppProjects derive, the actions those projects permit) and, with Strict,
// for everyone else (RBAC rules that name the target).

func (ix *impersonatorIndex) decideServiceAccount(ns, name string) (authorizer.Decision, string, error) {
	target := serviceaccount.MakeUsername(ns, name)
	if ns == "" || name == "" {
		return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: the ServiceAccount to impersonate needs a namespace and a name, got %q", target), nil
	}
	exact, wild := ix.byTarget[ns+"/"+name], ix.byWildName[name]
	for _, list := range [2][]int{exact, wild} {
		for _, pi := range list {
			p := &ix.projects[pi]
			if i, ok := p.compiled.DerivesServiceAccount(ix.cfg.ClusterServer, ns, name, p.isAppNamespace); ok {
				return authorizer.DecisionAllow, fmt.Sprintf("deputy impersonation gate: %s destinationServiceAccounts[%d] derives %s for %s", p.ref, i, target, ix.cfg.ClusterServer), nil
			}
		}
	}
	return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: no AppProject of %s derives %s for cluster %s%s", ix.cfg.UserName, target, ix.cfg.ClusterServer, ix.closest(ns, name, exact, wild)), nil
}

// maxClosestProjects bounds the search for the closest entry of a denial, so
// a denial costs no more than an allow when thousands of projects name the
// same ServiceAccount.
const maxClosestProjects = 8

// closest names the entry nearest to deriving ns/name, looking first at the
// projects that name the ServiceAccount.
func (ix *impersonatorIndex) closest(ns, name string, exact, wild []int) string {
	if len(ix.projects) == 0 {
		where := "in every namespace"
		if len(ix.cfg.Namespaces) > 0 {
			where = "in namespaces " + strings.Join(ix.cfg.Namespaces, ", ")
		}
		return fmt.Sprintf("; no AppProject grants this identity: it is granted by AppProjects of %s %s only, and none there has a destinationServiceAccounts entry (authorization.impersonation.impersonators[].projects)",
			strings.Join(ix.cfg.APIGroups, ", "), where)
	}
	candidates := append(append([]int(nil), exact...), wild...)
	if len(candidates) == 0 {
		for i := 0; i < len(ix.projects) && i < maxClosestProjects; i++ {
			candidates = append(candidates, i)
		}
	}
	for n, pi := range candidates {
		if n == maxClosestProjects {
			break
		}
		if c := ix.projects[pi].compiled.ClosestEntry(ix.cfg.ClusterServer, ns, name); c != "" {
			return "; closest: " + ix.projects[pi].ref + " " + c
		}
	}
	return ""
}

// selfReview reports whether a resource is one of the self-review APIs:
// SelfSubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview.
func selfReview(group, resource string) bool {
	switch group {
	case "authorization.k8s.io":
		return resource == "selfsubjectaccessreviews" || resource == "selfsubjectrulesreviews"
	case "authentication.k8s.io":
		return resource == "selfsubjectreviews"
	}
	return false
}

// discovery reports whether a non-resource path is API discovery: the group
// and resource lists, the version, and the OpenAPI schemas clients validate
// against (kubectl apply's --validate reads /openapi/v3).
func discovery(path string) bool {
	for _, p := range []string{"/api", "/apis", "/version", "/openapi"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// decideAction answers `impersonate-on:serviceaccount:<verb>`: what the
// impersonated ServiceAccount may do is capped to what the impersonator's
// projects permit (the union of its projects: kube-apiserver's check names
// the request, not which ServiceAccount is impersonated; the ServiceAccount's
// own RBAC narrows it further). Allowed are:
//   - discovery (/api, /apis, /version, /openapi and below);
//   - creating a self review (SelfSubjectAccessReview, SelfSubjectRulesReview,
//     SelfSubjectReview: the sync engine's preflight asks what the
//     ServiceAccount may do);
//   - a subresource only when the allow-list (GateOptions.Subresources)
//     names it for the verb, and then as its resource below;
//   - a namespaced resource in a namespace that is a destination of a project
//     whose namespaced white- and blacklists permit its kind; across all
//     namespaces (no namespace) only when one project's destinations are
//     every namespace;
//   - a cluster-scoped resource (the Namespace object included, for every
//     verb) that a project with a destination on this cluster permits by its
//     clusterResourceWhitelist/Blacklist, names honoured.
//
// The scope of a resource comes from the resource catalog (cluster mode: the
// cluster's discovery; file mode: built-in kinds and the policy's
// CustomResourceDefinitions). A request without a namespace for a resource
// the catalog does not know is denied: its scope cannot be told.
func (g *Gate) decideAction(idx *gateIndex, ix *impersonatorIndex, a authorizer.Attributes, verb string) (authorizer.Decision, string, error) {
	who := ix.cfg.UserName
	if !a.IsResourceRequest() {
		if discovery(a.GetPath()) {
			return authorizer.DecisionAllow, "deputy impersonation gate: discovery is allowed to sync identities", nil
		}
		return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: %s may reach only discovery (/api, /apis, /version, /openapi) as a ServiceAccount, not %s", who, a.GetPath()), nil
	}
	group, resource, sub := a.GetAPIGroup(), a.GetResource(), a.GetSubresource()
	if verb == "create" && sub == "" && selfReview(group, resource) {
		// A ServiceAccount asking about its own permissions (the sync
		// engine's preflight) learns nothing about anyone else.
		return authorizer.DecisionAllow, "deputy impersonation gate: self reviews are allowed to sync identities", nil
	}
	if sub != "" && !g.subresourceAllowed(resource, sub, verb) {
		return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: sync identities may not %s subresource %s/%s: it is not on the allow-list (authorization.impersonation.subresources)", verb, resource, sub), nil
	}
	ns, name := a.GetNamespace(), a.GetName()
	info, known := idx.lookupResource(group, resource)
	server, cluster := ix.cfg.ClusterServer, ix.cfg.ClusterName
	switch {
	case !known && ns == "":
		g.refreshResources()
		return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: cannot tell whether %s is namespaced (the cluster does not serve it, or it is not a built-in kind or a CustomResourceDefinition of the policy), so a request without a namespace is denied", describeKind(group, resource, "")), nil
	case known && !info.Namespaced:
		// A cluster-scoped object. kube-apiserver puts a Namespace object's
		// own name in the namespace of requests on it: that is this case too.
		return ix.decideClusterScoped(group, info.Kind, name, describeKind(group, resource, info.Kind))
	case ns == "":
		for i := range ix.projects {
			p := &ix.projects[i]
			if p.compiled.AllNamespacesPermitted(server, cluster) {
				if ok, _ := namespacedKindPermitted(p, group, info.Kind); ok {
					return authorizer.DecisionAllow, fmt.Sprintf("deputy impersonation gate: every namespace is a destination of %s, which permits %s", p.ref, describeKind(group, resource, info.Kind)), nil
				}
			}
		}
		return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: %s across all namespaces needs an AppProject of %s whose destinations are every namespace on %s; none is", describeKind(group, resource, info.Kind), who, server), nil
	}
	refused := ""
	for _, list := range [2][]int{ix.destLiteral[ns], ix.destPattern} {
		for _, i := range list {
			p := &ix.projects[i]
			if !p.compiled.DestinationPermitted(server, cluster, ns) {
				continue
			}
			ok, entry := namespacedKindPermitted(p, group, info.Kind)
			if ok {
				return authorizer.DecisionAllow, fmt.Sprintf("deputy impersonation gate: namespace %q is a destination of %s", ns, p.ref), nil
			}
			if refused == "" {
				refused = fmt.Sprintf("; namespace %q is a destination of %s, whose spec refuses %s: %s", ns, p.ref, describeKind(group, resource, info.Kind), entry)
			}
		}
	}
	if refused != "" {
		return authorizer.DecisionDeny, "deputy impersonation gate: no AppProject of " + who + " permits " + describeKind(group, resource, info.Kind) + " in namespace " + strconv.Quote(ns) + refused, nil
	}
	return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: namespace %q is not a destination of any AppProject of %s on %s", ns, who, server), nil
}

// decideClusterScoped answers a cluster-scoped object (name "" for every
// object of the kind): a project with a destination on this cluster must
// permit it (policy.ResourcePermitted); the reason names the deciding entry.
func (ix *impersonatorIndex) decideClusterScoped(group, kind, name, what string) (authorizer.Decision, string, error) {
	server, cluster := ix.cfg.ClusterServer, ix.cfg.ClusterName
	target := what
	if name != "" {
		target += fmt.Sprintf(" %q", name)
	}
	closest := ""
	for i := range ix.projects {
		p := &ix.projects[i]
		if !p.compiled.HasDestinationOn(server, cluster) {
			continue
		}
		perm := policy.ResourcePermitted(p.project.Object, group, kind, name, false)
		if perm.Permitted {
			return authorizer.DecisionAllow, fmt.Sprintf("deputy impersonation gate: %s permits cluster-scoped %s (%s)", p.ref, target, perm.Entry), nil
		}
		if closest == "" || strings.Contains(perm.Entry, "Blacklist") {
			closest = fmt.Sprintf("; %s: %s", p.ref, perm.Entry)
		}
	}
	return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: no AppProject of %s permits cluster-scoped %s (clusterResourceWhitelist)%s", ix.cfg.UserName, target, closest), nil
}

// namespacedKindPermitted applies the project's namespaced white- and
// blacklists. An unknown kind (a resource the catalog does not know, asked
// in a namespace) passes only a project that has neither list.
func namespacedKindPermitted(p *gateProject, group, kind string) (bool, string) {
	spec := &p.project.Object.Spec
	if kind == "" {
		if spec.NamespaceResourceWhitelist == nil && len(spec.NamespaceResourceBlacklist) == 0 {
			return true, ""
		}
		return false, "its namespaced lists name kinds, and the kind of this resource is not known"
	}
	perm := policy.ResourcePermitted(p.project.Object, group, kind, "", true)
	return perm.Permitted, perm.Entry
}

// subresourceAllowed applies the subresource allow-list.
func (g *Gate) subresourceAllowed(resource, sub, verb string) bool {
	return g.subresources[resource+"/"+sub][verb] || g.subresources["*/"+sub][verb]
}

// refreshResources asks for a new resource catalog, at most once per
// resourceRefreshInterval.
func (g *Gate) refreshResources() {
	if g.opts.RefreshResources == nil {
		return
	}
	now := time.Now().UnixNano()
	last := g.lastRefresh.Load()
	if now-last < int64(resourceRefreshInterval) || !g.lastRefresh.CompareAndSwap(last, now) {
		return
	}
	g.opts.RefreshResources()
}

func describeKind(group, resource, kind string) string {
	s := resource
	if kind != "" {
		s = kind
	}
	if group != "" {
		s += "." + group
	}
	return s
}

// decideStrict answers a subject that is neither exempt nor an impersonator:
// only an RBAC rule with resourceNames naming the target allows.
func (g *Gate) decideStrict(idx *gateIndex, a authorizer.Attributes) (authorizer.Decision, string, error) {
	for _, r := range []*policy.RBAC{idx.fileRBAC, idx.clusterRBAC} {
		if r == nil {
			continue
		}
		if reason, ok := namedRuleAllows(r, a); ok {
			return authorizer.DecisionAllow, reason + " (a rule naming the impersonation target in resourceNames)", nil
		}
	}
	if kind, _, _ := ParseImpersonationVerb(a.GetVerb()); kind == ImpersonateOn {
		return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate (strict): %s is not a configured sync identity, and acting through constrained impersonation (%s on %s) needs an RBAC rule that names the object in resourceNames; none does",
			a.GetUser().GetName(), a.GetVerb(), describeTarget(a)), nil
	}
	return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate (strict): %s may %s only through an RBAC rule that names the target in resourceNames; none grants %s",
		a.GetUser().GetName(), a.GetVerb(), describeTarget(a)), nil
}

// namedRuleAllows is RBAC evaluation that ignores rules without
// resourceNames (so `*` verbs and resource-wide grants do not count). A check
// for the name "*" never passes: constrained impersonation asks for "*" to
// cover many groups or extras at once, and RBAC would match it against a
// literal resourceNames: ["*"], a rule that names no target.
func namedRuleAllows(r *policy.RBAC, a authorizer.Attributes) (string, bool) {
	if a.GetName() == "*" || a.GetSubresource() == "*" {
		return "", false
	}
	req := newRequest(a)
	reason := ""
	r.VisitBindings(a.GetUser(), a.GetNamespace(), func(b *policy.Binding, subject int) bool {
		for i := range b.Rules {
			rule := &b.Rules[i]
			if len(rule.ResourceNames) > 0 && req.allows(rule) {
				reason = b.Reasons[subject]
				return false
			}
		}
		return true
	})
	return reason, reason != ""
}
