package policy

import (
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Binding is a RoleBinding or ClusterRoleBinding with its role reference already
// resolved: either Rules is the referenced role's rules, or RoleErr says why the
// reference could not be resolved (the error text kube-apiserver's rule resolver
// would produce, e.g. `clusterrole.rbac.authorization.k8s.io "x" not found`).
//
// Reasons[i] is the exact allow reason kube-apiserver's RBAC authorizer gives
// when subject i of this binding matches (plugin/pkg/auth/authorizer/rbac,
// clusterRoleBindingDescriber / roleBindingDescriber).
type Binding struct {
	// Name and Namespace identify the binding; Namespace is "" for a
	// ClusterRoleBinding.
	Name      string
	Namespace string
	RoleRef   rbacv1.RoleRef
	Subjects  []rbacv1.Subject
	// Rules are the referenced role's rules (after aggregation); nil when RoleErr is set.
	Rules []rbacv1.PolicyRule
	// RoleErr is the resolution error, or nil.
	RoleErr error
	// Reasons holds one allow reason per subject, precomputed so the hot path
	// does not format strings.
	Reasons []string
	// Source is where the binding was loaded from ("file.yaml document 2").
	Source string
}

// bindingRef points at a binding and the subject in it that matched.
type bindingRef struct {
	binding int32
	subject int32
}

// subjectIndex maps a user name (including the
// "system:serviceaccount:<ns>:<name>" form of ServiceAccount subjects) and a
// group name to the bindings that name them, in binding order.
type subjectIndex struct {
	byUser  map[string][]bindingRef
	byGroup map[string][]bindingRef
}

// RBAC is an immutable, subject-indexed view of RBAC objects. Lookups cost
// O(bindings naming the user or one of its groups), independent of the total
// number of bindings, unlike kube-apiserver's resolver which scans every
// ClusterRoleBinding per request.
type RBAC struct {
	roles               map[string]*rbacv1.Role // key "<ns>/<name>"
	clusterRoles        map[string]*rbacv1.ClusterRole
	clusterRoleBindings []Binding
	roleBindings        map[string][]Binding // by namespace
	cluster             subjectIndex
	namespaced          map[string]*subjectIndex
}

// RBACObjects is the input of NewRBAC. Order matters only for the choice of
// reason when several bindings allow a request: bindings are visited in the
// order given (kube-apiserver visits them in its informer cache's order, which
// is unspecified).
type RBACObjects struct {
	Roles               []*rbacv1.Role
	ClusterRoles        []*rbacv1.ClusterRole
	RoleBindings        []*rbacv1.RoleBinding
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
	// Sources maps "<Kind>/<ns>/<name>" to the file location the object came
	// from; optional.
	Sources map[string]string
}

// NewRBAC indexes objects. ClusterRoles carrying an aggregationRule get their
// rules computed as kube-controller-manager's clusterrole-aggregation
// controller does (pkg/controller/clusterroleaggregation): the union, in
// ClusterRole name order and without duplicates, of the rules of every other
// ClusterRole matching one of the selectors, iterated to a fixed point. Set
// aggregate to false when the objects come from a cluster where the controller
// already did this. The input objects are not modified.
//
// Errors: an aggregationRule with an invalid label selector.
func NewRBAC(objs RBACObjects, aggregate bool) (*RBAC, error) {
	r := &RBAC{
		roles:        make(map[string]*rbacv1.Role, len(objs.Roles)),
		clusterRoles: make(map[string]*rbacv1.ClusterRole, len(objs.ClusterRoles)),
		roleBindings: make(map[string][]Binding),
		cluster:      newSubjectIndex(),
		namespaced:   make(map[string]*subjectIndex),
	}
	for _, role := range objs.Roles {
		r.roles[role.Namespace+"/"+role.Name] = role
	}
	clusterRoles := objs.ClusterRoles
	if aggregate {
		var err error
		if clusterRoles, err = AggregateClusterRoles(clusterRoles); err != nil {
			return nil, err
		}
	}
	for _, cr := range clusterRoles {
		r.clusterRoles[cr.Name] = cr
	}

	r.clusterRoleBindings = make([]Binding, 0, len(objs.ClusterRoleBindings))
	for _, crb := range objs.ClusterRoleBindings {
		b := r.newBinding(crb.Name, "", crb.RoleRef, crb.Subjects)
		b.Source = objs.Sources["ClusterRoleBinding//"+crb.Name]
		idx := int32(len(r.clusterRoleBindings))
		r.clusterRoleBindings = append(r.clusterRoleBindings, b)
		r.cluster.add(idx, crb.Subjects, "")
	}
	for _, rb := range objs.RoleBindings {
		b := r.newBinding(rb.Name, rb.Namespace, rb.RoleRef, rb.Subjects)
		b.Source = objs.Sources["RoleBinding/"+rb.Namespace+"/"+rb.Name]
		idx := int32(len(r.roleBindings[rb.Namespace]))
		r.roleBindings[rb.Namespace] = append(r.roleBindings[rb.Namespace], b)
		si := r.namespaced[rb.Namespace]
		if si == nil {
			s := newSubjectIndex()
			si = &s
			r.namespaced[rb.Namespace] = si
		}
		si.add(idx, rb.Subjects, rb.Namespace)
	}
	return r, nil
}

func newSubjectIndex() subjectIndex {
	return subjectIndex{byUser: map[string][]bindingRef{}, byGroup: map[string][]bindingRef{}}
}

// add indexes the subjects of binding idx. namespace is the binding's
// namespace ("" for a ClusterRoleBinding), the default for ServiceAccount
// subjects without one, exactly as appliesToUser in
// pkg/registry/rbac/validation/rule.go does.
func (s *subjectIndex) add(idx int32, subjects []rbacv1.Subject, namespace string) {
	for i, subj := range subjects {
		ref := bindingRef{binding: idx, subject: int32(i)}
		switch subj.Kind {
		case rbacv1.UserKind:
			s.byUser[subj.Name] = appendRef(s.byUser[subj.Name], ref)
		case rbacv1.GroupKind:
			s.byGroup[subj.Name] = appendRef(s.byGroup[subj.Name], ref)
		case rbacv1.ServiceAccountKind:
			ns := namespace
			if subj.Namespace != "" {
				ns = subj.Namespace
			}
			if ns == "" {
				// A ServiceAccount subject without a namespace in a
				// ClusterRoleBinding never matches.
				continue
			}
			// serviceaccount.MatchesUsername is a string comparison with
			// "system:serviceaccount:<ns>:<name>", so indexing by that string is exact.
			name := serviceaccount.MakeUsername(ns, subj.Name)
			s.byUser[name] = appendRef(s.byUser[name], ref)
		}
	}
}

// appendRef keeps one ref per binding: the first matching subject of a binding
// is the one upstream reports.
func appendRef(refs []bindingRef, ref bindingRef) []bindingRef {
	if n := len(refs); n > 0 && refs[n-1].binding == ref.binding {
		return refs
	}
	return append(refs, ref)
}

func (r *RBAC) newBinding(name, namespace string, roleRef rbacv1.RoleRef, subjects []rbacv1.Subject) Binding {
	b := Binding{Name: name, Namespace: namespace, RoleRef: roleRef, Subjects: subjects}
	b.Rules, b.RoleErr = r.roleRules(roleRef, namespace)
	b.Reasons = make([]string, len(subjects))
	for i := range subjects {
		b.Reasons[i] = "RBAC: allowed by " + describeBinding(&b, &subjects[i])
	}
	return b
}

// roleRules is DefaultRuleResolver.GetRoleReferenceRules
// (pkg/registry/rbac/validation/rule.go) over the indexed roles.
func (r *RBAC) roleRules(ref rbacv1.RoleRef, bindingNamespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "Role":
		role, ok := r.roles[bindingNamespace+"/"+ref.Name]
		if !ok {
			return nil, apierrors.NewNotFound(rbacv1.Resource("role"), ref.Name)
		}
		return role.Rules, nil
	case "ClusterRole":
		cr, ok := r.clusterRoles[ref.Name]
		if !ok {
			return nil, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), ref.Name)
		}
		return cr.Rules, nil
	default:
		return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
	}
}

