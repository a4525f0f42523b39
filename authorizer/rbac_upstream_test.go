package authorizer_test

// The tests in this file port the test tables of k8s.io/kubernetes v1.37.2
// (Apache License 2.0, Copyright The Kubernetes Authors) that cover the RBAC
// authorizer's semantics, and check deputy's evaluator against a port of the
// upstream evaluator itself (upstreamRBAC below), since k8s.io/kubernetes is
// not a dependency of this module.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
)

// upstreamNewRule is newRule of plugin/pkg/auth/authorizer/rbac/rbac_test.go.
func upstreamNewRule(verbs, apiGroups, resources, nonResourceURLs string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{
		Verbs:           strings.Split(verbs, ","),
		APIGroups:       strings.Split(apiGroups, ","),
		Resources:       strings.Split(resources, ","),
		NonResourceURLs: strings.Split(nonResourceURLs, ","),
	}
}

// upstreamSubjects parses "Kind:name" subjects as newClusterRoleBinding /
// newRoleBinding of plugin/pkg/auth/authorizer/rbac/rbac_test.go.
func upstreamSubjects(subjects ...string) []rbacv1.Subject {
	out := make([]rbacv1.Subject, len(subjects))
	for i, s := range subjects {
		kind, name, _ := strings.Cut(s, ":")
		out[i] = rbacv1.Subject{Kind: kind, Name: name}
		if kind != rbacv1.ServiceAccountKind {
			out[i].APIGroup = rbacv1.GroupName
		}
	}
	return out
}

// upstreamAttrs is defaultAttributes of plugin/pkg/auth/authorizer/rbac/rbac_test.go:
// groups are comma-separated (so "" is the one group ""), resource requests.
func upstreamAttrs(userName, groups, verb, resource, subresource, namespace, apiGroup string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: userName, Groups: strings.Split(groups, ",")},
		Verb: verb, Resource: resource, Subresource: subresource, Namespace: namespace, APIGroup: apiGroup,
		ResourceRequest: true,
	}
}

// TestUpstreamAuthorizer ports TestAuthorizer of
// plugin/pkg/auth/authorizer/rbac/rbac_test.go (bindings there have no names).
func TestUpstreamAuthorizer(t *testing.T) {
	crb := func(role string, subjects ...string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: upstreamSubjects(subjects...)}
	}
	rb := func(ns, role string, subjects ...string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: upstreamSubjects(subjects...)}
	}
	cr := func(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	}
	nonResource := func(name string, groups []string, verb, path string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: &user.DefaultInfo{Name: name, Groups: groups}, Verb: verb, Path: path}
	}
	tests := []struct {
		name       string
		objs       policy.RBACObjects
		shouldPass []authorizer.AttributesRecord
		shouldFail []authorizer.AttributesRecord
	}{
		{
			name: "a RoleBinding to an all-powerful ClusterRole",
			objs: policy.RBACObjects{
				ClusterRoles: []*rbacv1.ClusterRole{cr("admin", upstreamNewRule("*", "*", "*", "*"))},
				RoleBindings: []*rbacv1.RoleBinding{rb("ns1", "admin", "User:admin", "Group:admins")},
			},
			shouldPass: []authorizer.AttributesRecord{
				upstreamAttrs("admin", "", "get", "Pods", "", "ns1", ""),
				upstreamAttrs("admin", "", "watch", "Pods", "", "ns1", ""),
				upstreamAttrs("admin", "group1", "watch", "Foobar", "", "ns1", ""),
				upstreamAttrs("joe", "admins", "watch", "Foobar", "", "ns1", ""),
				upstreamAttrs("joe", "group1,admins", "watch", "Foobar", "", "ns1", ""),
			},
			shouldFail: []authorizer.AttributesRecord{
				upstreamAttrs("admin", "", "GET", "Pods", "", "ns2", ""),
				upstreamAttrs("admin", "", "GET", "Nodes", "", "", ""),
				upstreamAttrs("admin", "admins", "GET", "Pods", "", "ns2", ""),
				upstreamAttrs("admin", "admins", "GET", "Nodes", "", "", ""),
			},
		},
		{
			name: "non-resource URLs",
			objs: policy.RBACObjects{
				ClusterRoles: []*rbacv1.ClusterRole{
					cr("non-resource-url-getter", upstreamNewRule("get", "", "", "/apis")),
					cr("non-resource-url", upstreamNewRule("*", "", "", "/apis")),
					cr("non-resource-url-prefix", upstreamNewRule("get", "", "", "/apis/*")),
				},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
					crb("non-resource-url-getter", "User:foo", "Group:bar"),
					crb("non-resource-url", "User:admin", "Group:admin"),
					crb("non-resource-url-prefix", "User:prefixed", "Group:prefixed"),
				},
			},
			shouldPass: []authorizer.AttributesRecord{
				nonResource("foo", nil, "get", "/apis"),
				nonResource("", []string{"bar"}, "get", "/apis"),
				nonResource("admin", nil, "get", "/apis"),
				nonResource("", []string{"admin"}, "get", "/apis"),
				nonResource("admin", nil, "watch", "/apis"),
				nonResource("", []string{"admin"}, "watch", "/apis"),
				nonResource("prefixed", nil, "get", "/apis/v1"),
				nonResource("", []string{"prefixed"}, "get", "/apis/v1"),
				nonResource("prefixed", nil, "get", "/apis/v1/foobar"),
				nonResource("", []string{"prefixed"}, "get", "/apis/v1/foorbar"),
			},
			shouldFail: []authorizer.AttributesRecord{
				// wrong verb
				nonResource("foo", nil, "watch", "/apis"),
				nonResource("", []string{"bar"}, "watch", "/apis"),
				// wrong path
				nonResource("foo", nil, "get", "/api/v1"),
				nonResource("", []string{"bar"}, "get", "/api/v1"),
				nonResource("admin", nil, "get", "/api/v1"),
				nonResource("", []string{"admin"}, "get", "/api/v1"),
				// not covered by prefix
				nonResource("prefixed", nil, "get", "/api/v1"),
				nonResource("", []string{"prefixed"}, "get", "/api/v1"),
			},
		},
		{
			name: "a bare resource does not cover its subresources",
			objs: policy.RBACObjects{
				ClusterRoles: []*rbacv1.ClusterRole{cr("admin", upstreamNewRule("*", "*", "pods", "*"))},
				RoleBindings: []*rbacv1.RoleBinding{rb("ns1", "admin", "User:admin", "Group:admins")},
			},
			shouldPass: []authorizer.AttributesRecord{upstreamAttrs("admin", "", "get", "pods", "", "ns1", "")},
			shouldFail: []authorizer.AttributesRecord{upstreamAttrs("admin", "", "get", "pods", "status", "ns1", "")},
		},
		{
			name: "res/sub and */sub",
			objs: policy.RBACObjects{
				ClusterRoles: []*rbacv1.ClusterRole{cr("admin",
					upstreamNewRule("*", "*", "pods/status", "*"),
					upstreamNewRule("*", "*", "*/scale", "*"),
				)},
				RoleBindings: []*rbacv1.RoleBinding{rb("ns1", "admin", "User:admin", "Group:admins")},
			},
			shouldPass: []authorizer.AttributesRecord{
				upstreamAttrs("admin", "", "get", "pods", "status", "ns1", ""),
				upstreamAttrs("admin", "", "get", "pods", "scale", "ns1", ""),
				upstreamAttrs("admin", "", "get", "deployments", "scale", "ns1", ""),
				upstreamAttrs("admin", "", "get", "anything", "scale", "ns1", ""),
			},
			shouldFail: []authorizer.AttributesRecord{upstreamAttrs("admin", "", "get", "pods", "", "ns1", "")},
		},
	}
	for _, tc := range tests {
		a := rbacAuthorizer(t, tc.objs)
		for _, attrs := range tc.shouldPass {
			t.Run(fmt.Sprintf("%s: %s %s/%s as %s %v in %q is allowed", tc.name, attrs.Verb, attrs.Resource+attrs.Path, attrs.Subresource, attrs.User.GetName(), attrs.User.GetGroups(), attrs.Namespace), func(t *testing.T) {
				if d, reason, err := a.Authorize(t.Context(), attrs); d != authorizer.DecisionAllow || err != nil {
					t.Errorf("Authorize = %s, %q, %v; want Allow", decisionName(d), reason, err)
				}
			})
		}
		for _, attrs := range tc.shouldFail {
			t.Run(fmt.Sprintf("%s: %s %s/%s as %s %v in %q is not allowed", tc.name, attrs.Verb, attrs.Resource+attrs.Path, attrs.Subresource, attrs.User.GetName(), attrs.User.GetGroups(), attrs.Namespace), func(t *testing.T) {
				if d, reason, err := a.Authorize(t.Context(), attrs); d != authorizer.DecisionNoOpinion || reason != "" || err != nil {
					t.Errorf("Authorize = %s, %q, %v; want NoOpinion, \"\", nil", decisionName(d), reason, err)
				}
			})
		}
	}
}

