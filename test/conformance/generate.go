package conformance

import (
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Rand is where the generator takes its choices from: a seeded
// *math/rand/v2.Rand, or fuzz input (ByteRand).
type Rand interface {
	// IntN returns a number in [0, n); n > 0.
	IntN(n int) int
}

// ByteRand draws choices from fuzz input, one byte per choice (two when n
// exceeds 256); once the input is used up every choice is 0, so any input
// yields a complete, deterministic case.
type ByteRand struct{ data []byte }

// NewByteRand returns a Rand reading data.
func NewByteRand(data []byte) *ByteRand { return &ByteRand{data: data} }

// IntN implements Rand.
func (b *ByteRand) IntN(n int) int {
	if n <= 1 || len(b.data) == 0 {
		return 0
	}
	v := int(b.data[0])
	b.data = b.data[1:]
	if n > 256 && len(b.data) > 0 {
		v = v<<8 | int(b.data[0])
		b.data = b.data[1:]
	}
	return v % n
}

// The vocabulary of generated policies and requests: what real clusters
// hold (core, apps, batch, RBAC and CRD groups; the usual subresources;
// discovery, health and log paths; users, groups and ServiceAccounts), small
// enough that random rules and random requests meet often.
var (
	resourceVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection",
		"impersonate", "bind", "escalate", "use", "approve"}
	nonResourceVerbs = []string{"get", "post", "put", "delete", "head"}

	apiGroups = []string{"", "apps", "batch", "rbac.authorization.k8s.io", "networking.k8s.io", "authentication.k8s.io", "deputy.dev"}
	resources = map[string][]string{
		"":                          {"pods", "services", "configmaps", "secrets", "serviceaccounts", "namespaces", "nodes", "events"},
		"apps":                      {"deployments", "statefulsets", "daemonsets", "replicasets"},
		"batch":                     {"jobs", "cronjobs"},
		"rbac.authorization.k8s.io": {"roles", "rolebindings", "clusterroles", "clusterrolebindings"},
		"networking.k8s.io":         {"ingresses", "networkpolicies"},
		"authentication.k8s.io":     {"tokenreviews", "serviceaccounts", "users"},
		"deputy.dev":                {"appprojects", "applications"},
	}
	subresources  = []string{"status", "scale", "log", "exec", "token", "proxy", "finalizers", "eviction"}
	objectNames   = []string{"web", "db", "cache", "frontend", "default"}
	requestPaths  = []string{"/", "/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/healthz", "/healthz/etcd", "/livez", "/readyz", "/readyz/ping", "/metrics", "/version", "/version/", "/openapi/v2", "/logs", "/logs/audit.log", "/debug/pprof/profile", "/apis/deputy.dev"}
	ruleURLs      = []string{"*", "/api", "/api*", "/apis", "/apis/*", "/api/*", "/healthz", "/healthz/*", "/livez", "/readyz", "/metrics", "/version", "/version/", "/logs", "/logs*", "/logs/*", "/debug/*", "/ap*", "/openapi/*", "/"}
	userNames     = []string{"alice", "bob", "carol", "dave", "erin", "system:anonymous", "system:kube-scheduler", "system:kube-controller-manager", "system:kube-proxy", "system:node:node-1", "system:volume-scheduler"}
	groupNames    = []string{"dev", "ops", "qa", "auditors", user.AllAuthenticated, user.AllUnauthenticated, serviceaccount.AllServiceAccountsGroup, user.NodesGroup, user.MonitoringGroup, "system:bootstrappers"}
	saNames       = []string{"builder", "deployer", "default", "ci"}
	versions      = []string{"", "*", "v1", "v1beta1", "v2"}
	namespacePool = []string{"team-a", "team-b", "team-c", "team-d"}
	// otherNamespaces are request namespaces where the generator puts no
	// objects (the bootstrap policy has Roles in the first two).
	otherNamespaces = []string{"kube-system", "kube-public", "default", "ghost"}

	// Values kube-apiserver's validation accepts but that only match
	// literally (RBAC is case-sensitive), and, for invalid policies, values
	// it rejects.
	oddVerbs     = []string{"GET", "Get", "*get"}
	oddGroups    = []string{"Apps", "apps/v1", "*.k8s.io"}
	oddResources = []string{"Pods", "pods/", "/status", "*/", "pods/log/extra", "**"}
	oddURLs      = []string{"**", "/api**", "*/api", "/API"}
	oddNames     = []string{"Web", "*", "web*"}
)