// describeBinding is clusterRoleBindingDescriber.String / roleBindingDescriber.String
// from pkg/registry/rbac/validation/rule.go.
func describeBinding(b *Binding, subj *rbacv1.Subject) string {
	if b.Namespace == "" {
		return fmt.Sprintf("ClusterRoleBinding %q of %s %q to %s", b.Name, b.RoleRef.Kind, b.RoleRef.Name, describeSubject(subj, ""))
	}
	return fmt.Sprintf("RoleBinding %q of %s %q to %s", b.Name+"/"+b.Namespace, b.RoleRef.Kind, b.RoleRef.Name, describeSubject(subj, b.Namespace))
}

func describeSubject(s *rbacv1.Subject, bindingNamespace string) string {
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if len(s.Namespace) > 0 {
			return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+s.Namespace)
		}
		return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+bindingNamespace)
	default:
		return fmt.Sprintf("%s %q", s.Kind, s.Name)
	}
}

// maxMergeLists bounds the number of per-name candidate lists (the user's and
// one per group that has bindings) merged in place on the stack; beyond it the
// candidates are copied and sorted, which is correct, only slower.
const maxMergeLists = 16

// VisitBindings calls visit for every binding that applies to u, in the order
// kube-apiserver's DefaultRuleResolver.VisitRulesFor would meet them for the
// same object order: ClusterRoleBindings first, then, when namespace is not
// empty, the RoleBindings of that namespace. subject is the index of the first
// subject of the binding that matches u. visit returns false to stop.
func (r *RBAC) VisitBindings(u user.Info, namespace string, visit func(b *Binding, subject int) bool) {
	if r == nil {
		return
	}
	if !r.cluster.visit(u, r.clusterRoleBindings, visit) {
		return
	}
	if namespace == "" {
		return
	}
	if si := r.namespaced[namespace]; si != nil {
		si.visit(u, r.roleBindings[namespace], visit)
	}
}

