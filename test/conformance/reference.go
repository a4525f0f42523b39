package conformance

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/tools/cache"
	authorizationapi "k8s.io/kubernetes/pkg/apis/authorization"
	authorizationapiv1 "k8s.io/kubernetes/pkg/apis/authorization/v1"
	authorizationutil "k8s.io/kubernetes/pkg/registry/authorization/util"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"

	"deputy.dev/deputy/policy"
)

// Attributes turns a SubjectAccessReview spec into authorizer attributes
// exactly as kube-apiserver's SubjectAccessReview endpoint does: conversion
// to the internal type, then authorizationutil.AuthorizationAttributesFrom
// (an empty version becomes "*").
func Attributes(spec authorizationv1.SubjectAccessReviewSpec) (authorizer.AttributesRecord, error) {
	var internal authorizationapi.SubjectAccessReviewSpec
	if err := authorizationapiv1.Convert_v1_SubjectAccessReviewSpec_To_authorization_SubjectAccessReviewSpec(&spec, &internal, nil); err != nil {
		return authorizer.AttributesRecord{}, fmt.Errorf("failed to convert SubjectAccessReview spec: %w", err)
	}
	return authorizationutil.AuthorizationAttributesFrom(internal), nil
}

// DeputyObjects is p as deputy's policy.NewRBAC input, in the same order.
func (p *Policy) DeputyObjects() policy.RBACObjects {
	return policy.RBACObjects{Roles: p.Roles, ClusterRoles: p.ClusterRoles, RoleBindings: p.RoleBindings, ClusterRoleBindings: p.ClusterRoleBindings}
}

// ordered implements upstream's RoleGetter, RoleBindingLister,
// ClusterRoleGetter and ClusterRoleBindingLister over slices, listing in
// slice order and failing lookups with the errors of the informer listers
// kube-apiserver uses (apierrors NotFound for "role" / "clusterrole").
type ordered struct {
	roles               map[string]*rbacv1.Role
	clusterRoles        map[string]*rbacv1.ClusterRole
	roleBindings        map[string][]*rbacv1.RoleBinding
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
}

// newOrdered returns listers holding the roles and no bindings. For
// duplicate names (which kube-apiserver cannot hold) the first one wins.
func newOrdered(roles []*rbacv1.Role, clusterRoles []*rbacv1.ClusterRole) *ordered {
	o := &ordered{roles: map[string]*rbacv1.Role{}, clusterRoles: map[string]*rbacv1.ClusterRole{}, roleBindings: map[string][]*rbacv1.RoleBinding{}}
	for _, r := range roles {
		if _, dup := o.roles[r.Namespace+"/"+r.Name]; !dup {
			o.roles[r.Namespace+"/"+r.Name] = r
		}
	}
	for _, r := range clusterRoles {
		if _, dup := o.clusterRoles[r.Name]; !dup {
			o.clusterRoles[r.Name] = r
		}
	}
	return o
}

func (o *ordered) GetRole(_ context.Context, namespace, name string) (*rbacv1.Role, error) {
	if r, ok := o.roles[namespace+"/"+name]; ok {
		return r, nil
	}
	return nil, apierrors.NewNotFound(rbacv1.Resource("role"), name)
}

func (o *ordered) GetClusterRole(_ context.Context, name string) (*rbacv1.ClusterRole, error) {
	if r, ok := o.clusterRoles[name]; ok {
		return r, nil
	}
	return nil, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), name)
}

func (o *ordered) ListRoleBindings(_ context.Context, namespace string) ([]*rbacv1.RoleBinding, error) {
	return o.roleBindings[namespace], nil
}

func (o *ordered) ListClusterRoleBindings(context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	return o.clusterRoleBindings, nil
}

// NewUpstream returns kube-apiserver's RBACAuthorizer over p, visiting
// bindings in p's order.
func NewUpstream(p *Policy) *rbac.RBACAuthorizer {
	o := newOrdered(p.Roles, p.ClusterRoles)
	o.clusterRoleBindings = p.ClusterRoleBindings
	for _, rb := range p.RoleBindings {
		o.roleBindings[rb.Namespace] = append(o.roleBindings[rb.Namespace], rb)
	}
	return rbac.New(o, o, o, o)
}

