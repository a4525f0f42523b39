package authorizer

import (
	"context"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/policy"
)

// SnapshotFunc returns the policy snapshot to decide with, or nil when none is
// loaded yet.
type SnapshotFunc func() *policy.Snapshot

// RBAC is kube-apiserver's RBAC authorizer over deputy's policy snapshots.
// It never denies: it allows or has no opinion.
type RBAC struct {
	snapshot SnapshotFunc
}

var _ authorizer.Authorizer = (*RBAC)(nil)

// NewRBAC returns an RBAC authorizer reading the current snapshot from
// snapshot on every call.
func NewRBAC(snapshot SnapshotFunc) *RBAC { return &RBAC{snapshot: snapshot} }

// Authorize decides a request as RBACAuthorizer.Authorize does
// (plugin/pkg/auth/authorizer/rbac/rbac.go): ClusterRoleBindings, then the
// RoleBindings of the request namespace, that apply to the user; the first rule
// that allows yields DecisionAllow with reason `RBAC: allowed by
// ClusterRoleBinding "b" of ClusterRole "r" to User "alice"`. Otherwise
// DecisionNoOpinion; role references that could not be resolved (missing
// roles) met on the way are reported in the reason as upstream does ("RBAC: "
// + the aggregated errors) and also returned as the error, which the SAR
// response carries as evaluationError. Without a loaded snapshot the answer
// is NoOpinion with policy.ErrNotLoaded.
func (r *RBAC) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	snap := r.snapshot()
	if snap == nil {
		return authorizer.DecisionNoOpinion, "", policy.ErrNotLoaded
	}
	v := visitor{req: newRequest(a)}
	snap.RBAC.VisitBindings(a.GetUser(), a.GetNamespace(), v.visit)
	if v.binding != nil {
		return authorizer.DecisionAllow, v.binding.Reasons[v.subject], nil
	}
	if len(v.errs) > 0 {
		agg := utilerrors.NewAggregate(v.errs)
		return authorizer.DecisionNoOpinion, "RBAC: " + agg.Error(), agg
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// ExplainDenial is ExplainDenial over the current snapshot: what comes
// closest to allowing a request Authorize had no opinion on ("" without a
// snapshot). New calls it on the default-Deny path only.
func (r *RBAC) ExplainDenial(_ context.Context, a authorizer.Attributes) string {
	return ExplainDenial(r.snapshot(), a)
}

var _ DenialExplainer = (*RBAC)(nil)

// ConditionsAwareAuthorize is Authorize in the conditions-aware form; RBAC
// decisions are never conditional.
func (r *RBAC) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(r.Authorize(ctx, a))
}

// EvaluateConditions fails closed: RBAC issues no conditional decisions.
func (r *RBAC) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// visitor is authorizingVisitor of plugin/pkg/auth/authorizer/rbac: it stops
// at the first rule that allows and collects resolution errors met before.
type visitor struct {
	req     request
	binding *policy.Binding
	subject int
	rule    *rbacv1.PolicyRule
	errs    []error
}

func (v *visitor) visit(b *policy.Binding, subject int) bool {
	if b.RoleErr != nil {
		v.errs = append(v.errs, b.RoleErr)
		return true
	}
	for i := range b.Rules {
		if v.req.allows(&b.Rules[i]) {
			v.binding, v.subject, v.rule = b, subject, &b.Rules[i]
			return false
		}
	}
	return true
}

// request is what ruleAllows reads of the Attributes, fetched once per
// decision: every getter is an interface call (on an AttributesRecord, one
// that copies the whole record into the value receiver) and a decision may
// test dozens of rules.
type request struct {
	resourceRequest bool
	verb            string
	apiGroup        string
	resource        string
	subresource     string
	name            string
	path            string
}

func newRequest(a authorizer.Attributes) request {
	if !a.IsResourceRequest() {
		return request{verb: a.GetVerb(), path: a.GetPath()}
	}
	return request{
		resourceRequest: true,
		verb:            a.GetVerb(),
		apiGroup:        a.GetAPIGroup(),
		resource:        a.GetResource(),
		subresource:     a.GetSubresource(),
		name:            a.GetName(),
	}
}

func (r *request) allows(rule *rbacv1.PolicyRule) bool {
	if r.resourceRequest {
		return verbMatches(rule, r.verb) &&
			apiGroupMatches(rule, r.apiGroup) &&
			resourceMatches(rule, r.resource, r.subresource) &&
			resourceNameMatches(rule, r.name)
	}
	return verbMatches(rule, r.verb) && nonResourceURLMatches(rule, r.path)
}