// visit merges the per-name lists (each sorted by binding index, one ref per
// binding) into binding order, keeping the lowest matching subject per
// binding. Returns false when visit asked to stop.
func (s *subjectIndex) visit(u user.Info, bindings []Binding, visit func(b *Binding, subject int) bool) bool {
	var stack [maxMergeLists][]bindingRef
	lists := stack[:0]
	if l := s.byUser[u.GetName()]; len(l) > 0 {
		lists = append(lists, l)
	}
	for _, g := range u.GetGroups() {
		if l := s.byGroup[g]; len(l) > 0 {
			lists = append(lists, l)
		}
	}
	switch {
	case len(lists) == 0:
		return true
	case len(lists) == 1:
		// The common case: nothing to merge, and refs are unique per binding.
		for _, ref := range lists[0] {
			if !visit(&bindings[ref.binding], int(ref.subject)) {
				return false
			}
		}
		return true
	case len(lists) > maxMergeLists:
		return visitSorted(lists, bindings, visit)
	}
	// k-way merge by scanning the list heads: k is small, and this needs
	// neither a copy of the candidates nor a sort.
	last := int32(-1)
	for {
		best := -1
		for i, l := range lists {
			if len(l) > 0 && (best < 0 || refLess(l[0], lists[best][0])) {
				best = i
			}
		}
		if best < 0 {
			return true
		}
		ref := lists[best][0]
		lists[best] = lists[best][1:]
		if ref.binding == last {
			continue // another of the user's names matched a later subject
		}
		last = ref.binding
		if !visit(&bindings[ref.binding], int(ref.subject)) {
			return false
		}
	}
}