// Options shape GeneratePolicy.
type Options struct {
	// Valid restricts the policy to objects kube-apiserver's validation
	// accepts. Without it the generator also writes what only an evaluator
	// fed without validation sees: empty names and verbs, unknown subject
	// and roleRef kinds, ServiceAccount subjects without a namespace in
	// ClusterRoleBindings, Roles referenced by ClusterRoleBindings, rules
	// mixing resources and URLs.
	Valid bool
	// Namespaces is how many of team-a … team-d hold Roles and RoleBindings (1–4).
	Namespaces int
	// Object counts.
	ClusterRoles, Roles, ClusterRoleBindings, RoleBindings int
	// Aggregating is how many extra ClusterRoles carry an aggregationRule
	// (nested, without cycles, some selecting the bootstrap
	// aggregate-to-view label, some labelled aggregate-to-edit).
	Aggregating int
	// KnownClusterRoles name ClusterRoles that exist besides the generated
	// ones (the bootstrap policy); bindings may reference them.
	KnownClusterRoles []string
}

// Policy is an RBAC policy as API objects, in the order an ordered reference
// visits them.
type Policy struct {
	// Namespaces hold the Roles and RoleBindings (to be created first).
	Namespaces          []string
	ClusterRoles        []*rbacv1.ClusterRole
	Roles               []*rbacv1.Role
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
	RoleBindings        []*rbacv1.RoleBinding
}

// Labels of generated aggregation.
const (
	aggregateLabelPrefix = "conformance.deputy.dev/aggregate-to-"
	bootstrapViewLabel   = "rbac.authorization.k8s.io/aggregate-to-view"
	bootstrapEditLabel   = "rbac.authorization.k8s.io/aggregate-to-edit"
)

type gen struct {
	r     Rand
	valid bool
}

func (g *gen) chance(num, den int) bool { return g.r.IntN(den) < num }

func pick[T any](g *gen, xs []T) T { return xs[g.r.IntN(len(xs))] }

// pickOther picks an element of xs different from not (when there is one).
func pickOther(g *gen, xs []string, not string) string {
	for range 4 {
		if x := pick(g, xs); x != not {
			return x
		}
	}
	return not + "-x"
}

// some returns 1..most distinct elements of xs.
func some(g *gen, xs []string, most int) []string {
	n := 1 + g.r.IntN(most)
	var out []string
	for range n {
		x := pick(g, xs)
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// GeneratePolicy returns a random policy drawn from r.
func GeneratePolicy(r Rand, o Options) *Policy {
	g := &gen{r: r, valid: o.Valid}
	p := &Policy{Namespaces: namespacePool[:max(1, min(o.Namespaces, len(namespacePool)))]}

	for i := range o.ClusterRoles {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cr-%d", i)}}
		for range 1 + g.r.IntN(4) {
			cr.Rules = append(cr.Rules, g.rule(false))
		}
		p.ClusterRoles = append(p.ClusterRoles, cr)
	}
	g.aggregation(p, o.Aggregating)

	// Roles: some names exist in several namespaces, so that a RoleBinding
	// naming a Role of another namespace is a near miss.
	for i := range o.Roles {
		ns := pick(g, p.Namespaces)
		name := fmt.Sprintf("role-%d", i)
		if i > 0 && g.chance(1, 4) {
			name = fmt.Sprintf("role-%d", g.r.IntN(i))
		}
		if slices.ContainsFunc(p.Roles, func(r *rbacv1.Role) bool { return r.Namespace == ns && r.Name == name }) {
			name = fmt.Sprintf("role-%d", i)
		}
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		for range 1 + g.r.IntN(3) {
			role.Rules = append(role.Rules, g.rule(true))
		}
		p.Roles = append(p.Roles, role)
	}

	clusterRoleNames := slices.Clone(o.KnownClusterRoles)
	for _, cr := range p.ClusterRoles {
		clusterRoleNames = append(clusterRoleNames, cr.Name)
	}
	for i := range o.ClusterRoleBindings {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("crb-%d", i)}}
		crb.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: g.clusterRoleRef(clusterRoleNames)}
		if !g.valid && g.chance(1, 12) {
			crb.RoleRef.Kind = pick(g, []string{"Role", "Bogus", ""})
			if crb.RoleRef.Kind == "Role" && len(p.Roles) > 0 {
				crb.RoleRef.Name = pick(g, p.Roles).Name
			}
		}
		crb.Subjects = g.subjects("", p.Namespaces)
		p.ClusterRoleBindings = append(p.ClusterRoleBindings, crb)
	}
	for i := range o.RoleBindings {
		ns := pick(g, p.Namespaces)
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rb-%d", i), Namespace: ns}}
		if g.chance(1, 3) {
			rb.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: g.clusterRoleRef(clusterRoleNames)}
		} else {
			rb.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: g.roleRef(p.Roles, ns)}
		}
		if !g.valid && g.chance(1, 12) {
			rb.RoleRef.Kind = pick(g, []string{"Bogus", "role", ""})
		}
		rb.Subjects = g.subjects(ns, p.Namespaces)
		p.RoleBindings = append(p.RoleBindings, rb)
	}
	return p
}