// NewUpstreamIndexed returns kube-apiserver's RBACAuthorizer over p as
// kube-apiserver builds it: client-go listers over informer indexers
// (pkg/kubeapiserver/authorizer/modes, RBAC mode), which visit bindings in
// map order.
func NewUpstreamIndexed(p *Policy) *rbac.RBACAuthorizer {
	index := func(objs ...any) cache.Indexer {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			if err := idx.Add(o); err != nil {
				panic(err) // only for objects without metadata, which Policy cannot hold
			}
		}
		return idx
	}
	toAny := func(n int, at func(int) any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = at(i)
		}
		return out
	}
	roles := index(toAny(len(p.Roles), func(i int) any { return p.Roles[i] })...)
	clusterRoles := index(toAny(len(p.ClusterRoles), func(i int) any { return p.ClusterRoles[i] })...)
	roleBindings := index(toAny(len(p.RoleBindings), func(i int) any { return p.RoleBindings[i] })...)
	clusterRoleBindings := index(toAny(len(p.ClusterRoleBindings), func(i int) any { return p.ClusterRoleBindings[i] })...)
	return rbac.New(
		&rbac.RoleGetter{Lister: rbaclisters.NewRoleLister(roles)},
		&rbac.RoleBindingLister{Lister: rbaclisters.NewRoleBindingLister(roleBindings)},
		&rbac.ClusterRoleGetter{Lister: rbaclisters.NewClusterRoleLister(clusterRoles)},
		&rbac.ClusterRoleBindingLister{Lister: rbaclisters.NewClusterRoleBindingLister(clusterRoleBindings)},
	)
}

// Reference is upstream's RBACAuthorizer evaluated on one binding at a time,
// which yields what no single visiting order shows: every reason upstream
// could give, and every role-resolution error it could meet.
type Reference struct {
	clusterRoleBindings []*rbac.RBACAuthorizer
	roleBindings        map[string][]*rbac.RBACAuthorizer
}

// NewReference builds the per-binding reference for p.
func NewReference(p *Policy) *Reference {
	ref := &Reference{roleBindings: map[string][]*rbac.RBACAuthorizer{}}
	roles := newOrdered(p.Roles, p.ClusterRoles) // shared: only the bindings differ
	for _, crb := range p.ClusterRoleBindings {
		o := &ordered{roles: roles.roles, clusterRoles: roles.clusterRoles, clusterRoleBindings: []*rbacv1.ClusterRoleBinding{crb}}
		ref.clusterRoleBindings = append(ref.clusterRoleBindings, rbac.New(o, o, o, o))
	}
	for _, rb := range p.RoleBindings {
		o := &ordered{roles: roles.roles, clusterRoles: roles.clusterRoles, roleBindings: map[string][]*rbacv1.RoleBinding{rb.Namespace: {rb}}}
		ref.roleBindings[rb.Namespace] = append(ref.roleBindings[rb.Namespace], rbac.New(o, o, o, o))
	}
	return ref
}

// Expectation is what a correct RBAC authorizer answers for one request
// under any visiting order.
type Expectation struct {
	Allowed bool
	// Reasons are the allow reasons of every binding that allows (each is
	// a correct reason).
	Reasons map[string]bool
	// Errors are the role-resolution errors of the bindings that apply to
	// the user (reported when nothing allows).
	Errors map[string]bool
}

// Expect evaluates a against every binding separately.
func (r *Reference) Expect(a authorizer.Attributes) Expectation {
	e := Expectation{Reasons: map[string]bool{}, Errors: map[string]bool{}}
	ctx := context.Background()
	visit := func(authz *rbac.RBACAuthorizer) {
		d, reason, _ := authz.Authorize(ctx, a)
		switch {
		case d == authorizer.DecisionAllow:
			e.Allowed = true
			e.Reasons[reason] = true
		case reason != "":
			e.Errors[strings.TrimPrefix(reason, "RBAC: ")] = true
		}
	}
	for _, authz := range r.clusterRoleBindings {
		visit(authz)
	}
	if ns := a.GetNamespace(); ns != "" {
		for _, authz := range r.roleBindings[ns] {
			visit(authz)
		}
	}
	if e.Allowed {
		e.Errors = map[string]bool{}
	}
	return e
}

