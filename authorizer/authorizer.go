package authorizer

import (
	"context"
	"fmt"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"
)

// DefaultDecision is what deputy answers when none of its authorizers has an
// opinion.
type DefaultDecision string

const (
	// DefaultNoOpinion lets kube-apiserver's next authorizer (usually RBAC)
	// decide: the SubjectAccessReview status has allowed and denied false.
	DefaultNoOpinion DefaultDecision = "NoOpinion"
	// DefaultDeny answers denied: true, so no later authorizer can allow.
	DefaultDeny DefaultDecision = "Deny"
)

// Options configure New.
type Options struct {
	// Default is the decision when nothing allows or denies; "" means NoOpinion.
	Default DefaultDecision
}

// DenialExplainer is implemented by authorizers that can say, for a request
// they have no opinion on, what comes closest to allowing it (RBAC names the
// nearest rule of the bindings that apply to the user). New asks only when
// DefaultDeny turns no opinion into a denial, so the explanation costs nothing
// on the allow path; "" means nothing to add.
type DenialExplainer interface {
	ExplainDenial(ctx context.Context, a authorizer.Attributes) string
}

// denyReason starts every reason of a default denial.
const denyReason = "deputy: no policy rule allows this request"

// New composes named authorizers (evaluated in order with k8s.io/apiserver's
// union: the first Allow or Deny wins, reasons and errors of the others are
// aggregated) and applies opts.Default to a NoOpinion result. With DefaultDeny
// an evaluation error also becomes a Deny: an error is never an Allow, and
// the reason of the denial adds what each DenialExplainer among the
// authorizers says, e.g. `deputy: no policy rule allows this request;
// closest: RoleBinding "readers/team-a" of ClusterRole "view" to User "alice"
// has {...}, which lacks verb "delete"` (ExplainDenial).
//
// Errors: an empty or duplicate authorizer name.
func New(opts Options, authorizers ...union.NamedAuthorizer) (authorizer.Authorizer, error) {
	u, err := union.New(authorizers...)
	if err != nil {
		return nil, err
	}
	if opts.Default != DefaultDeny {
		return u, nil
	}
	var explainers []DenialExplainer
	for _, na := range authorizers {
		if e, ok := na.Authorizer.(DenialExplainer); ok {
			explainers = append(explainers, e)
		}
	}
	return authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		d, reason, err := u.Authorize(ctx, a)
		if d != authorizer.DecisionNoOpinion {
			return d, reason, err
		}
		// The deny path only: explaining costs a second walk of the
		// user's bindings.
		msg := denyReason
		if reason != "" {
			msg += " (" + reason + ")"
		}
		for _, e := range explainers {
			if why := e.ExplainDenial(ctx, a); why != "" {
				msg += "; " + why
			}
		}
		return authorizer.DecisionDeny, msg, err
	}), nil
}

// ParseDefaultDecision validates a configured default decision.
//
// Errors: any value other than "", "NoOpinion" or "Deny".
func ParseDefaultDecision(s string) (DefaultDecision, error) {
	switch DefaultDecision(s) {
	case "", DefaultNoOpinion:
		return DefaultNoOpinion, nil
	case DefaultDeny:
		return DefaultDeny, nil
	}
	return "", fmt.Errorf("unsupported default decision %q: use NoOpinion or Deny", s)
}
