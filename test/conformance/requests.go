package conformance

import (
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Request is one SubjectAccessReview to ask.
type Request struct {
	Spec authorizationv1.SubjectAccessReviewSpec
	// V1beta1 asks deputy in authorization.k8s.io/v1beta1, where the groups
	// field is spelled "group" (kube-apiserver serves SubjectAccessReview
	// only in v1, so the apiserver is always asked in v1).
	V1beta1 bool
	// How says how the request was made ("near miss: group"), for failure
	// messages.
	How string
}

// String renders the request compactly for failure messages.
func (r Request) String() string {
	s := r.Spec
	var b strings.Builder
	fmt.Fprintf(&b, "user=%q groups=%q ", s.User, s.Groups)
	if ra := s.ResourceAttributes; ra != nil {
		fmt.Fprintf(&b, "verb=%q group=%q version=%q resource=%q subresource=%q namespace=%q name=%q",
			ra.Verb, ra.Group, ra.Version, ra.Resource, ra.Subresource, ra.Namespace, ra.Name)
	} else if nra := s.NonResourceAttributes; nra != nil {
		fmt.Fprintf(&b, "verb=%q path=%q", nra.Verb, nra.Path)
	}
	if r.V1beta1 {
		b.WriteString(" (v1beta1 to deputy)")
	}
	if r.How != "" {
		fmt.Fprintf(&b, " [%s]", r.How)
	}
	return b.String()
}

// binding is a RoleBinding or ClusterRoleBinding as the request generator
// sees it: its subjects and its role's rules (nil when the role is missing).
type binding struct {
	namespace string // "" for a ClusterRoleBinding
	subjects  []rbacv1.Subject
	rules     []rbacv1.PolicyRule
}

// GenerateRequests returns n SubjectAccessReviews about p (which should
// include every object the answering authorizers hold, the bootstrap policy
// too): a quarter random, the rest aimed at a binding of p — its subject, its
// namespace and a rule of its role — of which most are then turned into a
// near miss by changing one thing: the verb, the API group, the resource,
// the subresource, the name (or the empty name of create and list), the
// namespace, the path, or the user (another ServiceAccount namespace, a
// group dropped, another case).
func GenerateRequests(r Rand, p *Policy, n int) []Request {
	g := &gen{r: r}
	clusterRoles := map[string][]rbacv1.PolicyRule{}
	for _, cr := range p.ClusterRoles {
		clusterRoles[cr.Name] = cr.Rules
	}
	roles := map[string][]rbacv1.PolicyRule{}
	for _, role := range p.Roles {
		roles[role.Namespace+"/"+role.Name] = role.Rules
	}
	var bindings []binding
	for _, crb := range p.ClusterRoleBindings {
		b := binding{subjects: crb.Subjects}
		if crb.RoleRef.Kind == "ClusterRole" {
			b.rules = clusterRoles[crb.RoleRef.Name]
		}
		bindings = append(bindings, b)
	}
	for _, rb := range p.RoleBindings {
		b := binding{namespace: rb.Namespace, subjects: rb.Subjects}
		switch rb.RoleRef.Kind {
		case "ClusterRole":
			b.rules = clusterRoles[rb.RoleRef.Name]
		case "Role":
			b.rules = roles[rb.Namespace+"/"+rb.RoleRef.Name]
		}
		bindings = append(bindings, b)
	}
	namespaces := append(slices.Clone(p.Namespaces), otherNamespaces...)

	out := make([]Request, 0, n)
	for range n {
		var req Request
		if len(bindings) == 0 || g.chance(1, 4) {
			req = g.randomRequest(namespaces)
		} else {
			req = g.targetedRequest(pick(g, bindings), namespaces)
		}
		if g.chance(1, 5) {
			req.V1beta1 = true
		}
		if ra := req.Spec.ResourceAttributes; ra != nil {
			ra.Version = pick(g, versions)
		}
		// kube-apiserver allows members of system:masters before any
		// authorizer runs (and never sends them to a webhook): such a
		// request says nothing about RBAC.
		req.Spec.Groups = slices.DeleteFunc(req.Spec.Groups, func(g string) bool { return g == user.SystemPrivilegedGroup })
		if req.Spec.User == "" && len(req.Spec.Groups) == 0 {
			req.Spec.User = pick(g, userNames)
		}
		out = append(out, req)
	}
	return out
}

// randomUser returns a user and its groups, as an authenticator would
// produce them (ServiceAccounts with their groups, most users in
// system:authenticated), from the pools.
func (g *gen) randomUser(namespaces []string) (string, []string) {
	if g.chance(1, 3) {
		ns := pick(g, namespaces)
		return serviceaccount.MakeUsername(ns, pick(g, saNames)), g.serviceAccountGroups(ns)
	}
	name := pick(g, userNames)
	groups := []string{}
	for range g.r.IntN(3) {
		if gr := pick(g, groupNames); !slices.Contains(groups, gr) {
			groups = append(groups, gr)
		}
	}
	if name != user.Anonymous && g.chance(3, 4) && !slices.Contains(groups, user.AllAuthenticated) {
		groups = append(groups, user.AllAuthenticated)
	}
	if g.chance(1, 30) {
		// Many groups, some twice: more per-name candidate lists than an
		// evaluator may merge on the stack.
		for _, ns := range namespaces {
			groups = append(groups, serviceaccount.MakeNamespaceGroupName(ns))
		}
		groups = append(groups, groupNames...)
		groups = append(groups, groupNames[:1+g.r.IntN(len(groupNames))]...)
	}
	return name, groups
}

// serviceAccountGroups are the groups a ServiceAccount token carries, or
// (1 in 5) none, as in a SubjectAccessReview written by hand.
func (g *gen) serviceAccountGroups(ns string) []string {
	if g.chance(1, 5) {
		return nil
	}
	return []string{serviceaccount.AllServiceAccountsGroup, serviceaccount.MakeNamespaceGroupName(ns), user.AllAuthenticated}
}

func (g *gen) randomRequest(namespaces []string) Request {
	req := Request{How: "random"}
	req.Spec.User, req.Spec.Groups = g.randomUser(namespaces)
	if req.Spec.User != "" && g.chance(1, 40) {
		req.Spec.User = "" // groups only
		req.Spec.Groups = append(req.Spec.Groups, pick(g, groupNames))
	}
	if g.chance(1, 5) {
		req.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Verb: pick(g, append(nonResourceVerbs, "*")), Path: pick(g, requestPaths)}
		if g.chance(1, 10) {
			req.Spec.NonResourceAttributes.Path = pick(g, []string{"", "*", "/api*", "/API", "//api"})
		}
		return req
	}
	group := pick(g, apiGroups)
	ra := &authorizationv1.ResourceAttributes{Verb: pick(g, resourceVerbs), Group: group, Resource: pick(g, resources[group])}
	if g.chance(1, 15) {
		ra.Verb = rbacv1.VerbAll
	}
	if g.chance(1, 4) {
		ra.Subresource = pick(g, subresources)
	}
	if g.chance(1, 3) {
		ra.Name = pick(g, objectNames)
	}
	if g.chance(2, 3) {
		ra.Namespace = pick(g, namespaces)
	}
	if g.chance(1, 10) {
		// Values that only wildcards, or literal rules, match.
		switch g.r.IntN(5) {
		case 0:
			ra.Resource = pick(g, []string{"*", "", "Pods", "*/scale"})
		case 1:
			ra.Group = pick(g, []string{"*", "Apps", "*.k8s.io"})
		case 2:
			ra.Name = pick(g, []string{"*", "Web", "web*"})
		case 3:
			ra.Verb = pick(g, []string{"GET", "Get", "", "impersonate:serviceaccount"})
		default:
			ra.Subresource = pick(g, []string{"*", "", "status/x"})
		}
	}
	req.Spec.ResourceAttributes = ra
	return req
}