// visitSorted is visit for users with bindings through many groups.
func visitSorted(lists [][]bindingRef, bindings []Binding, visit func(b *Binding, subject int) bool) bool {
	var refs []bindingRef
	for _, l := range lists {
		refs = append(refs, l...)
	}
	slices.SortFunc(refs, func(a, b bindingRef) int {
		if refLess(a, b) {
			return -1
		}
		if refLess(b, a) {
			return 1
		}
		return 0
	})
	last := int32(-1)
	for _, ref := range refs {
		if ref.binding == last {
			continue
		}
		last = ref.binding
		if !visit(&bindings[ref.binding], int(ref.subject)) {
			return false
		}
	}
	return true
}

func refLess(a, b bindingRef) bool {
	return a.binding < b.binding || (a.binding == b.binding && a.subject < b.subject)
}

// ClusterRole returns the named ClusterRole (rules after aggregation) or nil.
func (r *RBAC) ClusterRole(name string) *rbacv1.ClusterRole {
	if r == nil {
		return nil
	}
	return r.clusterRoles[name]
}

// Role returns the named Role or nil.
func (r *RBAC) Role(namespace, name string) *rbacv1.Role {
	if r == nil {
		return nil
	}
	return r.roles[namespace+"/"+name]
}

// ClusterRoleBindings returns the indexed ClusterRoleBindings in visit order.
// The slice must not be modified.
func (r *RBAC) ClusterRoleBindings() []Binding {
	if r == nil {
		return nil
	}
	return r.clusterRoleBindings
}

// RoleBindings returns the RoleBindings of namespace in visit order. The
// slice must not be modified.
func (r *RBAC) RoleBindings(namespace string) []Binding {
	if r == nil {
		return nil
	}
	return r.roleBindings[namespace]
}

// Counts reports how many objects of each RBAC kind the index holds.
func (r *RBAC) Counts() (roles, clusterRoles, roleBindings, clusterRoleBindings int) {
	if r == nil {
		return
	}
	for _, bs := range r.roleBindings {
		roleBindings += len(bs)
	}
	return len(r.roles), len(r.clusterRoles), roleBindings, len(r.clusterRoleBindings)
}

