package authorizer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
)

// Impersonator is a sync identity whose right to impersonate comes from
// AppProjects: it may impersonate exactly the ServiceAccounts its projects
// derive for ClusterServer, for the actions a sync needs, in the projects'
// destinations.
type Impersonator struct {
	// UserName is the identity (system:serviceaccount:ns:name for a
	// ServiceAccount).
	UserName string
	// ClusterServer and ClusterName are how the projects name this cluster.
	ClusterServer string
	ClusterName   string
	// APIGroups (argoproj.io, deputy.dev) and Namespaces (empty: all) select
	// the AppProjects that grant this identity.
	APIGroups  []string
	Namespaces []string
	// ApplicationNamespaces are where this identity's Applications live.
	ApplicationNamespaces []string
}

// GateOptions configure the impersonation gate.
type GateOptions struct {
	Impersonators []Impersonator
	// Strict restricts every other non-exempt subject to RBAC rules that name
	// the impersonation target in resourceNames, and denies otherwise.
	Strict bool
	// RequireConstrained denies legacy `impersonate` to impersonators.
	RequireConstrained bool
	// Exempt users and groups are left to RBAC.
	ExemptUsers, ExemptGroups []string
	// Protected targets are never impersonated through deputy.
	ProtectedGroups, ProtectedUserPrefixes, ProtectedServiceAccountNamespaces []string
	// Subresources is the allow-list of subresources an impersonator's
	// ServiceAccounts may use in their projects' destinations; everything
	// else with a subresource (pods/exec, serviceaccounts/token, …) is
	// denied.
	Subresources []SubresourceRule
	// RefreshResources, when set, is called when a request without a
	// namespace names a resource the catalog does not know (a custom resource
	// whose definition was just created), at most once per
	// resourceRefreshInterval: cluster mode asks discovery again then.
	RefreshResources func()
}

// SubresourceRule allows one subresource, for some verbs, on a resource
// ("*" for every resource), in any API group.
type SubresourceRule struct {
	Resource, Subresource string
	Verbs                 []string
}

// resourceRefreshInterval bounds how often unknown resources make the gate
// ask for a new discovery.
const resourceRefreshInterval = 2 * time.Second

// ClusterStateFunc returns the cluster's state in cluster mode; nil in file mode.
type ClusterStateFunc func() *policy.ClusterState

// Gate is deputy's impersonation gate, an authorizer that answers only
// impersonation checks (verbs impersonate, impersonate:<mode> and
// impersonate-on:<mode>:<verb>, as kube-apiserver's impersonation filters
// send them: k8s.io/apiserver/pkg/endpoints/filters/impersonation) and has no
// opinion on everything else. It goes before RBAC in the union so that its
// Deny is final.
type Gate struct {
	opts    GateOptions
	file    SnapshotFunc
	cluster ClusterStateFunc

	exemptUsers, exemptGroups map[string]bool
	impersonators             map[string]*Impersonator
	// subresources maps "resource/subresource" ("*/status" too) to verbs.
	subresources map[string]map[string]bool
	lastRefresh  atomic.Int64 // unix nanos of the last RefreshResources call

	mu    sync.Mutex // serialises index rebuilds
	index atomic.Pointer[gateIndex]
}

var _ authorizer.Authorizer = (*Gate)(nil)

// NewGate returns the gate. file returns deputy's policy snapshot (AppProjects
// and RBAC from files); cluster, when not nil, the cluster's state (cluster
// mode). The gate indexes their AppProjects per impersonator and rebuilds the
// index when either changes.
func NewGate(opts GateOptions, file SnapshotFunc, cluster ClusterStateFunc) *Gate {
	g := &Gate{opts: opts, file: file, cluster: cluster,
		exemptUsers: set(opts.ExemptUsers), exemptGroups: set(opts.ExemptGroups), impersonators: map[string]*Impersonator{}}
	for i := range opts.Impersonators {
		g.impersonators[opts.Impersonators[i].UserName] = &g.opts.Impersonators[i]
	}
	g.subresources = map[string]map[string]bool{}
	for _, r := range opts.Subresources {
		key := r.Resource + "/" + r.Subresource
		if g.subresources[key] == nil {
			g.subresources[key] = map[string]bool{}
		}
		for _, v := range r.Verbs {
			g.subresources[key][v] = true
		}
	}
	return g
}

