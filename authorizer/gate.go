package authorizer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

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
	if kind == NotImpersonation {
		return authorizer.DecisionNoOpinion, "", nil
	}
	u := a.GetUser()
	if g.isExempt(u) {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if kind != ImpersonateOn {
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
func (g *Gate) decideImpersonator(idx *gateIndex, ix *impersonatorIndex, a authorizer.Attributes, kind ImpersonationKind, mode, onVerb string) (authorizer.Decision, string, error) {
	who := ix.cfg.UserName
	switch kind {
	case LegacyImpersonate:
		if g.opts.RequireConstrained {
			return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: %s may impersonate only through constrained impersonation (authorization.impersonation.requireConstrained); legacy impersonate is denied", who), nil
		}
		if a.GetAPIGroup() != "" || a.GetResource() != "serviceaccounts" {
			return authorizer.DecisionDeny, fmt.Sprintf("deputy impersonation gate: %s may impersonate only the ServiceAccounts its AppProjects derive, not %s", who, describeTarget(a)), nil
		}
		return ix.decideServiceAccount(a.GetNamespace(), a.GetName())
	case ConstrainedImpersonate:
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