// TestUpstreamRuleMatches ports TestRuleMatches of
// plugin/pkg/auth/authorizer/rbac/rbac_test.go.
func TestUpstreamRuleMatches(t *testing.T) {
	res := func(verb, group, resource string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{ResourceRequest: true, Verb: verb, APIGroup: group, Resource: resource}
	}
	sub := func(verb, group, resource, subresource string) authorizer.AttributesRecord {
		a := res(verb, group, resource)
		a.Subresource = subresource
		return a
	}
	url := func(verb, path string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{Verb: verb, Path: path}
	}
	type requestToTest struct {
		request  authorizer.AttributesRecord
		expected bool
	}
	tests := []struct {
		name               string
		rule               rbacv1.PolicyRule
		requestsToExpected []requestToTest
	}{
		{
			name: "star verb, exact match other",
			rule: rbacRule("*").Groups("group1").Resources("resource1").Rule(),
			requestsToExpected: []requestToTest{
				{res("verb1", "group1", "resource1"), true},
				{res("verb1", "group2", "resource1"), false},
				{res("verb1", "group1", "resource2"), false},
				{res("verb1", "group2", "resource2"), false},
				{res("verb2", "group1", "resource1"), true},
				{res("verb2", "group2", "resource1"), false},
				{res("verb2", "group1", "resource2"), false},
				{res("verb2", "group2", "resource2"), false},
			},
		},
		{
			name: "star group, exact match other",
			rule: rbacRule("verb1").Groups("*").Resources("resource1").Rule(),
			requestsToExpected: []requestToTest{
				{res("verb1", "group1", "resource1"), true},
				{res("verb1", "group2", "resource1"), true},
				{res("verb1", "group1", "resource2"), false},
				{res("verb1", "group2", "resource2"), false},
				{res("verb2", "group1", "resource1"), false},
				{res("verb2", "group2", "resource1"), false},
				{res("verb2", "group1", "resource2"), false},
				{res("verb2", "group2", "resource2"), false},
			},
		},
		{
			name: "star resource, exact match other",
			rule: rbacRule("verb1").Groups("group1").Resources("*").Rule(),
			requestsToExpected: []requestToTest{
				{res("verb1", "group1", "resource1"), true},
				{res("verb1", "group2", "resource1"), false},
				{res("verb1", "group1", "resource2"), true},
				{res("verb1", "group2", "resource2"), false},
				{res("verb2", "group1", "resource1"), false},
				{res("verb2", "group2", "resource1"), false},
				{res("verb2", "group1", "resource2"), false},
				{res("verb2", "group2", "resource2"), false},
			},
		},
		{
			name: "tuple expansion",
			rule: rbacRule("verb1", "verb2").Groups("group1", "group2").Resources("resource1", "resource2").Rule(),
			requestsToExpected: []requestToTest{
				{res("verb1", "group1", "resource1"), true},
				{res("verb1", "group2", "resource1"), true},
				{res("verb1", "group1", "resource2"), true},
				{res("verb1", "group2", "resource2"), true},
				{res("verb2", "group1", "resource1"), true},
				{res("verb2", "group2", "resource1"), true},
				{res("verb2", "group1", "resource2"), true},
				{res("verb2", "group2", "resource2"), true},
			},
		},
		{
			name: "subresource expansion",
			rule: rbacRule("*").Groups("*").Resources("resource1/subresource1").Rule(),
			requestsToExpected: []requestToTest{
				{sub("verb1", "group1", "resource1", "subresource1"), true},
				{sub("verb1", "group2", "resource1", "subresource2"), false},
				{sub("verb1", "group1", "resource2", "subresource1"), false},
				{sub("verb1", "group2", "resource2", "subresource1"), false},
				{sub("verb2", "group1", "resource1", "subresource1"), true},
				{sub("verb2", "group2", "resource1", "subresource2"), false},
				{sub("verb2", "group1", "resource2", "subresource1"), false},
				{sub("verb2", "group2", "resource2", "subresource1"), false},
			},
		},
		{
			name: "star nonresource, exact match other",
			rule: rbacRule("verb1").URLs("*").Rule(),
			requestsToExpected: []requestToTest{
				{url("verb1", "/foo"), true},
				{url("verb1", "/foo/bar"), true},
				{url("verb1", "/foo/baz"), true},
				{url("verb1", "/foo/bar/one"), true},
				{url("verb1", "/foo/baz/one"), true},
				{url("verb2", "/foo"), false},
				{url("verb2", "/foo/bar"), false},
				{url("verb2", "/foo/baz"), false},
				{url("verb2", "/foo/bar/one"), false},
				{url("verb2", "/foo/baz/one"), false},
			},
		},
		{
			name: "star nonresource subpath",
			rule: rbacRule("verb1").URLs("/foo/*").Rule(),
			requestsToExpected: []requestToTest{
				{url("verb1", "/foo"), false},
				{url("verb1", "/foo/bar"), true},
				{url("verb1", "/foo/baz"), true},
				{url("verb1", "/foo/bar/one"), true},
				{url("verb1", "/foo/baz/one"), true},
				{url("verb1", "/notfoo"), false},
				{url("verb1", "/notfoo/bar"), false},
				{url("verb1", "/notfoo/baz"), false},
				{url("verb1", "/notfoo/bar/one"), false},
				{url("verb1", "/notfoo/baz/one"), false},
			},
		},
		{
			name: "star verb, exact nonresource",
			rule: rbacRule("*").URLs("/foo", "/foo/bar/one").Rule(),
			requestsToExpected: []requestToTest{
				{url("verb1", "/foo"), true},
				{url("verb1", "/foo/bar"), false},
				{url("verb1", "/foo/baz"), false},
				{url("verb1", "/foo/bar/one"), true},
				{url("verb1", "/foo/baz/one"), false},
				{url("verb2", "/foo"), true},
				{url("verb2", "/foo/bar"), false},
				{url("verb2", "/foo/baz"), false},
				{url("verb2", "/foo/bar/one"), true},
				{url("verb2", "/foo/baz/one"), false},
			},
		},
	}
	for _, tc := range tests {
		for _, r := range tc.requestsToExpected {
			t.Run(fmt.Sprintf("%s: %s %s%s/%s in %q is %v", tc.name, r.request.Verb, r.request.Resource, r.request.Path, r.request.Subresource, r.request.APIGroup, r.expected), func(t *testing.T) {
				if got := deputyauthz.RuleAllows(r.request, &tc.rule); got != r.expected {
					t.Errorf("RuleAllows = %v, want %v", got, r.expected)
				}
				if got := upstreamRuleAllows(r.request, &tc.rule); got != r.expected {
					t.Errorf("the upstream port disagrees with upstream's own table: %v", got)
				}
			})
		}
	}
}