func set(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[s] = true
	}
	return m
}

// ErrProjectsNotSynced is the evaluation error while the cluster's
// AppProjects and RBAC objects have not been listed yet.
var ErrProjectsNotSynced = errors.New("projects not synced")

// syncVerbs are the verbs a sync needs (server-side apply is patch; prune is
// delete; preflight and status are get, list, watch).
var syncVerbs = map[string]bool{"get": true, "list": true, "watch": true, "create": true, "update": true, "patch": true, "delete": true}

type impersonationKind int

const (
	notImpersonation       impersonationKind = iota
	legacyImpersonate                        // verb impersonate
	constrainedImpersonate                   // verb impersonate:<mode>
	impersonateOn                            // verb impersonate-on:<mode>:<verb>
)

// modeResources are the resources kube-apiserver's constrained impersonation
// checks with each impersonate:<mode> verb, all in group
// authentication.k8s.io (k8s.io/apiserver/pkg/endpoints/filters/impersonation
// mode.go): the modes deputy knows, and nothing else.
var modeResources = map[string][]string{
	"serviceaccount":  {"serviceaccounts"},
	"user-info":       {"users", "groups", "uids", "userextras"},
	"arbitrary-node":  {"nodes"},
	"associated-node": {"nodes"},
}

// parseImpersonationVerb classifies a verb; mode is "" for legacy, onVerb the
// real request's verb for impersonate-on.
func parseImpersonationVerb(verb string) (kind impersonationKind, mode, onVerb string) {
	switch {
	case verb == "impersonate":
		return legacyImpersonate, "", ""
	case strings.HasPrefix(verb, "impersonate:"):
		return constrainedImpersonate, verb[len("impersonate:"):], ""
	case strings.HasPrefix(verb, "impersonate-on:"):
		mode, onVerb, _ := strings.Cut(verb[len("impersonate-on:"):], ":")
		return impersonateOn, mode, onVerb
	}
	return notImpersonation, "", ""
}

// classifyImpersonation returns the kind of an impersonation check only when
// the attributes have a shape kube-apiserver's impersonation filters send
// (k8s.io/apiserver/pkg/endpoints/filters/impersonation): legacy impersonate
// on users, groups, serviceaccounts (group "") or uids, userextras/<key>
// (authentication.k8s.io); impersonate:<mode> of a known mode on that
// mode's resources in authentication.k8s.io; impersonate-on:<mode>:<verb> of
// a known mode. Anything else (impersonate on jobs.batch, on a non-resource
// path, an unknown mode) is notImpersonation: kube-apiserver never asks it
// while impersonating, and the gate leaves it to the authorizers after it.
func classifyImpersonation(a authorizer.Attributes) (kind impersonationKind, mode, onVerb string) {
	kind, mode, onVerb = parseImpersonationVerb(a.GetVerb())
	group, resource, sub := a.GetAPIGroup(), a.GetResource(), a.GetSubresource()
	subOK := sub == "" || resource == "userextras"
	switch kind {
	case legacyImpersonate:
		if !a.IsResourceRequest() || !subOK {
			return notImpersonation, "", ""
		}
		switch {
		case group == "" && (resource == "users" || resource == "groups" || resource == "serviceaccounts"):
		case group == "authentication.k8s.io" && (resource == "uids" || resource == "userextras"):
		default:
			return notImpersonation, "", ""
		}
	case constrainedImpersonate:
		if !a.IsResourceRequest() || !subOK || group != "authentication.k8s.io" || !slices.Contains(modeResources[mode], resource) {
			return notImpersonation, "", ""
		}
	case impersonateOn:
		if modeResources[mode] == nil || onVerb == "" || strings.Contains(onVerb, ":") {
			return notImpersonation, "", ""
		}
	}
	return kind, mode, onVerb
}

