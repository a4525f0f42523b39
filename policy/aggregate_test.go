package policy_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"deputy.dev/deputy/policy"
)

func aggRole(name string, labels map[string]string, rules ...[]rbacv1.PolicyRule) *rbacv1.ClusterRole {
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	for _, r := range rules {
		cr.Rules = append(cr.Rules, r...)
	}
	return cr
}

// aggCombined is a ClusterRole aggregating the roles matched by selectors,
// with (possibly stale) rules of its own.
func aggCombined(name string, labels map[string]string, selectors []metav1.LabelSelector, rules ...[]rbacv1.PolicyRule) *rbacv1.ClusterRole {
	cr := aggRole(name, labels, rules...)
	cr.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: selectors}
	return cr
}

func aggLabels(kv ...string) metav1.LabelSelector {
	s := metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func aggSelectors(s ...metav1.LabelSelector) []metav1.LabelSelector { return s }

func aggRules(verb string, resources ...string) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range resources {
		out = append(out, rbacv1.PolicyRule{Verbs: []string{verb}, APIGroups: []string{""}, Resources: []string{r}})
	}
	return out
}

// aggResult runs AggregateClusterRoles and returns the rules of every role by name.
func aggResult(t *testing.T, roles []*rbacv1.ClusterRole) map[string][]rbacv1.PolicyRule {
	t.Helper()
	before := make([]*rbacv1.ClusterRole, len(roles))
	for i, r := range roles {
		before[i] = r.DeepCopy()
	}
	out, err := policy.AggregateClusterRoles(roles)
	if err != nil {
		t.Fatalf("AggregateClusterRoles: %v", err)
	}
	if diff := cmp.Diff(before, roles); diff != "" {
		t.Errorf("AggregateClusterRoles modified its input (-before +after):\n%s", diff)
	}
	if len(out) != len(roles) {
		t.Fatalf("AggregateClusterRoles returned %d roles, want %d", len(out), len(roles))
	}
	got := map[string][]rbacv1.PolicyRule{}
	for i, r := range out {
		if r.Name != roles[i].Name {
			t.Errorf("role %d is %q, want %q: the order must be kept", i, r.Name, roles[i].Name)
		}
		if r.AggregationRule == nil && r != roles[i] {
			t.Errorf("role %q without an aggregationRule was copied; want the same pointer", r.Name)
		}
		got[r.Name] = r.Rules
	}
	// Without order-rotating cycles (none of the cases here) the result is a
	// fixed point of the controller: one more sync of any role changes nothing.
	for _, cr := range out {
		if cr.AggregationRule == nil {
			continue
		}
		if want := aggSync(t, out, cr); !equality.Semantic.DeepEqual(want, cr.Rules) {
			t.Errorf("result is not a fixed point: a sync of %q changes %v to %v", cr.Name, cr.Rules, want)
		}
	}
	return got
}

// aggSync is syncClusterRole of k8s.io/kubernetes
// pkg/controller/clusterroleaggregation/clusterroleaggregation_controller.go:
// the rules the controller would give cr, given the current roles.
func aggSync(t *testing.T, roles []*rbacv1.ClusterRole, cr *rbacv1.ClusterRole) []rbacv1.PolicyRule {
	t.Helper()
	newPolicyRules := []rbacv1.PolicyRule{}
	for i := range cr.AggregationRule.ClusterRoleSelectors {
		selector, err := metav1.LabelSelectorAsSelector(&cr.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			t.Fatal(err)
		}
		var clusterRoles []*rbacv1.ClusterRole
		for _, r := range roles {
			if selector.Matches(labels.Set(r.Labels)) {
				clusterRoles = append(clusterRoles, r)
			}
		}
		sort.Slice(clusterRoles, func(i, j int) bool { return clusterRoles[i].Name < clusterRoles[j].Name })
		for i := range clusterRoles {
			if clusterRoles[i].Name == cr.Name {
				continue
			}
			for j := range clusterRoles[i].Rules {
				currRule := clusterRoles[i].Rules[j]
				if !slices.ContainsFunc(newPolicyRules, func(r rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(r, currRule) }) {
					newPolicyRules = append(newPolicyRules, currRule)
				}
			}
		}
	}
	return newPolicyRules
}