// TestUpstreamResourceMatches ports TestResourceMatches of
// pkg/apis/rbac/helpers_test.go through RuleAllows (the combined resource
// there is resource + "/" + subresource).
func TestUpstreamResourceMatches(t *testing.T) {
	tests := []struct {
		name                      string
		ruleResources             []string
		combinedRequestedResource string
		requestedSubresource      string
		expected                  bool
	}{
		{name: "all matches 01", ruleResources: []string{"*"}, combinedRequestedResource: "foo", expected: true},
		{name: "checks all rules", ruleResources: []string{"doesn't match", "*"}, combinedRequestedResource: "foo", expected: true},
		{name: "matches exact rule", ruleResources: []string{"foo/bar"}, combinedRequestedResource: "foo/bar", requestedSubresource: "bar", expected: true},
		{name: "matches exact rule 02", ruleResources: []string{"foo/bar"}, combinedRequestedResource: "foo", expected: false},
		{name: "matches subresource", ruleResources: []string{"*/scale"}, combinedRequestedResource: "foo/scale", requestedSubresource: "scale", expected: true},
		{name: "doesn't match partial subresource hit", ruleResources: []string{"foo/bar", "*/other"}, combinedRequestedResource: "foo/other/segment", requestedSubresource: "other/segment", expected: false},
		{name: "matches subresource with multiple slashes", ruleResources: []string{"*/other/segment"}, combinedRequestedResource: "foo/other/segment", requestedSubresource: "other/segment", expected: true},
		{name: "doesn't fail on empty", ruleResources: []string{""}, combinedRequestedResource: "foo/other/segment", requestedSubresource: "other/segment", expected: false},
		{name: "doesn't fail on slash", ruleResources: []string{"/"}, combinedRequestedResource: "foo/other/segment", requestedSubresource: "other/segment", expected: false},
		{name: "doesn't fail on missing subresource", ruleResources: []string{"*/"}, combinedRequestedResource: "foo/other/segment", requestedSubresource: "other/segment", expected: false},
		{name: "doesn't match on not star", ruleResources: []string{"*something/other/segment"}, combinedRequestedResource: "foo/other/segment", requestedSubresource: "other/segment", expected: false},
		{name: "doesn't match on something else", ruleResources: []string{"something/other/segment"}, combinedRequestedResource: "foo/other/segment", requestedSubresource: "other/segment", expected: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resource := strings.TrimSuffix(tc.combinedRequestedResource, "/"+tc.requestedSubresource)
			attrs := authorizer.AttributesRecord{ResourceRequest: true, Verb: "get", APIGroup: "", Resource: resource, Subresource: tc.requestedSubresource}
			rule := rbacRule("get").Groups("").Resources(tc.ruleResources...).Rule()
			if got := deputyauthz.RuleAllows(attrs, &rule); got != tc.expected {
				t.Errorf("RuleAllows = %v, want %v", got, tc.expected)
			}
		})
	}
}