// Authorize decides impersonation checks:
//   - exempt subjects: no opinion (RBAC decides);
//   - a protected target (impersonate and impersonate:<mode> on users,
//     groups, serviceaccounts): Deny, for everyone;
//   - an impersonator: Allow exactly what its AppProjects derive (see
//     decideImpersonator), Deny the rest;
//   - anyone else with Strict: Allow only through an RBAC rule (deputy's
//     policy, and the cluster's in cluster mode) with resourceNames that name
//     the target; Deny otherwise;
//   - anyone else without Strict: no opinion.
//
// In cluster mode, until the cluster's AppProjects and RBAC have synced,
// impersonation is denied with ErrProjectsNotSynced as evaluation error.
func (g *Gate) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if !strings.HasPrefix(a.GetVerb(), "impersonate") {
		return authorizer.DecisionNoOpinion, "", nil
	}
	kind, mode, onVerb := classifyImpersonation(a)
	if kind == notImpersonation {
		return authorizer.DecisionNoOpinion, "", nil
	}
	u := a.GetUser()
	if g.isExempt(u) {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if kind != impersonateOn {
		if reason := g.protectedTarget(a); reason != "" {
			return authorizer.DecisionDeny, reason, nil
		}
	}
	imp := g.impersonators[u.GetName()]
	if imp == nil && !g.opts.Strict {
		return authorizer.DecisionNoOpinion, "", nil
	}
	idx := g.currentIndex()
	if !idx.synced {
		return authorizer.DecisionDeny, "deputy impersonation gate: the cluster's AppProjects and RBAC objects are not synced yet", ErrProjectsNotSynced
	}
	if imp != nil {
		return g.decideImpersonator(idx, idx.impersonators[imp.UserName], a, kind, mode, onVerb)
	}
	return g.decideStrict(idx, a)
}

// ConditionsAwareAuthorize is Authorize in the conditions-aware form; the
// gate's decisions are never conditional.
func (g *Gate) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(g.Authorize(ctx, a))
}

// EvaluateConditions fails closed: the gate issues no conditional decisions.
func (g *Gate) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

func (g *Gate) isExempt(u user.Info) bool {
	if g.exemptUsers[u.GetName()] {
		return true
	}
	for _, grp := range u.GetGroups() {
		if g.exemptGroups[grp] {
			return true
		}
	}
	return false
}

// protectedTarget returns a deny reason when the check names a protected
// user, group or ServiceAccount, or asks for every name of a kind of target
// that has protected members: constrained impersonation asks once for the
// name "*" before checking many groups or extras one by one (mode.go
// authorizeGroups), and an RBAC rule without resourceNames would allow that
// "*" and so every group, the protected ones included. Denying it makes
// kube-apiserver check each group, where the protected one is denied.
func (g *Gate) protectedTarget(a authorizer.Attributes) string {
	name, ns := a.GetName(), a.GetNamespace()
	const protected = "(authorization.impersonation.protectedTargets)"
	switch a.GetResource() {
	case "serviceaccounts":
		if slices.Contains(g.opts.ProtectedServiceAccountNamespaces, ns) {
			return fmt.Sprintf("deputy impersonation gate: ServiceAccounts of namespace %q are protected targets and are never impersonated %s", ns, protected)
		}
		if ns == "*" && len(g.opts.ProtectedServiceAccountNamespaces) > 0 {
			return "deputy impersonation gate: every namespace (\"*\") of ServiceAccounts includes protected targets " + protected
		}
	case "users":
		for _, p := range g.opts.ProtectedUserPrefixes {
			if strings.HasPrefix(name, p) {
				return fmt.Sprintf("deputy impersonation gate: user %q is a protected target (prefix %q) and is never impersonated %s", name, p, protected)
			}
		}
		if name == "*" && len(g.opts.ProtectedUserPrefixes) > 0 {
			return "deputy impersonation gate: every user (\"*\") includes protected targets " + protected
		}
	case "groups":
		if slices.Contains(g.opts.ProtectedGroups, name) {
			return fmt.Sprintf("deputy impersonation gate: group %q is a protected target and is never impersonated %s", name, protected)
		}
		if name == "*" && len(g.opts.ProtectedGroups) > 0 {
			return "deputy impersonation gate: every group (\"*\") includes protected targets; kube-apiserver then checks the groups one by one " + protected
		}
	}
	return ""
}

