package authorizer

import (
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"deputy.dev/deputy/policy"
)

// RuleGrant is one rule that applies to a user and the binding it comes from.
type RuleGrant struct {
	Binding *policy.Binding
	// Subject is the index of the binding's first subject matching the user.
	Subject int
	Rule    *rbacv1.PolicyRule
}

// Reason is the binding as the allow reasons name it: `RBAC: allowed by
// RoleBinding "r/ns" of ClusterRole "view" to User "alice"`.
func (g RuleGrant) Reason() string { return g.Binding.Reasons[g.Subject] }

// RulesFor returns the rules of every binding of snap that applies to u in
// namespace, in Authorize's visit order (ClusterRoleBindings, then, when
// namespace is not empty, that namespace's RoleBindings), as kube-apiserver's
// SelfSubjectRulesReview computes them (pkg/registry/rbac/validation
// rule.go, DefaultRuleResolver.RulesFor), with the binding of each; errs are
// the role references of those bindings that could not be resolved (the
// review's evaluationError: the list is then incomplete), each naming its
// binding. A request in
// namespace is allowed by deputy's RBAC iff one of the rules allows it.
func RulesFor(snap *policy.Snapshot, u user.Info, namespace string) (rules []RuleGrant, errs []error) {
	if snap == nil {
		return nil, []error{policy.ErrNotLoaded}
	}
	snap.RBAC.VisitBindings(u, namespace, func(b *policy.Binding, subject int) bool {
		if b.RoleErr != nil {
			errs = append(errs, bindingError(b))
			return true
		}
		for i := range b.Rules {
			rules = append(rules, RuleGrant{Binding: b, Subject: subject, Rule: &b.Rules[i]})
		}
		return true
	})
	return rules, errs
}

// ImpersonationRights is what the gate lets one identity impersonate.
type ImpersonationRights struct {
	// Summary says how the gate treats the identity: an impersonator (its
	// AppProjects below), exempt, strict, or no opinion (RBAC decides).
	Summary string `json:"summary"`
	// Projects are an impersonator's AppProjects, with the ServiceAccounts
	// each may derive and its destinations.
	Projects []ProjectRights `json:"projects,omitempty"`
	// Protected describes the targets nobody impersonates through deputy
	// (empty for exempt identities, which the gate leaves to RBAC).
	Protected []string `json:"protected,omitempty"`
}

// ProjectRights is one AppProject of an impersonator.
type ProjectRights struct {
	// Project is `AppProject argoproj.io argocd/guestbook`.
	Project string `json:"project"`
	// ServiceAccounts describes each destinationServiceAccounts entry:
	// `[0] server "https://kubernetes.default.svc", namespace "guestbook" -> guestbook:deployer`;
	// an entry with a wildcard namespace derives the name in every
	// destination namespace it matches.
	ServiceAccounts []string `json:"serviceAccounts"`
	// Destinations describes each destination (server or name, namespace).
	Destinations []string `json:"destinations"`
}

// RightsOf describes what the gate lets u impersonate, from the current
// snapshot and cluster state: for a configured impersonator, its AppProjects
// (selected by API group and namespace as Authorize selects them); for
// anyone else whether the gate leaves impersonation to RBAC (exempt, or not
// strict) or allows only RBAC rules naming the target (strict); and the
// protected targets.
func (g *Gate) RightsOf(u user.Info) ImpersonationRights {
	var r ImpersonationRights
	if g.isExempt(u) {
		r.Summary = "exempt (authorization.impersonation.exempt): the gate has no opinion, RBAC alone decides impersonation"
		return r
	}
	r.Protected = g.protectedDescription()
	imp := g.impersonators[u.GetName()]
	switch {
	case imp == nil && g.opts.Strict:
		r.Summary = "strict mode: may impersonate only through RBAC rules that name the target in resourceNames (the rules above); the gate denies everything else"
		return r
	case imp == nil:
		r.Summary = "not a sync identity: the gate has no opinion except on protected targets; RBAC (the rules above) decides"
		return r
	}
	idx := g.currentIndex()
	ix := idx.impersonators[imp.UserName]
	how := "constrained impersonation (impersonate:serviceaccount)"
	if !g.opts.RequireConstrained {
		how += " or legacy impersonate"
	}
	r.Summary = fmt.Sprintf("sync identity for cluster %s: may impersonate, through %s, exactly the ServiceAccounts its %d AppProjects derive, and act as them only inside those projects", imp.ClusterServer, how, len(ix.projects))
	if !idx.synced {
		r.Summary += " (the cluster's AppProjects are not synced yet: everything is denied)"
	}
	for i := range ix.projects {
		p := &ix.projects[i]
		pr := ProjectRights{Project: p.ref}
		spec := &p.project.Object.Spec
		for j, e := range spec.DestinationServiceAccounts {
			pr.ServiceAccounts = append(pr.ServiceAccounts, fmt.Sprintf("[%d] server %q, namespace %q -> %s", j, e.Server, e.Namespace, describeDerived(e.Namespace, e.DefaultServiceAccount)))
		}
		for _, d := range spec.Destinations {
			where := fmt.Sprintf("server %q", d.Server)
			if d.Server == "" {
				where = fmt.Sprintf("cluster name %q", d.Name)
			}
			pr.Destinations = append(pr.Destinations, fmt.Sprintf("%s, namespace %q", where, d.Namespace))
		}
		r.Projects = append(r.Projects, pr)
	}
	return r
}

// describeDerived says which ServiceAccount an entry derives: "ns:name"
// as written, name in a literal destination namespace, or name in every
// destination namespace a wildcard matches (Argo CD's derivation).
func describeDerived(namespace, sa string) string {
	sa = strings.TrimSpace(sa)
	switch {
	case strings.Contains(sa, ":"):
		return sa
	case namespace == "":
		return sa + " in the Application's namespace"
	case strings.ContainsAny(namespace, "*?[]{}!"):
		return fmt.Sprintf("%s in every destination namespace matching %q", sa, namespace)
	}
	return namespace + ":" + sa
}

func (g *Gate) protectedDescription() []string {
	var out []string
	if l := g.opts.ProtectedGroups; len(l) > 0 {
		out = append(out, fmt.Sprintf("groups %q", l))
	}
	if l := g.opts.ProtectedUserPrefixes; len(l) > 0 {
		out = append(out, fmt.Sprintf("users starting with %q", l))
	}
	if l := g.opts.ProtectedServiceAccountNamespaces; len(l) > 0 {
		out = append(out, fmt.Sprintf("ServiceAccounts of namespaces %q", l))
	}
	return out
}