// TestUpstreamDefaultRuleResolver ports TestDefaultRuleResolver of
// pkg/registry/rbac/validation/rule_test.go: the rules that apply to a user
// in a namespace, here collected from the bindings VisitBindings visits.
func TestUpstreamDefaultRuleResolver(t *testing.T) {
	ruleReadPods := rbacv1.PolicyRule{Verbs: []string{"GET", "WATCH"}, APIGroups: []string{"v1"}, Resources: []string{"pods"}}
	ruleReadServices := rbacv1.PolicyRule{Verbs: []string{"GET", "WATCH"}, APIGroups: []string{"v1"}, Resources: []string{"services"}}
	ruleWriteNodes := rbacv1.PolicyRule{Verbs: []string{"PUT", "CREATE", "UPDATE"}, APIGroups: []string{"v1"}, Resources: []string{"nodes"}}
	ruleAdmin := rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}

	r, err := policy.NewRBAC(policy.RBACObjects{
		Roles: []*rbacv1.Role{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "namespace1", Name: "readthings"},
			Rules:      []rbacv1.PolicyRule{ruleReadPods, ruleReadServices},
		}},
		ClusterRoles: []*rbacv1.ClusterRole{
			{ObjectMeta: metav1.ObjectMeta{Name: "cluster-admin"}, Rules: []rbacv1.PolicyRule{ruleAdmin}},
			{ObjectMeta: metav1.ObjectMeta{Name: "write-nodes"}, Rules: []rbacv1.PolicyRule{ruleWriteNodes}},
		},
		RoleBindings: []*rbacv1.RoleBinding{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "namespace1"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "foobar"}, {Kind: rbacv1.GroupKind, Name: "group1"}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "readthings"},
		}},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{{
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "admin"}, {Kind: rbacv1.GroupKind, Name: "admin"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		}},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name           string
		user           user.Info
		namespace      string
		effectiveRules []rbacv1.PolicyRule
	}{
		{"a RoleBinding's rules apply in its namespace", &user.DefaultInfo{Name: "foobar"}, "namespace1", []rbacv1.PolicyRule{ruleReadPods, ruleReadServices}},
		{"a RoleBinding's rules do not apply in another namespace", &user.DefaultInfo{Name: "foobar"}, "namespace2", nil},
		{"without a namespace only cluster rules apply", &user.DefaultInfo{Name: "foobar", Groups: []string{"admin"}}, "", []rbacv1.PolicyRule{ruleAdmin}},
		{"an empty user has no rules", &user.DefaultInfo{}, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rules []rbacv1.PolicyRule
			r.VisitBindings(tc.user, tc.namespace, func(b *policy.Binding, _ int) bool {
				rules = append(rules, b.Rules...)
				return true
			})
			key := func(p rbacv1.PolicyRule) string { return p.String() }
			sort.Slice(rules, func(i, j int) bool { return key(rules[i]) < key(rules[j]) })
			want := slices.Clone(tc.effectiveRules)
			sort.Slice(want, func(i, j int) bool { return key(want[i]) < key(want[j]) })
			if fmt.Sprint(rules) != fmt.Sprint(want) {
				t.Errorf("rules = %v, want %v", rules, want)
			}
		})
	}
}