// clusterRoleRef names an existing ClusterRole, or (1 in 6) a missing one.
func (g *gen) clusterRoleRef(names []string) string {
	if len(names) == 0 || g.chance(1, 10) {
		return fmt.Sprintf("missing-cr-%d", g.r.IntN(3))
	}
	return pick(g, names)
}

// roleRef names a Role of ns, a Role that exists only in another namespace,
// or a missing one.
func (g *gen) roleRef(roles []*rbacv1.Role, ns string) string {
	var here, elsewhere []string
	for _, r := range roles {
		if r.Namespace == ns {
			here = append(here, r.Name)
		} else {
			elsewhere = append(elsewhere, r.Name)
		}
	}
	switch n := g.r.IntN(10); {
	case n < 6 && len(here) > 0:
		return pick(g, here)
	case n < 9 && len(elsewhere) > 0:
		return pick(g, elsewhere)
	}
	return fmt.Sprintf("missing-role-%d", g.r.IntN(3))
}

// aggregation appends n ClusterRoles with an aggregationRule and labels
// generated ClusterRoles to be picked up by them. Aggregating role i selects
// the label aggregate-to-agg-i (and sometimes the bootstrap aggregate-to-view
// one) and may carry aggregate-to-agg-j for j < i or aggregate-to-edit, so
// aggregation nests without cycles; some start with rules of their own, which
// the aggregation replaces.
func (g *gen) aggregation(p *Policy, n int) {
	if n == 0 {
		return
	}
	label := func(cr *rbacv1.ClusterRole, key string) {
		if cr.Labels == nil {
			cr.Labels = map[string]string{}
		}
		cr.Labels[key] = "true"
	}
	plain := slices.Clone(p.ClusterRoles)
	for _, cr := range plain {
		switch k := g.r.IntN(2 * n); {
		case k < n:
			label(cr, aggregateLabelPrefix+fmt.Sprintf("agg-%d", k))
		case k == n:
			label(cr, bootstrapEditLabel)
		}
	}
	for i := range n {
		name := fmt.Sprintf("agg-%d", i)
		cr := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
				{MatchLabels: map[string]string{aggregateLabelPrefix + name: "true"}},
			}},
		}
		if g.chance(1, 3) {
			cr.AggregationRule.ClusterRoleSelectors = append(cr.AggregationRule.ClusterRoleSelectors,
				metav1.LabelSelector{MatchLabels: map[string]string{bootstrapViewLabel: "true"}})
		}
		if i > 0 && g.chance(1, 2) {
			label(cr, aggregateLabelPrefix+fmt.Sprintf("agg-%d", g.r.IntN(i)))
		}
		if g.chance(1, 4) {
			label(cr, bootstrapEditLabel)
		}
		if g.chance(1, 3) {
			cr.Rules = []rbacv1.PolicyRule{g.rule(false)}
		}
		p.ClusterRoles = append(p.ClusterRoles, cr)
	}
}