// TestAggregateClusterRolesUpstream ports TestSyncClusterRole of
// k8s.io/kubernetes pkg/controller/clusterroleaggregation/clusterroleaggregation_controller_test.go.
func TestAggregateClusterRolesUpstream(t *testing.T) {
	hammerRules := []rbacv1.PolicyRule{
		{Verbs: []string{"hammer"}, Resources: []string{"nails"}},
		{Verbs: []string{"hammer"}, Resources: []string{"wedges"}},
	}
	chiselRules := []rbacv1.PolicyRule{{Verbs: []string{"chisel"}, Resources: []string{"mortises"}}}
	sawRules := []rbacv1.PolicyRule{{Verbs: []string{"saw"}, Resources: []string{"boards"}}}
	combined := func(selectors []map[string]string, rules ...[]rbacv1.PolicyRule) *rbacv1.ClusterRole {
		var sels []metav1.LabelSelector
		for _, s := range selectors {
			sels = append(sels, metav1.LabelSelector{MatchLabels: s})
		}
		return aggCombined("combined", nil, sels, rules...)
	}
	concat := func(rules ...[]rbacv1.PolicyRule) []rbacv1.PolicyRule {
		out := []rbacv1.PolicyRule{}
		for _, r := range rules {
			out = append(out, r...)
		}
		return out
	}

	tests := []struct {
		name  string
		roles []*rbacv1.ClusterRole
		want  []rbacv1.PolicyRule
	}{
		{
			name: "dead rules of the aggregated role are removed",
			roles: []*rbacv1.ClusterRole{
				aggRole("hammer", map[string]string{"foo": "bar"}, hammerRules),
				combined([]map[string]string{{"foo": "bar"}}, sawRules),
			},
			want: concat(hammerRules),
		},
		{
			name: "rules are stripped when nothing matches",
			roles: []*rbacv1.ClusterRole{
				aggRole("hammer", map[string]string{"foo": "not-bar"}, hammerRules),
				combined([]map[string]string{{"foo": "bar"}}, hammerRules),
			},
			want: concat(),
		},
		{
			name: "matching roles are selected and put in name order",
			roles: []*rbacv1.ClusterRole{
				aggRole("hammer", map[string]string{"foo": "bar"}, hammerRules),
				aggRole("chisel", map[string]string{"foo": "bar"}, chiselRules),
				aggRole("saw", map[string]string{"foo": "not-bar"}, sawRules),
				combined([]map[string]string{{"foo": "bar"}}),
			},
			want: concat(chiselRules, hammerRules),
		},
		{
			name: "multiple selectors are unioned selector by selector",
			roles: []*rbacv1.ClusterRole{
				aggRole("hammer", map[string]string{"foo": "bar"}, hammerRules),
				aggRole("chisel", map[string]string{"foo": "bar"}, chiselRules),
				aggRole("saw", map[string]string{"foo": "not-bar"}, sawRules),
				combined([]map[string]string{{"foo": "bar"}, {"foo": "not-bar"}}),
			},
			want: concat(chiselRules, hammerRules, sawRules),
		},
		{
			name: "duplicate rules are removed",
			roles: []*rbacv1.ClusterRole{
				aggRole("hammer", map[string]string{"foo": "bar"}, hammerRules),
				aggRole("chisel", map[string]string{"foo": "bar"}, chiselRules),
				aggRole("saw", map[string]string{"foo": "bar"}, sawRules),
				aggRole("other-saw", map[string]string{"foo": "not-bar"}, sawRules),
				combined([]map[string]string{{"foo": "bar"}, {"foo": "not-bar"}}),
			},
			want: concat(chiselRules, hammerRules, sawRules),
		},
		{
			name: "an up-to-date role is left as it is",
			roles: []*rbacv1.ClusterRole{
				aggRole("hammer", map[string]string{"foo": "bar"}, hammerRules),
				combined([]map[string]string{{"foo": "bar"}}, hammerRules),
			},
			want: concat(hammerRules),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := aggResult(t, tc.roles)
			if diff := cmp.Diff(tc.want, got["combined"]); diff != "" {
				t.Errorf("rules of combined (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("an up-to-date role is returned without a copy", func(t *testing.T) {
		roles := []*rbacv1.ClusterRole{
			aggRole("hammer", map[string]string{"foo": "bar"}, hammerRules),
			combined([]map[string]string{{"foo": "bar"}}, hammerRules),
		}
		out, err := policy.AggregateClusterRoles(roles)
		if err != nil {
			t.Fatal(err)
		}
		if out[1] != roles[1] {
			t.Errorf("the aggregated role was copied although its rules are current (upstream: \"no diff skip\")")
		}
	})
}

func TestAggregateClusterRoles(t *testing.T) {
	get := aggRules("get", "pods")
	list := aggRules("list", "pods")
	watch := aggRules("watch", "pods")
	create := aggRules("create", "pods")
	del := aggRules("delete", "pods")

	tests := []struct {
		name  string
		roles []*rbacv1.ClusterRole
		want  map[string][]rbacv1.PolicyRule
	}{
		{
			name:  "no role aggregates: everything is returned as is",
			roles: []*rbacv1.ClusterRole{aggRole("a", nil, get), aggRole("b", nil, list)},
			want:  map[string][]rbacv1.PolicyRule{"a": get, "b": list},
		},
		{
			name: "the union follows ClusterRole name order, not input order, without duplicates",
			roles: []*rbacv1.ClusterRole{
				aggRole("zeta", map[string]string{"agg": "x"}, watch, get),
				aggRole("alpha", map[string]string{"agg": "x"}, get, list),
				aggRole("mid", map[string]string{"agg": "x"}, list, create),
				aggCombined("all", nil, aggSelectors(aggLabels("agg", "x"))),
			},
			want: map[string][]rbacv1.PolicyRule{
				"zeta": aggConcat(watch, get), "alpha": aggConcat(get, list), "mid": aggConcat(list, create),
				"all": aggConcat(get, list, create, watch),
			},
		},
		{
			name: "the aggregating role is excluded from its own selection",
			roles: []*rbacv1.ClusterRole{
				aggRole("viewer", map[string]string{"agg": "x"}, get),
				aggCombined("self", map[string]string{"agg": "x"}, aggSelectors(aggLabels("agg", "x")), del),
			},
			want: map[string][]rbacv1.PolicyRule{"viewer": get, "self": get},
		},
		{
			name: "a role matched by two selectors contributes once",
			roles: []*rbacv1.ClusterRole{
				aggRole("a", map[string]string{"x": "1", "y": "1"}, get),
				aggRole("b", map[string]string{"y": "1"}, list),
				aggCombined("c", nil, aggSelectors(aggLabels("x", "1"), aggLabels("y", "1"))),
			},
			want: map[string][]rbacv1.PolicyRule{"a": get, "b": list, "c": aggConcat(get, list)},
		},
		{
			name: "matchLabels with several labels needs all of them",
			roles: []*rbacv1.ClusterRole{
				aggRole("a", map[string]string{"x": "1", "y": "1"}, get),
				aggRole("b", map[string]string{"x": "1"}, list),
				aggCombined("c", nil, aggSelectors(aggLabels("x", "1", "y", "1"))),
			},
			want: map[string][]rbacv1.PolicyRule{"a": get, "b": list, "c": get},
		},
		{
			name: "matchExpressions In, NotIn, Exists and DoesNotExist select as label selectors do",
			roles: []*rbacv1.ClusterRole{
				aggRole("in", map[string]string{"tier": "web"}, get),
				aggRole("notin", map[string]string{"tier": "db"}, list),
				aggRole("exists", map[string]string{"team": "a"}, watch),
				aggRole("bare", nil, create),
				aggCombined("web", nil, aggSelectors(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "api"}},
				}})),
				aggCombined("not-db", nil, aggSelectors(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"db"}},
					{Key: "aggregated", Operator: metav1.LabelSelectorOpDoesNotExist},
				}})),
				aggCombined("teams", map[string]string{"aggregated": "true"}, aggSelectors(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "team", Operator: metav1.LabelSelectorOpExists},
				}})),
			},
			want: map[string][]rbacv1.PolicyRule{
				"in": get, "notin": list, "exists": watch, "bare": create,
				"web": get,
				// NotIn also matches roles without the label; "teams" is
				// excluded by DoesNotExist, "web" (no labels, rules [get]) and
				// "not-db" itself are not.
				"not-db": aggConcat(create, watch, get),
				"teams":  watch,
			},
		},
		{
			name: "an empty selector selects every other ClusterRole",
			roles: []*rbacv1.ClusterRole{
				aggRole("b", nil, list),
				aggRole("a", map[string]string{"any": "thing"}, get),
				aggCombined("everything", nil, aggSelectors(metav1.LabelSelector{})),
			},
			want: map[string][]rbacv1.PolicyRule{"a": get, "b": list, "everything": aggConcat(get, list)},
		},
		{
			name: "nested aggregation (admin > edit > view, listed top-down) reaches the fixed point",
			roles: []*rbacv1.ClusterRole{
				aggCombined("admin", nil, aggSelectors(aggLabels("aggregate-to-admin", "true"))),
				aggCombined("edit", map[string]string{"aggregate-to-admin": "true"}, aggSelectors(aggLabels("aggregate-to-edit", "true"))),
				aggCombined("view", map[string]string{"aggregate-to-edit": "true"}, aggSelectors(aggLabels("aggregate-to-view", "true"))),
				aggRole("admin-extra", map[string]string{"aggregate-to-admin": "true"}, del),
				aggRole("edit-extra", map[string]string{"aggregate-to-edit": "true"}, create),
				aggRole("view-extra", map[string]string{"aggregate-to-view": "true"}, get, list),
			},
			want: map[string][]rbacv1.PolicyRule{
				"view":        aggConcat(get, list),
				"edit":        aggConcat(create, get, list),
				"admin":       aggConcat(del, create, get, list),
				"admin-extra": del, "edit-extra": create, "view-extra": aggConcat(get, list),
			},
		},
		{
			name: "nested aggregation ignores stale rules of the intermediate roles",
			roles: []*rbacv1.ClusterRole{
				aggCombined("top", nil, aggSelectors(aggLabels("to-top", "true")), watch),
				aggCombined("middle", map[string]string{"to-top": "true"}, aggSelectors(aggLabels("to-middle", "true")), del),
				aggRole("leaf", map[string]string{"to-middle": "true"}, get),
			},
			want: map[string][]rbacv1.PolicyRule{"top": get, "middle": get, "leaf": get},
		},
		{
			name: "two roles selecting each other converge on the same rules",
			roles: []*rbacv1.ClusterRole{
				aggCombined("a", map[string]string{"team": "x"}, aggSelectors(aggLabels("team", "x"))),
				aggCombined("b", map[string]string{"team": "x"}, aggSelectors(aggLabels("team", "x"))),
				aggRole("la", map[string]string{"team": "x"}, get),
				aggRole("lb", map[string]string{"team": "x"}, list),
			},
			want: map[string][]rbacv1.PolicyRule{
				"a": aggConcat(get, list), "b": aggConcat(get, list), "la": get, "lb": list,
			},
		},
		{
			// kube-controller-manager syncs one role at a time, each sync
			// reading the others' current rules; syncing in name order, "a"
			// gets [get] and then "b" gets a's rules plus its own leaf.
			name: "a cycle through crossed selectors converges as name-ordered controller syncs do",
			roles: []*rbacv1.ClusterRole{
				aggCombined("b", map[string]string{"to-a": "true"}, aggSelectors(aggLabels("to-b", "true"))),
				aggCombined("a", map[string]string{"to-b": "true"}, aggSelectors(aggLabels("to-a", "true"))),
				aggRole("la", map[string]string{"to-a": "true"}, get),
				aggRole("lb", map[string]string{"to-b": "true"}, list),
			},
			want: map[string][]rbacv1.PolicyRule{
				"a": aggConcat(get, list), "b": aggConcat(get, list), "la": get, "lb": list,
			},
		},
		{
			// Upstream's result here depends on the controller's sync order
			// (either role's stale rule may survive, or neither); deputy
			// computes the least fixed point, which keeps neither.
			name: "a cycle does not keep the rules written into the aggregating roles",
			roles: []*rbacv1.ClusterRole{
				aggCombined("a", map[string]string{"to-b": "true"}, aggSelectors(aggLabels("to-a", "true")), del),
				aggCombined("b", map[string]string{"to-a": "true"}, aggSelectors(aggLabels("to-b", "true")), watch),
				aggRole("la", map[string]string{"to-a": "true"}, get),
				aggRole("lb", map[string]string{"to-b": "true"}, list),
			},
			want: map[string][]rbacv1.PolicyRule{
				"a": aggConcat(get, list), "b": aggConcat(get, list), "la": get, "lb": list,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := aggResult(t, tc.roles)
			want := map[string][]rbacv1.PolicyRule{}
			for k, v := range tc.want {
				if v == nil {
					v = []rbacv1.PolicyRule{}
				}
				want[k] = v
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("rules by role (-want +got):\n%s", diff)
			}
		})
	}
}