// TestUpstreamAppliesTo ports TestAppliesTo of
// pkg/registry/rbac/validation/rule_test.go: whether a binding's subjects
// apply to a user and the index of the first that does. The namespace there
// is the binding's: a RoleBinding in it, or a ClusterRoleBinding when empty.
func TestUpstreamAppliesTo(t *testing.T) {
	tests := []struct {
		subjects  []rbacv1.Subject
		user      user.Info
		namespace string
		appliesTo bool
		index     int
		testCase  string
	}{
		{
			subjects:  []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "foobar"}},
			user:      &user.DefaultInfo{Name: "foobar"},
			appliesTo: true, index: 0,
			testCase: "single subject that matches username",
		},
		{
			subjects:  []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "barfoo"}, {Kind: rbacv1.UserKind, Name: "foobar"}},
			user:      &user.DefaultInfo{Name: "foobar"},
			appliesTo: true, index: 1,
			testCase: "multiple subjects, one that matches username",
		},
		{
			subjects:  []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "barfoo"}, {Kind: rbacv1.UserKind, Name: "foobar"}},
			user:      &user.DefaultInfo{Name: "zimzam"},
			appliesTo: false,
			testCase:  "multiple subjects, none that match username",
		},
		{
			subjects:  []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "barfoo"}, {Kind: rbacv1.GroupKind, Name: "foobar"}},
			user:      &user.DefaultInfo{Name: "zimzam", Groups: []string{"foobar"}},
			appliesTo: true, index: 1,
			testCase: "multiple subjects, one that match group",
		},
		{
			subjects:  []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "barfoo"}, {Kind: rbacv1.GroupKind, Name: "foobar"}},
			user:      &user.DefaultInfo{Name: "zimzam", Groups: []string{"foobar"}},
			namespace: "namespace1",
			appliesTo: true, index: 1,
			testCase: "multiple subjects, one that match group, should ignore namespace",
		},
		{
			subjects: []rbacv1.Subject{
				{Kind: rbacv1.UserKind, Name: "barfoo"},
				{Kind: rbacv1.GroupKind, Name: "foobar"},
				{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "default"},
			},
			user:      &user.DefaultInfo{Name: "system:serviceaccount:kube-system:default"},
			namespace: "default",
			appliesTo: true, index: 2,
			testCase: "multiple subjects with a service account that matches",
		},
		{
			subjects:  []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "*"}},
			user:      &user.DefaultInfo{Name: "foobar"},
			namespace: "default",
			appliesTo: false,
			testCase:  "* user subject name doesn't match all users",
		},
		{
			subjects:  []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: user.AllAuthenticated}, {Kind: rbacv1.GroupKind, Name: user.AllUnauthenticated}},
			user:      &user.DefaultInfo{Name: "foobar", Groups: []string{user.AllAuthenticated}},
			namespace: "default",
			appliesTo: true, index: 0,
			testCase: "binding to all authenticated and unauthenticated subjects matches authenticated user",
		},
		{
			subjects:  []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: user.AllAuthenticated}, {Kind: rbacv1.GroupKind, Name: user.AllUnauthenticated}},
			user:      &user.DefaultInfo{Name: "system:anonymous", Groups: []string{user.AllUnauthenticated}},
			namespace: "default",
			appliesTo: true, index: 1,
			testCase: "binding to all authenticated and unauthenticated subjects matches anonymous user",
		},
	}
	for _, tc := range tests {
		t.Run(tc.testCase, func(t *testing.T) {
			objs := policy.RBACObjects{ClusterRoles: []*rbacv1.ClusterRole{{ObjectMeta: metav1.ObjectMeta{Name: "r"}}}}
			if tc.namespace == "" {
				objs.ClusterRoleBindings = []*rbacv1.ClusterRoleBinding{{ObjectMeta: metav1.ObjectMeta{Name: "b"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "r"}, Subjects: tc.subjects}}
			} else {
				objs.RoleBindings = []*rbacv1.RoleBinding{{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: tc.namespace}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "r"}, Subjects: tc.subjects}}
			}
			r, err := policy.NewRBAC(objs, false)
			if err != nil {
				t.Fatal(err)
			}
			applies, index := false, 0
			r.VisitBindings(tc.user, tc.namespace, func(_ *policy.Binding, subject int) bool {
				applies, index = true, subject
				return false
			})
			if applies != tc.appliesTo || index != tc.index {
				t.Errorf("applies, index = %v, %d; want %v, %d", applies, index, tc.appliesTo, tc.index)
			}
		})
	}
}

// upstreamRBAC is a port of kube-apiserver's RBAC authorizer over object
// lists in informer order: RBACAuthorizer.Authorize and authorizingVisitor
// (plugin/pkg/auth/authorizer/rbac/rbac.go), DefaultRuleResolver.VisitRulesFor,
// GetRoleReferenceRules, appliesTo, appliesToUser, describeSubject and the
// describers (pkg/registry/rbac/validation/rule.go), with the informer
// listers' NotFound errors. Only the data access is adapted.
type upstreamRBAC struct {
	roles               []*rbacv1.Role
	roleBindings        []*rbacv1.RoleBinding
	clusterRoles        []*rbacv1.ClusterRole
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
}

func (r *upstreamRBAC) Authorize(requestAttributes authorizer.Attributes) (authorizer.Decision, string, error) {
	v := &upstreamVisitor{requestAttributes: requestAttributes}
	r.visitRulesFor(requestAttributes.GetUser(), requestAttributes.GetNamespace(), v.visit)
	if v.allowed {
		return authorizer.DecisionAllow, v.reason, nil
	}
	reason := ""
	if len(v.errors) > 0 {
		reason = fmt.Sprintf("RBAC: %v", utilerrors.NewAggregate(v.errors))
	}
	return authorizer.DecisionNoOpinion, reason, nil
}

type upstreamVisitor struct {
	requestAttributes authorizer.Attributes
	allowed           bool
	reason            string
	errors            []error
}