// ruleAllows reports whether rule allows the request, exactly as
// plugin/pkg/auth/authorizer/rbac.RuleAllows with the helpers of
// pkg/apis/rbac/v1/evaluation_helpers.go:
//   - verbs and apiGroups: "*" or an exact, case-sensitive match;
//   - resources: "*", exact "res" or "res/sub", or "*/sub" for any resource's
//     subresource sub ("res/*" is literal);
//   - resourceNames: empty matches every name, including the empty one;
//   - nonResourceURLs: "*", exact, or a prefix when the rule ends in "*".
//
// The apiVersion and selectors of the request are ignored.
func ruleAllows(a authorizer.Attributes, rule *rbacv1.PolicyRule) bool {
	req := newRequest(a)
	return req.allows(rule)
}

func verbMatches(rule *rbacv1.PolicyRule, verb string) bool {
	for _, v := range rule.Verbs {
		if v == rbacv1.VerbAll || v == verb {
			return true
		}
	}
	return false
}

func apiGroupMatches(rule *rbacv1.PolicyRule, group string) bool {
	for _, g := range rule.APIGroups {
		if g == rbacv1.APIGroupAll || g == group {
			return true
		}
	}
	return false
}

// resourceMatches compares without building "res/sub" (upstream concatenates
// per call; this is the same predicate without the allocation).
func resourceMatches(rule *rbacv1.PolicyRule, resource, subresource string) bool {
	for _, r := range rule.Resources {
		if r == rbacv1.ResourceAll {
			return true
		}
		if subresource == "" {
			if r == resource {
				return true
			}
			continue
		}
		// exact "res/sub"
		if len(r) == len(resource)+1+len(subresource) && strings.HasPrefix(r, resource) &&
			r[len(resource)] == '/' && strings.HasSuffix(r, subresource) {
			return true
		}
		// "*/sub"
		if len(r) == len(subresource)+2 && strings.HasPrefix(r, "*/") && strings.HasSuffix(r, subresource) {
			return true
		}
	}
	return false
}

func resourceNameMatches(rule *rbacv1.PolicyRule, name string) bool {
	if len(rule.ResourceNames) == 0 {
		return true
	}
	for _, n := range rule.ResourceNames {
		if n == name {
			return true
		}
	}
	return false
}

func nonResourceURLMatches(rule *rbacv1.PolicyRule, path string) bool {
	for _, u := range rule.NonResourceURLs {
		if u == rbacv1.NonResourceAll || u == path {
			return true
		}
		if strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimRight(u, "*")) {
			return true
		}
	}
	return false
}

// Explanation says which binding and rule allow a request (Binding nil when
// none does) and which role references could not be resolved on the way.
type Explanation struct {
	Binding *policy.Binding
	Subject int
	Rule    *rbacv1.PolicyRule
	Errors  []error
}

// Reason is the upstream allow reason, or "" when nothing allows.
func (e Explanation) Reason() string {
	if e.Binding == nil {
		return ""
	}
	return e.Binding.Reasons[e.Subject]
}

// Explain evaluates a request like Authorize and returns the deciding binding
// and rule, for `deputy can-i`.
func Explain(snap *policy.Snapshot, a authorizer.Attributes) Explanation {
	if snap == nil {
		return Explanation{Errors: []error{policy.ErrNotLoaded}}
	}
	v := visitor{req: newRequest(a)}
	snap.RBAC.VisitBindings(a.GetUser(), a.GetNamespace(), v.visit)
	return Explanation{Binding: v.binding, Subject: v.subject, Rule: v.rule, Errors: v.errs}
}

// DescribeRule renders a rule compactly, as rbacv1helpers.CompactString
// (pkg/apis/rbac/v1/evaluation_helpers.go) does in kube-apiserver messages:
// {APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}.
func DescribeRule(r *rbacv1.PolicyRule) string {
	var b strings.Builder
	writeRule(&b, r)
	return b.String()
}

// writeRule is DescribeRule into b, without fmt's reflection (a denial's
// reason holds one).
func writeRule(b *strings.Builder, r *rbacv1.PolicyRule) {
	b.WriteByte('{')
	n := 0
	field := func(name string, list []string) {
		if len(list) == 0 {
			return
		}
		if n > 0 {
			b.WriteString(", ")
		}
		n++
		b.WriteString(name)
		b.WriteByte(':')
		writeQuoted(b, list)
	}
	field("APIGroups", r.APIGroups)
	field("Resources", r.Resources)
	field("NonResourceURLs", r.NonResourceURLs)
	field("ResourceNames", r.ResourceNames)
	field("Verbs", r.Verbs)
	b.WriteByte('}')
}