// targetedRequest asks for something b's role allows, as a subject of b, then
// (3 in 4) changes one thing.
func (g *gen) targetedRequest(b binding, namespaces []string) Request {
	req := Request{How: "allowed by a binding"}
	if len(b.subjects) > 0 {
		req.Spec.User, req.Spec.Groups = g.userFor(pick(g, b.subjects), b.namespace, namespaces)
	} else {
		req.Spec.User, req.Spec.Groups = g.randomUser(namespaces)
	}
	if req.Spec.User == "" && len(req.Spec.Groups) == 0 {
		req.Spec.User = pick(g, userNames) // kube-apiserver requires one of them
	}
	ns := b.namespace
	if ns == "" && g.chance(2, 3) {
		ns = pick(g, namespaces)
	}
	var rule rbacv1.PolicyRule
	if len(b.rules) > 0 {
		rule = pick(g, b.rules)
	} else {
		// A missing role: anything, the binding cannot allow it.
		random := g.randomRequest(namespaces)
		random.Spec.User, random.Spec.Groups = req.Spec.User, req.Spec.Groups
		random.How = "subject of a binding to a missing role"
		return random
	}
	if len(rule.NonResourceURLs) > 0 && (len(rule.Resources) == 0 || g.chance(1, 2)) {
		req.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Verb: g.concreteVerb(rule.Verbs, nonResourceVerbs), Path: g.pathFor(pick(g, rule.NonResourceURLs))}
	} else {
		ra := &authorizationv1.ResourceAttributes{Namespace: ns, Verb: g.concreteVerb(rule.Verbs, resourceVerbs)}
		ra.Group = rbacv1.APIGroupAll
		if len(rule.APIGroups) > 0 {
			ra.Group = pick(g, rule.APIGroups)
		}
		if ra.Group == rbacv1.APIGroupAll && g.chance(3, 4) {
			ra.Group = pick(g, apiGroups)
		}
		entry := "pods"
		if len(rule.Resources) > 0 {
			entry = pick(g, rule.Resources)
		}
		ra.Resource, ra.Subresource = g.resourceFor(entry, ra.Group)
		switch {
		case len(rule.ResourceNames) > 0:
			ra.Name = pick(g, rule.ResourceNames)
		case g.chance(1, 2):
			ra.Name = pick(g, objectNames)
		}
		req.Spec.ResourceAttributes = ra
	}
	if g.chance(1, 4) {
		return req
	}
	g.nearMiss(&req, b, namespaces)
	return req
}