func (v *upstreamVisitor) visit(source fmt.Stringer, rule *rbacv1.PolicyRule, err error) bool {
	if rule != nil && upstreamRuleAllows(v.requestAttributes, rule) {
		v.allowed = true
		v.reason = fmt.Sprintf("RBAC: allowed by %s", source.String())
		return false
	}
	if err != nil {
		v.errors = append(v.errors, err)
	}
	return true
}

func (r *upstreamRBAC) visitRulesFor(user user.Info, namespace string, visitor func(source fmt.Stringer, rule *rbacv1.PolicyRule, err error) bool) {
	sourceDescriber := &upstreamCRBDescriber{}
	for _, clusterRoleBinding := range r.clusterRoleBindings {
		subjectIndex, applies := upstreamAppliesTo(user, clusterRoleBinding.Subjects, "")
		if !applies {
			continue
		}
		rules, err := r.getRoleReferenceRules(clusterRoleBinding.RoleRef, "")
		if err != nil {
			if !visitor(nil, nil, err) {
				return
			}
			continue
		}
		sourceDescriber.binding = clusterRoleBinding
		sourceDescriber.subject = &clusterRoleBinding.Subjects[subjectIndex]
		for i := range rules {
			if !visitor(sourceDescriber, &rules[i], nil) {
				return
			}
		}
	}
	if len(namespace) > 0 {
		sourceDescriber := &upstreamRBDescriber{}
		for _, roleBinding := range r.roleBindings {
			if roleBinding.Namespace != namespace {
				continue
			}
			subjectIndex, applies := upstreamAppliesTo(user, roleBinding.Subjects, namespace)
			if !applies {
				continue
			}
			rules, err := r.getRoleReferenceRules(roleBinding.RoleRef, namespace)
			if err != nil {
				if !visitor(nil, nil, err) {
					return
				}
				continue
			}
			sourceDescriber.binding = roleBinding
			sourceDescriber.subject = &roleBinding.Subjects[subjectIndex]
			for i := range rules {
				if !visitor(sourceDescriber, &rules[i], nil) {
					return
				}
			}
		}
	}
}

func (r *upstreamRBAC) getRoleReferenceRules(roleRef rbacv1.RoleRef, bindingNamespace string) ([]rbacv1.PolicyRule, error) {
	switch roleRef.Kind {
	case "Role":
		for _, role := range r.roles {
			if role.Namespace == bindingNamespace && role.Name == roleRef.Name {
				return role.Rules, nil
			}
		}
		return nil, apierrors.NewNotFound(rbacv1.Resource("role"), roleRef.Name)
	case "ClusterRole":
		for _, clusterRole := range r.clusterRoles {
			if clusterRole.Name == roleRef.Name {
				return clusterRole.Rules, nil
			}
		}
		return nil, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), roleRef.Name)
	default:
		return nil, fmt.Errorf("unsupported role reference kind: %q", roleRef.Kind)
	}
}

func upstreamAppliesTo(user user.Info, bindingSubjects []rbacv1.Subject, namespace string) (int, bool) {
	for i, bindingSubject := range bindingSubjects {
		if upstreamAppliesToUser(user, bindingSubject, namespace) {
			return i, true
		}
	}
	return 0, false
}

func upstreamAppliesToUser(user user.Info, subject rbacv1.Subject, namespace string) bool {
	switch subject.Kind {
	case rbacv1.UserKind:
		return user.GetName() == subject.Name
	case rbacv1.GroupKind:
		return slices.Contains(user.GetGroups(), subject.Name)
	case rbacv1.ServiceAccountKind:
		saNamespace := namespace
		if len(subject.Namespace) > 0 {
			saNamespace = subject.Namespace
		}
		if len(saNamespace) == 0 {
			return false
		}
		return serviceaccount.MatchesUsername(saNamespace, subject.Name, user.GetName())
	default:
		return false
	}
}