// decideImpersonator answers an impersonator:
//   - legacy `impersonate` on serviceaccounts (group "") and constrained
//     `impersonate:serviceaccount` (group authentication.k8s.io): Allow iff
//     one of its AppProjects derives exactly that ServiceAccount for its
//     cluster (CompiledProject.DerivesServiceAccount); legacy is denied with
//     RequireConstrained (the default);
//   - `impersonate-on:serviceaccount:<verb>`: Allow iff verb is one a sync
//     uses and the request stays inside one of its projects (decideAction);
//   - everything else (users, groups, uids, userextras, the user-info and
//     node modes): Deny.
func (g *Gate) decideImpersonator(idx *gateIndex, ix *impersonatorIndex, a authorizer.Attributes, kind impersonationKind, mode, onVerb string) (authorizer.Decision, string, error) {
	who := ix.cfg.UserName
	switch kind {
	case legacyImpersonate:
		if g.opts.RequireConstrained {
			return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: %s may impersonate only through constrained impersonation (authorization.impersonation.requireConstrained); legacy impersonate is denied", who), nil
		}
		if a.GetAPIGroup() != "" || a.GetResource() != "serviceaccounts" {
			return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: %s may impersonate only the ServiceAccounts its AppProjects derive, not %s", who, describeTarget(a)), nil
		}
		return ix.decideServiceAccount(a.GetNamespace(), a.GetName())
	case constrainedImpersonate:
		if mode != "serviceaccount" || a.GetAPIGroup() != "authentication.k8s.io" || a.GetResource() != "serviceaccounts" {
			return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: %s may impersonate only the ServiceAccounts its AppProjects derive, not %s (mode %s)", who, describeTarget(a), mode), nil
		}
		return ix.decideServiceAccount(a.GetNamespace(), a.GetName())
	}
	// impersonate-on
	if mode != "serviceaccount" {
		return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: %s may act only as ServiceAccounts, not in impersonation mode %s", who, mode), nil
	}
	if !syncVerbs[onVerb] {
		return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: verb %q is not one a sync uses (get, list, watch, create, update, patch, delete)", onVerb), nil
	}
	return g.decideAction(idx, ix, a, onVerb)
}