// userFor returns a user matching subject s of a binding in namespace ns.
func (g *gen) userFor(s rbacv1.Subject, ns string, namespaces []string) (string, []string) {
	switch s.Kind {
	case rbacv1.UserKind:
		_, groups := g.randomUser(namespaces)
		if sns, _, err := serviceaccount.SplitUsername(s.Name); err == nil {
			groups = g.serviceAccountGroups(sns)
		}
		return s.Name, groups
	case rbacv1.GroupKind:
		name, groups := g.randomUser(namespaces)
		if !slices.Contains(groups, s.Name) {
			groups = append(groups, s.Name)
		}
		return name, groups
	case rbacv1.ServiceAccountKind:
		sns := s.Namespace
		if sns == "" {
			sns = ns
		}
		if sns == "" {
			sns = pick(g, namespaces)
		}
		return serviceaccount.MakeUsername(sns, s.Name), g.serviceAccountGroups(sns)
	}
	return g.randomUser(namespaces)
}

// concreteVerb picks a verb of the rule; "*" becomes a real verb, or (1 in
// 4) stays "*", a SubjectAccessReview whose verb is "*".
func (g *gen) concreteVerb(ruleVerbs, pool []string) string {
	if len(ruleVerbs) == 0 {
		return pick(g, pool)
	}
	v := pick(g, ruleVerbs)
	if v == rbacv1.VerbAll && g.chance(3, 4) {
		return pick(g, pool)
	}
	return v
}

// resourceFor turns a rule's resource entry into a request's resource and
// subresource: "*" any resource (sometimes with a subresource), "*/sub" any
// resource's sub, "res/*" the literal subresource "*" (or, 1 in 2, a real
// subresource, which that rule does not cover).
func (g *gen) resourceFor(entry, group string) (string, string) {
	pool, ok := resources[group]
	if !ok {
		pool = resources[""]
	}
	if entry == rbacv1.ResourceAll {
		if g.chance(1, 3) {
			return pick(g, pool), pick(g, subresources)
		}
		return pick(g, pool), ""
	}
	res, sub, found := strings.Cut(entry, "/")
	if !found {
		return entry, ""
	}
	if res == "*" {
		res = pick(g, pool)
	}
	if sub == "*" && g.chance(1, 2) {
		sub = pick(g, subresources)
	}
	return res, sub
}