func upstreamDescribeSubject(s *rbacv1.Subject, bindingNamespace string) string {
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

type upstreamCRBDescriber struct {
	binding *rbacv1.ClusterRoleBinding
	subject *rbacv1.Subject
}

func (d *upstreamCRBDescriber) String() string {
	return fmt.Sprintf("ClusterRoleBinding %q of %s %q to %s", d.binding.Name, d.binding.RoleRef.Kind, d.binding.RoleRef.Name, upstreamDescribeSubject(d.subject, ""))
}

type upstreamRBDescriber struct {
	binding *rbacv1.RoleBinding
	subject *rbacv1.Subject
}

func (d *upstreamRBDescriber) String() string {
	return fmt.Sprintf("RoleBinding %q of %s %q to %s", d.binding.Name+"/"+d.binding.Namespace, d.binding.RoleRef.Kind, d.binding.RoleRef.Name, upstreamDescribeSubject(d.subject, d.binding.Namespace))
}

// upstreamRuleAllows is RuleAllows of plugin/pkg/auth/authorizer/rbac/rbac.go
// with VerbMatches, APIGroupMatches, ResourceMatches, ResourceNameMatches and
// NonResourceURLMatches of pkg/apis/rbac/v1/evaluation_helpers.go.
func upstreamRuleAllows(requestAttributes authorizer.Attributes, rule *rbacv1.PolicyRule) bool {
	if requestAttributes.IsResourceRequest() {
		combinedResource := requestAttributes.GetResource()
		if len(requestAttributes.GetSubresource()) > 0 {
			combinedResource = requestAttributes.GetResource() + "/" + requestAttributes.GetSubresource()
		}
		return upstreamVerbMatches(rule, requestAttributes.GetVerb()) &&
			upstreamAPIGroupMatches(rule, requestAttributes.GetAPIGroup()) &&
			upstreamResourceMatches(rule, combinedResource, requestAttributes.GetSubresource()) &&
			upstreamResourceNameMatches(rule, requestAttributes.GetName())
	}
	return upstreamVerbMatches(rule, requestAttributes.GetVerb()) &&
		upstreamNonResourceURLMatches(rule, requestAttributes.GetPath())
}

func upstreamVerbMatches(rule *rbacv1.PolicyRule, requestedVerb string) bool {
	for _, ruleVerb := range rule.Verbs {
		if ruleVerb == rbacv1.VerbAll || ruleVerb == requestedVerb {
			return true
		}
	}
	return false
}

func upstreamAPIGroupMatches(rule *rbacv1.PolicyRule, requestedGroup string) bool {
	for _, ruleGroup := range rule.APIGroups {
		if ruleGroup == rbacv1.APIGroupAll || ruleGroup == requestedGroup {
			return true
		}
	}
	return false
}

func upstreamResourceMatches(rule *rbacv1.PolicyRule, combinedRequestedResource, requestedSubresource string) bool {
	for _, ruleResource := range rule.Resources {
		if ruleResource == rbacv1.ResourceAll {
			return true
		}
		if ruleResource == combinedRequestedResource {
			return true
		}
		if len(requestedSubresource) == 0 {
			continue
		}
		if len(ruleResource) == len(requestedSubresource)+2 &&
			strings.HasPrefix(ruleResource, "*/") &&
			strings.HasSuffix(ruleResource, requestedSubresource) {
			return true
		}
	}
	return false
}

func upstreamResourceNameMatches(rule *rbacv1.PolicyRule, requestedName string) bool {
	if len(rule.ResourceNames) == 0 {
		return true
	}
	for _, ruleName := range rule.ResourceNames {
		if ruleName == requestedName {
			return true
		}
	}
	return false
}

func upstreamNonResourceURLMatches(rule *rbacv1.PolicyRule, requestedURL string) bool {
	for _, ruleURL := range rule.NonResourceURLs {
		if ruleURL == rbacv1.NonResourceAll {
			return true
		}
		if ruleURL == requestedURL {
			return true
		}
		if strings.HasSuffix(ruleURL, "*") && strings.HasPrefix(requestedURL, strings.TrimRight(ruleURL, "*")) {
			return true
		}
	}
	return false
}

// upstreamGen draws policies and requests from small vocabularies so that
// names collide often: case variants, wildcards, subresources, namespaces.
type upstreamGen struct{ r *rand.Rand }

func (g upstreamGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g upstreamGen) some(xs ...string) []string {
	n := g.r.IntN(3)
	if n == 0 && g.r.IntN(4) > 0 {
		n = 1
	}
	var out []string
	for range n {
		out = append(out, g.pick(xs...))
	}
	return out
}

func (g upstreamGen) rule() rbacv1.PolicyRule {
	switch g.r.IntN(8) {
	case 0:
		return rbacv1.PolicyRule{Verbs: g.some("*", "get", "post", "GET"), NonResourceURLs: g.some("*", "/api", "/api*", "/apis/*", "/healthz**", "/apis", "")}
	case 1:
		return rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}
	}
	var names []string
	switch g.r.IntN(5) {
	case 0:
		names = []string{"a"}
	case 1:
		names = []string{"*"}
	case 2:
		names = []string{""}
	}
	return rbacv1.PolicyRule{
		Verbs:         g.some("*", "get", "list", "GET", "create"),
		APIGroups:     g.some("*", "", "apps", "Apps"),
		Resources:     g.some("*", "pods", "pods/status", "*/status", "pods/*", "deployments", "Pods", "*/", "/status", ""),
		ResourceNames: names,
	}
}

func (g upstreamGen) subjects() []rbacv1.Subject {
	out := make([]rbacv1.Subject, g.r.IntN(4))
	for i := range out {
		switch g.r.IntN(4) {
		case 0:
			out[i] = rbacv1.Subject{Kind: rbacv1.UserKind, Name: g.pick("alice", "bob", "system:serviceaccount:ns1:sa1", "", "Alice")}
		case 1:
			out[i] = rbacv1.Subject{Kind: rbacv1.GroupKind, Name: g.pick("g1", "g2", "system:authenticated", "")}
		case 2:
			out[i] = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: g.pick("sa1", "sa2"), Namespace: g.pick("", "ns1", "ns2")}
		default:
			out[i] = rbacv1.Subject{Kind: g.pick("user", "", "Other"), Name: g.pick("alice", "g1")}
		}
	}
	return out
}

func (g upstreamGen) policy() *upstreamRBAC {
	p := &upstreamRBAC{}
	for i := range 1 + g.r.IntN(4) {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cr%d", i)}}
		for range g.r.IntN(4) {
			cr.Rules = append(cr.Rules, g.rule())
		}
		p.clusterRoles = append(p.clusterRoles, cr)
	}
	for i := range g.r.IntN(4) {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r%d", i/2), Namespace: []string{"ns1", "ns2"}[i%2]}}
		for range 1 + g.r.IntN(3) {
			role.Rules = append(role.Rules, g.rule())
		}
		p.roles = append(p.roles, role)
	}
	for i := range g.r.IntN(6) {
		ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: fmt.Sprintf("cr%d", g.r.IntN(len(p.clusterRoles)+1))}
		if g.r.IntN(10) == 0 {
			ref.Kind = g.pick("Role", "Bogus")
		}
		p.clusterRoleBindings = append(p.clusterRoleBindings, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("crb%d", i)}, RoleRef: ref, Subjects: g.subjects(),
		})
	}
	for i := range g.r.IntN(6) {
		ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: fmt.Sprintf("cr%d", g.r.IntN(len(p.clusterRoles)+1))}
		if g.r.IntN(2) == 0 {
			ref = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: fmt.Sprintf("r%d", g.r.IntN(3))}
		}
		p.roleBindings = append(p.roleBindings, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rb%d", i), Namespace: g.pick("ns1", "ns2")}, RoleRef: ref, Subjects: g.subjects(),
		})
	}
	return p
}