func (e Expectation) String() string {
	if e.Allowed {
		return fmt.Sprintf("allowed, by one of %q", sortedKeys(e.Reasons))
	}
	if len(e.Errors) > 0 {
		return fmt.Sprintf("no opinion, with errors %q", sortedKeys(e.Errors))
	}
	return "no opinion"
}

func sortedKeys(m map[string]bool) []string {
	return slices.Sorted(maps.Keys(m))
}

// CheckAnswer checks an RBAC answer against e: the same decision; for an
// allow, a reason e holds; otherwise the reason "RBAC: " + the aggregated
// errors (each error once, in any order) or "" when there are none, and, when
// errs is not nil, the same errors as the evaluation error (deputy reports
// them there; upstream's RBACAuthorizer does not, so pass nil for it).
func (e Expectation) CheckAnswer(d authorizer.Decision, reason string, evaluationError *string) error {
	switch {
	case d == authorizer.DecisionDeny:
		return fmt.Errorf("denied (%q): RBAC never denies; want %s", reason, e)
	case (d == authorizer.DecisionAllow) != e.Allowed:
		return fmt.Errorf("decision %s (reason %q), want %s", decisionName(d), reason, e)
	case e.Allowed:
		if !e.Reasons[reason] {
			return fmt.Errorf("allowed with reason %q, want one of %q", reason, sortedKeys(e.Reasons))
		}
		if evaluationError != nil && *evaluationError != "" {
			return fmt.Errorf("allowed with evaluation error %q, want none", *evaluationError)
		}
		return nil
	}
	want := ""
	if len(e.Errors) > 0 {
		want = "RBAC: " + "<" + strings.Join(sortedKeys(e.Errors), ", ") + ">"
	}
	got, err := normalizeErrors(reason)
	if err != nil || got != want {
		return fmt.Errorf("no opinion with reason %q, want %s", reason, e)
	}
	if evaluationError != nil {
		got, err := normalizeErrors(prefixed(*evaluationError))
		if err != nil || got != want {
			return fmt.Errorf("no opinion with evaluation error %q, want errors %q", *evaluationError, sortedKeys(e.Errors))
		}
	}
	return nil
}

func prefixed(s string) string {
	if s == "" {
		return ""
	}
	return "RBAC: " + s
}

// normalizeErrors turns "RBAC: err" or "RBAC: [err1, err2]" (an
// utilerrors.Aggregate), also prefixed "rbac: " by a union, into
// "RBAC: <errs sorted>", so that reasons listing the same errors in another
// order compare equal. Error messages of generated policies hold no ", ".
func normalizeErrors(reason string) (string, error) {
	if reason == "" {
		return "", nil
	}
	// Through a union (kube-apiserver's authorizer chain, deputy's
	// composition) a NoOpinion reason is prefixed by the authorizer's name.
	reason = strings.TrimPrefix(reason, "rbac: ")
	rest, ok := strings.CutPrefix(reason, "RBAC: ")
	if !ok {
		return "", fmt.Errorf("reason %q does not start with \"RBAC: \"", reason)
	}
	var errs []string
	if inner, ok := strings.CutPrefix(rest, "["); ok && strings.HasSuffix(inner, "]") {
		errs = strings.Split(strings.TrimSuffix(inner, "]"), ", ")
	} else {
		errs = []string{rest}
	}
	sort.Strings(errs)
	errs = slices.Compact(errs)
	return "RBAC: <" + strings.Join(errs, ", ") + ">", nil
}

func decisionName(d authorizer.Decision) string {
	switch d {
	case authorizer.DecisionAllow:
		return "Allow"
	case authorizer.DecisionDeny:
		return "Deny"
	}
	return "NoOpinion"
}