// pathFor turns a rule URL into a request path: "*" any path, "/api*" a path
// with that prefix ("/api", "/apis", "/api/v1"), exact URLs themselves.
func (g *gen) pathFor(url string) string {
	if url == rbacv1.NonResourceAll {
		return pick(g, requestPaths)
	}
	if prefix, ok := strings.CutSuffix(url, "*"); ok {
		prefix = strings.TrimRight(prefix, "*")
		var matching []string
		for _, p := range requestPaths {
			if strings.HasPrefix(p, prefix) {
				matching = append(matching, p)
			}
		}
		if len(matching) > 0 && g.chance(2, 3) {
			return pick(g, matching)
		}
		return prefix + pick(g, []string{"", "s", "/x", "/"})
	}
	return url
}

// nearMiss changes one thing of req.
func (g *gen) nearMiss(req *Request, b binding, namespaces []string) {
	if nra := req.Spec.NonResourceAttributes; nra != nil {
		switch g.r.IntN(4) {
		case 0:
			req.How = "near miss: verb"
			nra.Verb = pickOther(g, append(nonResourceVerbs, "*"), nra.Verb)
		case 1:
			req.How = "near miss: user"
			g.otherUser(req, namespaces)
		default:
			req.How = "near miss: path"
			switch g.r.IntN(5) {
			case 0:
				nra.Path += "/"
			case 1:
				nra.Path = strings.TrimSuffix(nra.Path, "/") + "s"
			case 2:
				if len(nra.Path) > 1 {
					nra.Path = nra.Path[:len(nra.Path)-1]
				}
			case 3:
				nra.Path = strings.ToUpper(nra.Path)
			default:
				nra.Path = pickOther(g, requestPaths, nra.Path)
			}
		}
		return
	}
	ra := req.Spec.ResourceAttributes
	switch g.r.IntN(8) {
	case 0:
		req.How = "near miss: verb"
		ra.Verb = pickOther(g, append(resourceVerbs, rbacv1.VerbAll), ra.Verb)
	case 1:
		req.How = "near miss: group (right verb, wrong group)"
		ra.Group = pickOther(g, append(apiGroups, "Apps"), ra.Group)
	case 2:
		req.How = "near miss: resource"
		if pool, ok := resources[ra.Group]; ok {
			ra.Resource = pickOther(g, pool, ra.Resource)
		} else {
			ra.Resource = pickOther(g, resources[""], ra.Resource)
		}
	case 3:
		req.How = "near miss: subresource (right resource, wrong subresource)"
		switch {
		case ra.Subresource == "":
			ra.Subresource = pick(g, append(subresources, "*"))
		case g.chance(1, 3):
			ra.Subresource = ""
		default:
			ra.Subresource = pickOther(g, append(subresources, "*"), ra.Subresource)
		}
	case 4:
		req.How = "near miss: name"
		if g.chance(1, 2) {
			// The empty name of create and list against resourceNames.
			ra.Name = ""
			ra.Verb = pick(g, []string{"create", "list", ra.Verb})
		} else {
			ra.Name = pickOther(g, objectNames, ra.Name)
		}
	case 5, 6:
		req.How = "near miss: namespace (right name, wrong namespace)"
		if b.namespace == "" && ra.Namespace == "" {
			ra.Namespace = pick(g, namespaces)
		} else {
			ra.Namespace = pickOther(g, append(namespaces, ""), ra.Namespace)
		}
	default:
		req.How = "near miss: user"
		g.otherUser(req, namespaces)
	}
}

// otherUser changes the user: a ServiceAccount to the same name in another
// namespace, a group dropped, the name in another case, or someone else.
func (g *gen) otherUser(req *Request, namespaces []string) {
	s := &req.Spec
	if ns, name, err := serviceaccount.SplitUsername(s.User); err == nil && g.chance(2, 3) {
		other := pickOther(g, namespaces, ns)
		s.User = serviceaccount.MakeUsername(other, name)
		if len(s.Groups) > 0 {
			s.Groups = g.serviceAccountGroups(other)
		}
		return
	}
	switch {
	case len(s.Groups) > 0 && g.chance(1, 2):
		i := g.r.IntN(len(s.Groups))
		s.Groups = slices.Delete(slices.Clone(s.Groups), i, i+1)
	case g.chance(1, 2) && s.User != "":
		s.User = strings.ToUpper(s.User[:1]) + s.User[1:]
	default:
		s.User, s.Groups = g.randomUser(namespaces)
	}
	if s.User == "" && len(s.Groups) == 0 {
		s.User = pick(g, userNames)
	}
}