// AggregateClusterRoles returns a copy of roles where every ClusterRole with an
// aggregationRule has the rules kube-controller-manager's
// clusterrole-aggregation controller would give it (see NewRBAC). Roles
// without an aggregationRule, and aggregating roles whose rules are already
// current, are returned as is (same pointers); the order of roles is kept.
//
// Each aggregating role gets what the controller's syncClusterRole computes:
// for each selector in turn, the rules of every other ClusterRole it matches,
// in name order, without duplicates. Aggregating roles may select each other
// (admin > edit > view nests three levels), so this is iterated, one role at a
// time in name order, each reading the others' current rules, as successive
// controller syncs do. The iteration starts with the aggregating roles' own
// rules ignored (they are what the controller overwrites), so the rule sets
// only grow and always settle, on the least fixed point: for aggregation
// without cycles the result does not depend on the rules in the files at all,
// and for roles selecting each other in a cycle rules written into the files
// are not kept circulating (the controller's result there depends on its sync
// order and may never settle). Only the order of rules may keep changing in
// such a cycle, which does not change any decision.
//
// Errors: an invalid label selector, naming the ClusterRole.
func AggregateClusterRoles(roles []*rbacv1.ClusterRole) ([]*rbacv1.ClusterRole, error) {
	out := slices.Clone(roles)
	byName := make([]int, len(out)) // positions in out, in name order
	for i := range byName {
		byName[i] = i
	}
	slices.SortStableFunc(byName, func(a, b int) int { return strings.Compare(out[a].Name, out[b].Name) })

	// rules[i] are the current rules of out[i]; aggregating roles start empty.
	rules := make([][]rbacv1.PolicyRule, len(out))
	type aggregating struct {
		pos       int
		selectors []labels.Selector
	}
	var agg []aggregating
	for _, i := range byName {
		cr := out[i]
		if cr.AggregationRule == nil {
			rules[i] = cr.Rules
			continue
		}
		rules[i] = []rbacv1.PolicyRule{}
		a := aggregating{pos: i}
		for _, sel := range cr.AggregationRule.ClusterRoleSelectors {
			selector, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				return nil, fmt.Errorf("ClusterRole %q: aggregationRule.clusterRoleSelectors: %w", cr.Name, err)
			}
			a.selectors = append(a.selectors, selector)
		}
		agg = append(agg, a)
	}
	if len(agg) == 0 {
		return out, nil
	}

	// The rule sets settle after at most (aggregating roles × distinct rules)
	// passes that add a rule; the order of rules then settles too, level by
	// level, except in a cycle, where it may rotate forever (as the
	// controller's would): stop when nothing changes, or when only the order
	// has changed for more passes than aggregation can nest.
	for unchangedSets := 0; unchangedSets <= len(agg); {
		changed, grew := false, false
		for _, a := range agg {
			name := out[a.pos].Name
			next := []rbacv1.PolicyRule{}
			for _, selector := range a.selectors {
				for _, j := range byName {
					other := out[j]
					if other.Name == name || !selector.Matches(labels.Set(other.Labels)) {
						continue
					}
					for _, rule := range rules[j] {
						if !containsRule(next, rule) {
							next = append(next, rule)
						}
					}
				}
			}
			if len(next) != len(rules[a.pos]) {
				grew = true // sets only grow: a new length is a new set
			}
			if !changed && !equality.Semantic.DeepEqual(next, rules[a.pos]) {
				changed = true
			}
			rules[a.pos] = next
		}
		if !changed {
			break
		}
		if grew {
			unchangedSets = 0
		} else {
			unchangedSets++
		}
	}

	for _, a := range agg {
		if cr := out[a.pos]; !equality.Semantic.DeepEqual(rules[a.pos], cr.Rules) {
			cp := cr.DeepCopy()
			cp.Rules = rules[a.pos]
			out[a.pos] = cp
		}
	}
	return out, nil
}

// containsRule is ruleExists of pkg/controller/clusterroleaggregation.
func containsRule(rules []rbacv1.PolicyRule, rule rbacv1.PolicyRule) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(r, rule) })
}

// UnresolvedBindings returns the bindings whose role reference did not
// resolve (RoleErr set), ClusterRoleBindings first, then RoleBindings by
// namespace: they grant nothing until the role exists, which is legal in
// Kubernetes but usually a mistake worth a warning.
func (r *RBAC) UnresolvedBindings() []*Binding {
	if r == nil {
		return nil
	}
	var out []*Binding
	for i := range r.clusterRoleBindings {
		if r.clusterRoleBindings[i].RoleErr != nil {
			out = append(out, &r.clusterRoleBindings[i])
		}
	}
	namespaces := make([]string, 0, len(r.roleBindings))
	for ns := range r.roleBindings {
		namespaces = append(namespaces, ns)
	}
	slices.Sort(namespaces)
	for _, ns := range namespaces {
		for i := range r.roleBindings[ns] {
			if r.roleBindings[ns][i].RoleErr != nil {
				out = append(out, &r.roleBindings[ns][i])
			}
		}
	}
	return out
}

// BindingNamespaces returns the namespaces that hold RoleBindings, sorted.
func (r *RBAC) BindingNamespaces() []string {
	if r == nil {
		return nil
	}
	namespaces := make([]string, 0, len(r.roleBindings))
	for ns := range r.roleBindings {
		namespaces = append(namespaces, ns)
	}
	slices.Sort(namespaces)
	return namespaces
}
