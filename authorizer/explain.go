package authorizer

import (
	"fmt"
	"strconv"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/policy"
)

// maxExplainBindings bounds the bindings an explanation reads, so that a user
// bound through very many groups cannot make a denial expensive.
const maxExplainBindings = 512

// maxExplainNamed and maxExplainGroups bound the bindings and the user's
// groups an explanation names.
const (
	maxExplainNamed  = 3
	maxExplainGroups = 5
)

// ExplainDenial says why no binding of snap allows a, for the reason of a
// default denial (New) and for `deputy can-i`. In order:
//
//   - when one of kube-apiserver's bootstrap grants (BootstrapGrants) would
//     allow a for one of the user's groups: that grant, which a policy with
//     authorization.defaultDecision Deny must keep;
//   - the closest rule: among the bindings that apply to the user (visited as
//     Authorize visits them), the rule about the request's resource (or URL)
//     that matches most of its API group, resource and subresource, verb and
//     name, first one on a tie: `closest: RoleBinding "r/ns" of ClusterRole
//     "view" to User "alice" has {...}, which lacks verb "delete"`;
//   - otherwise which bindings apply (up to three by name), or that none does.
//
// It names only bindings that apply to the request's user, never the files
// they come from: kube-apiserver puts the reason into the 403 its client
// sees. "" without a snapshot or a user.
func ExplainDenial(snap *policy.Snapshot, a authorizer.Attributes) string {
	u := a.GetUser()
	if snap == nil || u == nil {
		return ""
	}
	if hint := bootstrapHint(a); hint != "" {
		return hint
	}
	v := nearVisitor{req: newRequest(a)}
	snap.RBAC.VisitBindings(u, a.GetNamespace(), v.visit)

	var b strings.Builder
	b.Grow(256)
	where := func() {
		b.WriteString("cluster-wide")
		if ns := a.GetNamespace(); ns != "" {
			b.WriteString(" or in namespace ")
			b.WriteString(strconv.Quote(ns))
		}
	}
	switch {
	case v.best != nil:
		b.WriteString("closest: ")
		b.WriteString(bindingName(v.bestB, v.bestS))
		b.WriteString(" has ")
		writeRule(&b, v.best)
		b.WriteString(", which lacks ")
		v.req.writeLacks(&b, v.best)
		return b.String()
	case v.applying == 0 && v.broken > 0:
		return "" // only bindings to missing roles: the evaluation error says which
	case v.applying == 0:
		b.WriteString("no binding applies to User ")
		b.WriteString(strconv.Quote(u.GetName()))
		if groups := u.GetGroups(); len(groups) > 0 {
			b.WriteString(" (groups ")
			writeSome(&b, groups, maxExplainGroups)
			b.WriteString(") ")
		} else {
			b.WriteString(" (no groups) ")
		}
		where()
		return b.String()
	}
	fmt.Fprintf(&b, "no rule of the %d bindings that apply to User %q ", v.applying, u.GetName())
	where()
	b.WriteString(" is about ")
	v.req.writeTarget(&b)
	b.WriteString(" (")
	named := 0
	for _, list := range [][]bindingRef{v.own[:v.nOwn], v.bootstrap[:v.nBootstrap]} {
		for _, r := range list {
			if named == maxExplainNamed {
				break
			}
			if named > 0 {
				b.WriteString("; ")
			}
			b.WriteString(bindingName(r.b, r.subject))
			named++
		}
	}
	if v.applying > named {
		fmt.Fprintf(&b, " and %d more", v.applying-named)
	}
	b.WriteString(")")
	return b.String()
}

// bindingRef is a binding and the subject of it that matched the user.
type bindingRef struct {
	b       *policy.Binding
	subject int
}

// nearVisitor finds the closest rule among the bindings that apply (see
// ExplainDenial), without allocating.
type nearVisitor struct {
	req       request
	best      *rbacv1.PolicyRule
	bestScore int
	bestB     *policy.Binding
	bestS     int
	applying  int
	broken    int
	// The first bindings met: the policy's own, and bootstrap grants, named
	// in that order when no rule is close.
	own, bootstrap   [maxExplainNamed]bindingRef
	nOwn, nBootstrap int
}

func (v *nearVisitor) visit(b *policy.Binding, subject int) bool {
	if b.RoleErr != nil {
		v.broken++
		return true // the evaluation error reports it
	}
	v.applying++
	if isBootstrapBinding(b) {
		if v.nBootstrap < maxExplainNamed {
			v.bootstrap[v.nBootstrap] = bindingRef{b, subject}
			v.nBootstrap++
		}
	} else if v.nOwn < maxExplainNamed {
		v.own[v.nOwn] = bindingRef{b, subject}
		v.nOwn++
	}
	for i := range b.Rules {
		if s := v.req.nearness(&b.Rules[i]); s > v.bestScore {
			v.best, v.bestScore, v.bestB, v.bestS = &b.Rules[i], s, b, subject
		}
	}
	return v.applying < maxExplainBindings
}

