package authorizer

import (
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	"deputy.dev/deputy/policy"
)

// expandGroups adds a GroupExpansion for every group a grant names, in the
// order first named.
func (w *whoCan) expandGroups(ans *WhoCanAnswer) {
	var named []string // computed once, when a group needs it
	groups := 0
	for _, g := range ans.Grants {
		if g.Subject.Kind == rbacv1.GroupKind {
			groups++
		}
	}
	if groups == 0 {
		return
	}
	seen := make(map[string]bool, groups)
	ans.Groups = slices.Grow(ans.Groups, groups)
	for _, g := range ans.Grants {
		if g.Subject.Kind != rbacv1.GroupKind || seen[g.Subject.Name] {
			continue
		}
		seen[g.Subject.Name] = true
		e := GroupExpansion{Group: g.Subject.Name}
		in, description := groupMembership(g.Subject.Name)
		e.Description = description
		if in != nil {
			e.Known = true
			if named == nil {
				named = w.namedUsers()
			}
			for _, name := range named {
				if !in(name) {
					continue
				}
				if !w.gateDecides {
					// A member is allowed through the group's grant: the
					// gate has no opinion on the request for anyone.
					e.Members = append(e.Members, name)
					continue
				}
				if v := w.decide(SubjectUser(userSubject(name))); v.allowed {
					e.Members = append(e.Members, name)
				} else {
					ans.Refused = append(ans.Refused, Refusal{Subject: userSubject(name), Reason: v.reason})
				}
			}
		}
		ans.Groups = append(ans.Groups, e)
	}
}

// groupMembership tells, for the groups kube-apiserver's authenticators
// assign by user name, who is in the group; nil for any other group.
func groupMembership(group string) (func(name string) bool, string) {
	switch {
	case group == user.AllAuthenticated:
		return func(name string) bool { return name != user.Anonymous }, "every authenticated user"
	case group == user.AllUnauthenticated:
		return func(name string) bool { return name == user.Anonymous }, "every unauthenticated request: user system:anonymous"
	case group == serviceaccount.AllServiceAccountsGroup:
		return func(name string) bool {
			_, _, err := serviceaccount.SplitUsername(name)
			return err == nil
		}, "every ServiceAccount"
	case strings.HasPrefix(group, serviceaccount.ServiceAccountGroupPrefix) && group != serviceaccount.AllServiceAccountsGroup:
		ns := strings.TrimPrefix(group, serviceaccount.ServiceAccountGroupPrefix)
		return func(name string) bool {
			n, _, err := serviceaccount.SplitUsername(name)
			return err == nil && n == ns
		}, "every ServiceAccount of namespace " + ns
	}
	return nil, "membership comes from the authenticator, not the policy: not expanded"
}

// namedUsers returns, sorted and unique, system:anonymous and every user
// name the policy names:
// User subjects, ServiceAccount subjects (as system:serviceaccount:NS:NAME)
// of every binding of deputy's RBAC and the cluster's, and the configured
// impersonators.
func (w *whoCan) namedUsers() []string {
	// A slice sorted and compacted: cheaper than a set of 100,000 names.
	out := []string{user.Anonymous} // the one member of system:unauthenticated, named or not
	add := func(list []policy.Binding) {
		for i := range list {
			b := &list[i]
			for _, s := range b.Subjects {
				if s, ok := NormalizeSubject(s, b.Namespace); ok && s.Kind != rbacv1.GroupKind {
					out = append(out, subjectUserName(s))
				}
			}
		}
	}
	for _, r := range []*policy.RBAC{w.snap.RBAC, w.o.ClusterRBAC} {
		if r == nil {
			continue
		}
		add(r.ClusterRoleBindings())
		for _, ns := range r.BindingNamespaces() {
			add(r.RoleBindings(ns))
		}
	}
	if w.o.Gate != nil {
		for _, imp := range w.o.Gate.opts.Impersonators {
			out = append(out, imp.UserName)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