// rule returns a resource rule, or (ClusterRoles only) a non-resource rule.
func (g *gen) rule(namespaced bool) rbacv1.PolicyRule {
	if !namespaced && g.chance(1, 5) {
		r := rbacv1.PolicyRule{Verbs: g.verbs(nonResourceVerbs), NonResourceURLs: some(g, ruleURLs, 3)}
		if g.chance(1, 10) {
			r.NonResourceURLs = append(r.NonResourceURLs, g.odd(oddURLs))
		}
		if !g.valid && g.chance(1, 10) {
			r.Resources = []string{"pods"} // both kinds of rule at once
		}
		return r
	}
	r := rbacv1.PolicyRule{Verbs: g.verbs(resourceVerbs)}
	if g.chance(1, 8) {
		r.APIGroups = []string{rbacv1.APIGroupAll}
	} else {
		r.APIGroups = some(g, apiGroups, 2)
	}
	if g.chance(1, 15) {
		r.APIGroups = append(r.APIGroups, g.odd(oddGroups))
	}
	for range 1 + g.r.IntN(3) {
		r.Resources = append(r.Resources, g.resourceForm(r.APIGroups))
	}
	if g.chance(1, 15) {
		r.Resources = append(r.Resources, g.odd(oddResources))
	}
	if g.chance(1, 4) {
		r.ResourceNames = some(g, objectNames, 2)
		if g.chance(1, 8) {
			r.ResourceNames = append(r.ResourceNames, g.odd(oddNames))
		}
	}
	if !g.valid && g.chance(1, 15) {
		r.NonResourceURLs = []string{pick(g, ruleURLs)}
	}
	if !g.valid && g.chance(1, 20) {
		r.Verbs = nil
	}
	return r
}

// odd returns one of the literal-only values, or (invalid policies) "".
func (g *gen) odd(xs []string) string {
	if !g.valid && g.chance(1, 3) {
		return ""
	}
	return pick(g, xs)
}

func (g *gen) verbs(pool []string) []string {
	if g.chance(1, 6) {
		return []string{rbacv1.VerbAll}
	}
	v := some(g, pool, 3)
	if g.chance(1, 15) {
		v = append(v, g.odd(oddVerbs))
	}
	return v
}

// resourceForm returns one entry of rule.resources: "res", "res/sub",
// "*/sub", "res/*" (literal) or "*".
func (g *gen) resourceForm(groups []string) string {
	group := pick(g, groups)
	pool, ok := resources[group]
	if !ok {
		pool = resources[""]
	}
	res := pick(g, pool)
	switch g.r.IntN(10) {
	case 0, 1:
		return res + "/" + pick(g, subresources)
	case 2:
		return "*/" + pick(g, subresources)
	case 3:
		return res + "/*"
	case 4:
		return rbacv1.ResourceAll
	}
	return res
}

// subjects returns 1–3 subjects of a binding in namespace ns ("" for a
// ClusterRoleBinding).
func (g *gen) subjects(ns string, namespaces []string) []rbacv1.Subject {
	var out []rbacv1.Subject
	for range 1 + g.r.IntN(3) {
		var s rbacv1.Subject
		switch g.r.IntN(10) {
		case 0, 1, 2:
			s = rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: pick(g, userNames)}
			if g.chance(1, 8) {
				// A ServiceAccount written as a User: matches its username.
				s.Name = serviceaccount.MakeUsername(pick(g, namespaces), pick(g, saNames))
			}
		case 3, 4, 5:
			s = rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: pick(g, groupNames)}
			if g.chance(1, 5) {
				s.Name = serviceaccount.MakeNamespaceGroupName(pick(g, namespaces))
			}
		default:
			s = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: pick(g, saNames)}
			switch {
			case ns == "" && (g.valid || g.chance(3, 4)):
				s.Namespace = pick(g, namespaces)
			case ns != "" && g.chance(1, 2):
				// without a namespace: defaults to the RoleBinding's
			case ns != "":
				s.Namespace = pick(g, namespaces)
			}
		}
		if !g.valid && g.chance(1, 15) {
			switch g.r.IntN(3) {
			case 0:
				s.Name = ""
			case 1:
				s.Kind = pick(g, []string{"user", "Bogus", ""})
			case 2:
				s.Name = strings.ToUpper(s.Name)
			}
		}
		out = append(out, s)
	}
	return out
}