func aggConcat(rules ...[]rbacv1.PolicyRule) []rbacv1.PolicyRule {
	out := []rbacv1.PolicyRule{}
	for _, r := range rules {
		out = append(out, r...)
	}
	return out
}

func TestAggregateClusterRolesInvalidSelector(t *testing.T) {
	tests := []struct {
		name     string
		selector metav1.LabelSelector
		wantErr  string
	}{
		{
			name:     "an unknown operator is an error naming the role",
			selector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}},
			wantErr:  `ClusterRole "broken": aggregationRule.clusterRoleSelectors: "Bogus" is not a valid label selector operator`,
		},
		{
			name:     "In without values is an error naming the role",
			selector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpIn}}},
			wantErr:  `ClusterRole "broken": aggregationRule.clusterRoleSelectors: `,
		},
		{
			name:     "an invalid label key is an error naming the role",
			selector: metav1.LabelSelector{MatchLabels: map[string]string{"not a key": "x"}},
			wantErr:  `ClusterRole "broken": aggregationRule.clusterRoleSelectors: `,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roles := []*rbacv1.ClusterRole{
				aggRole("leaf", nil, aggRules("get", "pods")),
				aggCombined("broken", nil, aggSelectors(tc.selector)),
			}
			out, err := policy.AggregateClusterRoles(roles)
			if err == nil {
				t.Fatalf("AggregateClusterRoles = %v, want an error", out)
			}
			if !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("error = %q, want prefix %q", err, tc.wantErr)
			}
			if _, err := policy.NewRBAC(policy.RBACObjects{ClusterRoles: roles}, true); err == nil || err.Error() != aggErr(policy.AggregateClusterRoles(roles)).Error() {
				t.Errorf("NewRBAC(aggregate) error = %v, want the AggregateClusterRoles error", err)
			}
			if _, err := policy.NewRBAC(policy.RBACObjects{ClusterRoles: roles}, false); err != nil {
				t.Errorf("NewRBAC without aggregation = %v, want no error (the selector is not evaluated)", err)
			}
		})
	}
}