func describeTarget(a authorizer.Attributes) string {
	if !a.IsResourceRequest() {
		return a.GetPath()
	}
	r := a.GetResource()
	if a.GetAPIGroup() != "" {
		r += "." + a.GetAPIGroup()
	}
	if a.GetSubresource() != "" {
		r += "/" + a.GetSubresource()
	}
	if a.GetName() != "" {
		r += fmt.Sprintf(" %q", a.GetName())
	}
	switch a.GetResource() {
	case "users", "groups", "uids", "userextras", "nodes":
		// Identities have no namespace (kubectl auth can-i sends one anyway).
		return r
	}
	if a.GetNamespace() != "" {
		r += fmt.Sprintf(" in namespace %q", a.GetNamespace())
	}
	return r
}

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
	if kind, _, _ := parseImpersonationVerb(a.GetVerb()); kind == impersonateOn {
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

// gateIndex is the per-snapshot view of the gate: compiled AppProjects per
// impersonator, indexed by the ServiceAccount names they derive.
type gateIndex struct {
	file          *policy.Snapshot
	cluster       *policy.ClusterState
	synced        bool
	fileRBAC      *policy.RBAC
	clusterRBAC   *policy.RBAC
	impersonators map[string]*impersonatorIndex
	// resources is the catalog requests without a namespace are decided by:
	// the cluster's (discovery) in cluster mode, over the file snapshot's
	// (built-in kinds and the policy's CustomResourceDefinitions).
	resources *policy.ResourceCatalog
}

func (idx *gateIndex) lookupResource(group, resource string) (policy.ResourceInfo, bool) {
	return idx.resources.Lookup(group, resource)
}

type impersonatorIndex struct {
	cfg      *Impersonator
	projects []gateProject
	// byTarget maps "namespace/name" to the projects with an entry that
	// derives exactly that ServiceAccount; byWildName maps a name to the
	// projects with an entry deriving it in a namespace that depends on the
	// destination. Together they are every project that can derive a
	// ServiceAccount, so decideServiceAccount checks only those.
	byTarget   map[string][]int
	byWildName map[string][]int
	appNS      map[string]bool
	// destLiteral maps a namespace to the projects with a plain destination
	// entry of exactly that namespace; destPattern lists the projects with a
	// wildcard or negated one. Together they are every project that can
	// permit a namespace, so decideAction checks only those.
	destLiteral map[string][]int
	destPattern []int
}

type gateProject struct {
	ref      string // `AppProject argoproj.io argocd/guestbook`
	project  *policy.Project
	compiled *policy.CompiledProject
	// isAppNamespace reports whether an Application of this project, synced
	// by this impersonator, can live in a namespace: one of the
	// impersonator's ApplicationNamespaces that the project admits (its own
	// namespace, or spec.sourceNamespaces). It is where a destination
	// without a namespace derives a bare-name ServiceAccount.
	isAppNamespace func(string) bool
}

// currentIndex returns the index for the current snapshot and cluster state,
// rebuilding it (once, under the lock) when either changed.
func (g *Gate) currentIndex() *gateIndex {
	file := g.file()
	var cluster *policy.ClusterState
	if g.cluster != nil {
		cluster = g.cluster()
	}
	if idx := g.index.Load(); idx != nil && idx.file == file && idx.cluster == cluster {
		return idx
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if idx := g.index.Load(); idx != nil && idx.file == file && idx.cluster == cluster {
		return idx
	}
	idx := g.buildIndex(file, cluster)
	g.index.Store(idx)
	return idx
}

func (g *Gate) buildIndex(file *policy.Snapshot, cluster *policy.ClusterState) *gateIndex {
	idx := &gateIndex{file: file, cluster: cluster, synced: g.cluster == nil || (cluster != nil && cluster.Synced),
		impersonators: make(map[string]*impersonatorIndex, len(g.opts.Impersonators))}
	var projects []policy.Project
	if file != nil {
		idx.fileRBAC = file.RBAC
		idx.resources = file.Resources
		projects = append(projects, file.Projects...)
	}
	if cluster != nil {
		idx.clusterRBAC = cluster.RBAC
		idx.resources = idx.resources.Merge(cluster.Resources)
		projects = append(projects, cluster.Projects...)
	}
	compiled := make([]*policy.CompiledProject, len(projects))
	for i := range projects {
		// A project that does not compile grants nothing (fail closed);
		// admission and `deputy validate` report it.
		compiled[i], _ = policy.CompileAppProject(projects[i].Object)
	}
	for i := range g.opts.Impersonators {
		cfg := &g.opts.Impersonators[i]
		ix := &impersonatorIndex{cfg: cfg, byTarget: map[string][]int{}, byWildName: map[string][]int{}, appNS: set(cfg.ApplicationNamespaces), destLiteral: map[string][]int{}}
		for j := range projects {
			p := &projects[j]
			if compiled[j] == nil || !slices.Contains(cfg.APIGroups, p.Group) ||
				(len(cfg.Namespaces) > 0 && !slices.Contains(cfg.Namespaces, p.Object.Namespace)) {
				continue
			}
			n := len(ix.projects)
			c := compiled[j]
			ix.projects = append(ix.projects, gateProject{
				ref:            fmt.Sprintf("AppProject %s %s/%s", p.Group, p.Object.Namespace, p.Object.Name),
				project:        p,
				compiled:       c,
				isAppNamespace: func(ns string) bool { return ix.appNS[ns] && c.AppNamespacePermitted(ns) },
			})
			literals, patterns := compiled[j].DestinationNamespaceIndex()
			for _, ns := range literals {
				if l := ix.destLiteral[ns]; len(l) == 0 || l[len(l)-1] != n {
					ix.destLiteral[ns] = append(l, n)
				}
			}
			if patterns {
				ix.destPattern = append(ix.destPattern, n)
			}
			for _, t := range compiled[j].ServiceAccountTargets() {
				m, key := ix.byWildName, t.Name
				if t.Namespace != "" {
					m, key = ix.byTarget, t.Namespace+"/"+t.Name
				}
				if l := m[key]; len(l) == 0 || l[len(l)-1] != n {
					m[key] = append(l, n)
				}
			}
		}
		idx.impersonators[cfg.UserName] = ix
	}
	return idx
}

// Refresh rebuilds the index for the current snapshot and cluster state now
// (sources call it after a swap), so that no request pays for the rebuild.
func (g *Gate) Refresh() { g.currentIndex() }

// GateOptionsFrom resolves the configuration's authorization.impersonation
// (defaults applied, see config.SetImpersonationDefaults) into GateOptions.
//
// Errors: an impersonator without a valid identity.
func GateOptionsFrom(im config.Impersonation) (GateOptions, error) {
	config.SetImpersonationDefaults(&im)
	o := GateOptions{Strict: *im.Strict, RequireConstrained: *im.RequireConstrained}
	for i, p := range im.Impersonators {
		name, err := p.UserName()
		if err != nil {
			return GateOptions{}, fmt.Errorf("authorization.impersonation.impersonators[%d]: %w", i, err)
		}
		namespaces := p.Projects.Namespaces
		if slices.Contains(namespaces, "*") {
			namespaces = nil // every namespace
		}
		o.Impersonators = append(o.Impersonators, Impersonator{
			UserName: name, ClusterServer: p.ClusterServer, ClusterName: p.ClusterName,
			APIGroups: p.Projects.APIGroups, Namespaces: namespaces, ApplicationNamespaces: p.ApplicationNamespaces,
		})
	}
	for _, r := range im.Subresources {
		res, sub, _ := strings.Cut(r.Resource, "/")
		o.Subresources = append(o.Subresources, SubresourceRule{Resource: res, Subresource: sub, Verbs: r.Verbs})
	}
	for _, s := range im.Exempt {
		switch {
		case s.User != "":
			o.ExemptUsers = append(o.ExemptUsers, s.User)
		case s.Group != "":
			o.ExemptGroups = append(o.ExemptGroups, s.Group)
		case s.ServiceAccount != "":
			ns, name, _ := strings.Cut(s.ServiceAccount, "/")
			o.ExemptUsers = append(o.ExemptUsers, serviceaccount.MakeUsername(ns, name))
		}
	}
	if pt := im.ProtectedTargets; pt != nil {
		o.ProtectedGroups, o.ProtectedUserPrefixes, o.ProtectedServiceAccountNamespaces = pt.Groups, pt.UserPrefixes, pt.ServiceAccountNamespaces
	}
	return o, nil
}