// bindingName is the binding as the allow reasons name it:
// `RoleBinding "name/ns" of ClusterRole "view" to User "alice"`.
func bindingName(b *policy.Binding, subject int) string {
	return strings.TrimPrefix(b.Reasons[subject], "RBAC: allowed by ")
}

// isBootstrapBinding reports whether b is one of the BootstrapGrants'
// ClusterRoleBindings.
func isBootstrapBinding(b *policy.Binding) bool {
	if b.Namespace != "" || b.RoleRef.Kind != "ClusterRole" {
		return false
	}
	for i := range bootstrapGrants {
		if b.Name == bootstrapGrants[i].ClusterRoleBinding.Name && b.RoleRef.Name == bootstrapGrants[i].ClusterRole.Name {
			return true
		}
	}
	return false
}

// writeSome writes up to n items quoted, as fmt's %q of a slice does, then
// how many more there are.
func writeSome(b *strings.Builder, items []string, n int) {
	shown := items
	if len(shown) > n {
		shown = shown[:n]
	}
	writeQuoted(b, shown)
	if len(items) > n {
		fmt.Fprintf(b, " and %d more", len(items)-n)
	}
}

// writeQuoted writes list as fmt's %q does: ["a" "b"].
func writeQuoted(b *strings.Builder, list []string) {
	b.WriteByte('[')
	for i, s := range list {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(s))
	}
	b.WriteByte(']')
}

// nearness scores how close rule comes to allowing the request: 0 when the
// rule is not about the request's resource (any of its subresources counts)
// or URL, else 1 plus one per matching facet (API group, resource with
// subresource, verb, name; for a URL: verb).
func (r *request) nearness(rule *rbacv1.PolicyRule) int {
	if !r.resourceRequest {
		if !nonResourceURLMatches(rule, r.path) {
			return 0
		}
		return 1 + b2i(verbMatches(rule, r.verb))
	}
	if !resourceConcerns(rule, r.resource, r.subresource) {
		return 0
	}
	return 1 + b2i(apiGroupMatches(rule, r.apiGroup)) + b2i(resourceMatches(rule, r.resource, r.subresource)) +
		b2i(verbMatches(rule, r.verb)) + b2i(resourceNameMatches(rule, r.name))
}

// writeLacks writes what rule does not match of the request, joined by
// " and ".
func (r *request) writeLacks(b *strings.Builder, rule *rbacv1.PolicyRule) {
	n := 0
	item := func(what string) {
		if n > 0 {
			b.WriteString(" and ")
		}
		n++
		b.WriteString(what)
	}
	if !r.resourceRequest {
		item("verb ")
		b.WriteString(strconv.Quote(r.verb))
		return
	}
	if !apiGroupMatches(rule, r.apiGroup) {
		item("API group ")
		b.WriteString(strconv.Quote(r.apiGroup))
	}
	if !resourceMatches(rule, r.resource, r.subresource) {
		item("resource ")
		b.WriteString(strconv.Quote(r.fullResource()))
	}
	if !verbMatches(rule, r.verb) {
		item("verb ")
		b.WriteString(strconv.Quote(r.verb))
	}
	if !resourceNameMatches(rule, r.name) {
		if r.name == "" {
			item("requests for every name (it lists resourceNames)")
		} else {
			item("resourceName ")
			b.WriteString(strconv.Quote(r.name))
		}
	}
}

// fullResource is "resource" or "resource/subresource".
func (r *request) fullResource() string {
	if r.subresource == "" {
		return r.resource
	}
	return r.resource + "/" + r.subresource
}

// writeTarget writes the request's resource or URL, for messages.
func (r *request) writeTarget(b *strings.Builder) {
	if !r.resourceRequest {
		b.WriteString("URL ")
		b.WriteString(strconv.Quote(r.path))
		return
	}
	b.WriteString(strconv.Quote(resourceString(r.apiGroup, r.fullResource())))
}

// resourceConcerns reports whether rule lists the resource at all: "*", the
// resource, one of its subresources, or "*/sub" for the request's
// subresource.
func resourceConcerns(rule *rbacv1.PolicyRule, resource, subresource string) bool {
	for _, res := range rule.Resources {
		if res == rbacv1.ResourceAll || res == resource ||
			(strings.HasPrefix(res, resource) && len(res) > len(resource) && res[len(resource)] == '/') ||
			(subresource != "" && res == "*/"+subresource) {
			return true
		}
	}
	return false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