func aggErr(_ any, err error) error { return err }

func TestNewRBACAggregation(t *testing.T) {
	leaf := aggRole("leaf", map[string]string{"agg": "x"}, aggRules("get", "pods"))
	combined := aggCombined("combined", nil, aggSelectors(aggLabels("agg", "x")), aggRules("delete", "pods"))
	objs := policy.RBACObjects{ClusterRoles: []*rbacv1.ClusterRole{combined, leaf}}

	t.Run("file mode computes the aggregated rules", func(t *testing.T) {
		r, err := policy.NewRBAC(objs, true)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(aggRules("get", "pods"), r.ClusterRole("combined").Rules); diff != "" {
			t.Errorf("rules (-want +got):\n%s", diff)
		}
		if combined.Rules[0].Verbs[0] != "delete" {
			t.Errorf("the input ClusterRole was modified")
		}
	})
	t.Run("cluster mode reads the rules as they are", func(t *testing.T) {
		r, err := policy.NewRBAC(objs, false)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(aggRules("delete", "pods"), r.ClusterRole("combined").Rules); diff != "" {
			t.Errorf("rules (-want +got):\n%s", diff)
		}
	})
}

// TestAggregateClusterRolesRandom checks random aggregation graphs (cyclic or
// not, with stale rules in the aggregating roles) against two references:
// the set of rules of every role is the least fixed point of "the union of
// the selected roles' rules", and, when no aggregationRules select each other
// in a cycle, every aggregating role is exactly what one more controller sync
// would give it (aggSync), rule order included.
func TestAggregateClusterRolesRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	const labelKeys = 4
	for iter := range 3000 {
		var roles []*rbacv1.ClusterRole
		for i := range 2 + r.IntN(8) {
			cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r%03d-%d", r.IntN(1000), i), Labels: map[string]string{}}}
			for range r.IntN(3) {
				cr.Labels[fmt.Sprintf("l%d", r.IntN(labelKeys))] = "t"
			}
			for range r.IntN(3) {
				cr.Rules = append(cr.Rules, rbacv1.PolicyRule{Verbs: []string{fmt.Sprint(r.IntN(6))}})
			}
			if r.IntN(3) > 0 {
				cr.AggregationRule = &rbacv1.AggregationRule{}
				for range 1 + r.IntN(2) {
					cr.AggregationRule.ClusterRoleSelectors = append(cr.AggregationRule.ClusterRoleSelectors, aggLabels(fmt.Sprintf("l%d", r.IntN(labelKeys)), "t"))
				}
			}
			roles = append(roles, cr)
		}
		out, err := policy.AggregateClusterRoles(roles)
		if err != nil {
			t.Fatal(err)
		}

		selects := func(a, b *rbacv1.ClusterRole) bool {
			if a.AggregationRule == nil || a.Name == b.Name {
				return false
			}
			for _, sel := range a.AggregationRule.ClusterRoleSelectors {
				for k, v := range sel.MatchLabels {
					if b.Labels[k] == v {
						return true
					}
				}
			}
			return false
		}
		// Least fixed point over sets of verbs.
		sets := map[string]map[string]bool{}
		for _, cr := range roles {
			sets[cr.Name] = map[string]bool{}
			if cr.AggregationRule == nil {
				for _, rule := range cr.Rules {
					sets[cr.Name][rule.Verbs[0]] = true
				}
			}
		}
		for grew := true; grew; {
			grew = false
			for _, a := range roles {
				for _, b := range roles {
					if selects(a, b) {
						for v := range sets[b.Name] {
							if !sets[a.Name][v] {
								sets[a.Name][v], grew = true, true
							}
						}
					}
				}
			}
		}
		for _, cr := range out {
			got := map[string]bool{}
			for _, rule := range cr.Rules {
				got[rule.Verbs[0]] = true
			}
			if cr.AggregationRule != nil && len(got) != len(cr.Rules) {
				t.Fatalf("case %d: %q has duplicate rules: %v", iter, cr.Name, cr.Rules)
			}
			if fmt.Sprint(aggSortedKeys(got)) != fmt.Sprint(aggSortedKeys(sets[cr.Name])) {
				t.Fatalf("case %d: %q has rules %v, want the set %v", iter, cr.Name, aggSortedKeys(got), aggSortedKeys(sets[cr.Name]))
			}
		}

		// Cycle detection over "selects".
		cyclic := false
		state := map[string]int{}
		var visit func(a *rbacv1.ClusterRole)
		visit = func(a *rbacv1.ClusterRole) {
			state[a.Name] = 1
			for _, b := range roles {
				if selects(a, b) {
					switch state[b.Name] {
					case 1:
						cyclic = true
					case 0:
						visit(b)
					}
				}
			}
			state[a.Name] = 2
		}
		for _, cr := range roles {
			if state[cr.Name] == 0 {
				visit(cr)
			}
		}
		if cyclic {
			continue
		}
		for _, cr := range out {
			if cr.AggregationRule == nil {
				continue
			}
			if want := aggSync(t, out, cr); !equality.Semantic.DeepEqual(want, cr.Rules) {
				t.Fatalf("case %d: %q has %v, a controller sync would give %v", iter, cr.Name, cr.Rules, want)
			}
		}
	}
}

func aggSortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