func (g upstreamGen) attrs() authorizer.AttributesRecord {
	u := &user.DefaultInfo{Name: g.pick("alice", "bob", "system:serviceaccount:ns1:sa1", "system:serviceaccount:ns2:sa1", "system:serviceaccount:ns1:sa2", "", "Alice")}
	for range g.r.IntN(4) {
		u.Groups = append(u.Groups, g.pick("g1", "g2", "system:authenticated", "G1"))
	}
	a := authorizer.AttributesRecord{User: u, Verb: g.pick("get", "list", "*", "GET", "create", "post"), Namespace: g.pick("", "ns1", "ns2")}
	if g.r.IntN(4) == 0 {
		a.Path = g.pick("/api", "/apis", "/apis/apps", "/healthz", "/api/v1", "", "/healthz/x", "*")
		return a
	}
	a.ResourceRequest = true
	a.APIGroup = g.pick("", "apps", "Apps")
	a.APIVersion = g.pick("v1", "v2")
	a.Resource = g.pick("pods", "deployments", "Pods", "", "*")
	a.Subresource = g.pick("", "", "status", "*", "scale", "other/segment")
	a.Name = g.pick("", "a", "*", "b")
	return a
}

// upstreamCompare decides attrs with both evaluators and reports differences.
// deputy returns the resolution errors upstream folds into the reason (as
// evaluationError), so its error must be the reason without "RBAC: ".
func upstreamCompare(t *testing.T, p *upstreamRBAC, attrs authorizer.AttributesRecord) (allowed bool) {
	t.Helper()
	r, err := policy.NewRBAC(policy.RBACObjects{Roles: p.roles, ClusterRoles: p.clusterRoles, RoleBindings: p.roleBindings, ClusterRoleBindings: p.clusterRoleBindings}, false)
	if err != nil {
		t.Fatal(err)
	}
	snap := &policy.Snapshot{RBAC: r}
	wantD, wantReason, _ := p.Authorize(attrs)
	gotD, gotReason, gotErr := deputyauthz.NewRBAC(func() *policy.Snapshot { return snap }).Authorize(context.Background(), attrs)
	wantErr := ""
	if wantD != authorizer.DecisionAllow {
		wantErr = strings.TrimPrefix(wantReason, "RBAC: ")
	}
	if gotD != wantD || gotReason != wantReason || errString(gotErr) != wantErr {
		t.Fatalf("deputy and upstream disagree on %+v as %+v\npolicy:\n%s\nupstream: %s %q\ndeputy:   %s %q %v",
			attrs, attrs.User, upstreamDump(p), decisionName(wantD), wantReason, decisionName(gotD), gotReason, gotErr)
	}
	if ex := deputyauthz.Explain(snap, attrs); (ex.Binding != nil) != (wantD == authorizer.DecisionAllow) || (ex.Binding != nil && ex.Reason() != wantReason) {
		t.Fatalf("Explain disagrees with upstream: %+v vs %q", ex, wantReason)
	}
	return gotD == authorizer.DecisionAllow
}

func upstreamDump(p *upstreamRBAC) string {
	var b strings.Builder
	for _, x := range p.clusterRoles {
		fmt.Fprintf(&b, "  ClusterRole %s %v\n", x.Name, x.Rules)
	}
	for _, x := range p.roles {
		fmt.Fprintf(&b, "  Role %s/%s %v\n", x.Namespace, x.Name, x.Rules)
	}
	for _, x := range p.clusterRoleBindings {
		fmt.Fprintf(&b, "  ClusterRoleBinding %s %v %v\n", x.Name, x.RoleRef, x.Subjects)
	}
	for _, x := range p.roleBindings {
		fmt.Fprintf(&b, "  RoleBinding %s/%s %v %v\n", x.Namespace, x.Name, x.RoleRef, x.Subjects)
	}
	return b.String()
}

// TestRBACAgainstUpstreamPort decides random policies and requests with
// deputy and with the port of upstream's evaluator: decision, reason and
// error must agree.
func TestRBACAgainstUpstreamPort(t *testing.T) {
	g := upstreamGen{rand.New(rand.NewPCG(20260101, 1))}
	iterations := 20000
	if testing.Short() {
		iterations = 2000
	}
	allowed := 0
	for range iterations {
		p := g.policy()
		for range 5 {
			if upstreamCompare(t, p, g.attrs()) {
				allowed++
			}
		}
	}
	if allowed < iterations/10 {
		t.Errorf("only %d of %d random requests were allowed: the generator does not exercise allows", allowed, 5*iterations)
	}
}

// FuzzRBACAgainstUpstreamPort is TestRBACAgainstUpstreamPort driven by the
// fuzzer's seeds.
func FuzzRBACAgainstUpstreamPort(f *testing.F) {
	for i := range uint64(8) {
		f.Add(i, i*7919)
	}
	f.Fuzz(func(t *testing.T, seed1, seed2 uint64) {
		g := upstreamGen{rand.New(rand.NewPCG(seed1, seed2))}
		p := g.policy()
		for range 8 {
			upstreamCompare(t, p, g.attrs())
		}
	})
}
