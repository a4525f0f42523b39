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

// Names of the authorizers serve composes with New, and the labels
// Result.Authorizer reports for them.
const (
	// GateName is the union member name of the impersonation gate; it
	// prefixes the gate's reasons in an aggregated no-opinion reason.
	GateName = "impersonation-gate"
	// RBACName is the union member name (and label) of the RBAC authorizer.
	RBACName = "rbac"
)

// Labels of Result.Authorizer: which authorizer decided. A member of New's
// union reports its AuthorizerName, except GateName, reported as
// DecidedByGate.
const (
	// DecidedByGate: the impersonation gate allowed or denied.
	DecidedByGate = "gate"
	// DecidedByRBAC: RBAC allowed (RBAC never denies).
	DecidedByRBAC = RBACName
	// DecidedByDefault: no member had an opinion and DefaultDeny turned
	// that (or an evaluation error) into a denial.
	DecidedByDefault = "default"
	// DecidedByNone: no member had an opinion and none was turned into a
	// decision (DefaultNoOpinion): kube-apiserver's next authorizer decides.
	DecidedByNone = "none"
)

// Result is one decision of an Authorizer: what Authorize returns plus the
// label of the authorizer that decided (DecidedByGate, DecidedByRBAC, the
// AuthorizerName of another member, DecidedByDefault or DecidedByNone).
type Result struct {
	Decision   authorizer.Decision
	Reason     string
	Err        error
	Authorizer string
}

// Authorizer is what New returns: k8s.io/apiserver's union of named
// authorizers with deputy's default decision. It is an
// authorizer.Authorizer (Authorize) and tells, through Decide, which member
// decided, for metrics and decision logs.
type Authorizer struct {
	union       authorizer.Authorizer
	defaultDeny bool
	explainers  []DenialExplainer
}

// decidedKey is the context key of a deciding record.
type decidedKey struct{}

// decidingContext is the per-request record of Decide: a context that
// answers decidedKey with itself, so that the member that allows or denies
// can write its label there. One allocation per decision (instead of a
// context.WithValue and a record): union.New's members get only the context
// and the attributes.
type decidingContext struct {
	context.Context
	by string
}

// Value implements context.Context.
func (c *decidingContext) Value(key any) any {
	if key == (decidedKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// labelled is a union member that records its label into a deciding
// record (Decide's context) when it allows or denies.
type labelled struct {
	label string
	authorizer.Authorizer
}

// Authorize implements authorizer.Authorizer.
func (l labelled) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	d, reason, err := l.Authorizer.Authorize(ctx, a)
	if d != authorizer.DecisionNoOpinion {
		if rec, ok := ctx.(*decidingContext); ok {
			rec.by = l.label
		} else if rec, ok := ctx.Value(decidedKey{}).(*decidingContext); ok {
			rec.by = l.label
		}
	}
	return d, reason, err
}

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
func New(opts Options, authorizers ...union.NamedAuthorizer) (*Authorizer, error) {
	members := make([]union.NamedAuthorizer, len(authorizers))
	out := &Authorizer{defaultDeny: opts.Default == DefaultDeny}
	for i, na := range authorizers {
		label := na.AuthorizerName
		if label == GateName {
			label = DecidedByGate
		}
		members[i] = na
		if na.Authorizer != nil {
			members[i].Authorizer = labelled{label: label, Authorizer: na.Authorizer}
		}
		if e, ok := na.Authorizer.(DenialExplainer); ok {
			out.explainers = append(out.explainers, e)
		}
	}
	u, err := union.New(members...)
	if err != nil {
		return nil, err
	}
	out.union = u
	return out, nil
}

// Authorize implements authorizer.Authorizer: Decide without the label.
func (z *Authorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	d, reason, err := z.union.Authorize(ctx, a)
	if d != authorizer.DecisionNoOpinion || !z.defaultDeny {
		return d, reason, err
	}
	return authorizer.DecisionDeny, z.denialReason(ctx, a, reason), err
}

// ConditionsAwareAuthorize implements authorizer.Authorizer as before
// Decide existed: the union's conditions-aware decision with
// DefaultNoOpinion; Authorize's unconditional decision with DefaultDeny
// (deputy's members have no conditions).
func (z *Authorizer) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	if !z.defaultDeny {
		return z.union.ConditionsAwareAuthorize(ctx, a)
	}
	return authorizer.ConditionsAwareDecisionFromParts(z.Authorize(ctx, a))
}

// EvaluateConditions implements authorizer.Authorizer: the union's with
// DefaultNoOpinion; with DefaultDeny it fails closed with
// authorizer.ErrorConditionEvaluationNotSupported, as an
// authorizer.AuthorizerFunc does.
func (z *Authorizer) EvaluateConditions(ctx context.Context, d authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	if !z.defaultDeny {
		return z.union.EvaluateConditions(ctx, d, data)
	}
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// Decide is Authorize that also reports which authorizer decided
// (Result.Authorizer): the label of the union member that allowed or
// denied, DecidedByDefault for a no opinion (or error) DefaultDeny turned
// into a denial, DecidedByNone for a no opinion answered as such.
func (z *Authorizer) Decide(ctx context.Context, a authorizer.Attributes) Result {
	rec := &decidingContext{Context: ctx}
	d, reason, err := z.union.Authorize(rec, a)
	switch {
	case d != authorizer.DecisionNoOpinion:
		return Result{Decision: d, Reason: reason, Err: err, Authorizer: rec.by}
	case z.defaultDeny:
		return Result{Decision: authorizer.DecisionDeny, Reason: z.denialReason(ctx, a, reason), Err: err, Authorizer: DecidedByDefault}
	}
	return Result{Decision: d, Reason: reason, Err: err, Authorizer: DecidedByNone}
}

// denialReason is the reason of a default denial: denyReason, the members'
// aggregated reasons, and what each DenialExplainer says. The deny path
// only: explaining costs a second walk of the user's bindings.
func (z *Authorizer) denialReason(ctx context.Context, a authorizer.Attributes, reason string) string {
	msg := denyReason
	if reason != "" {
		msg += " (" + reason + ")"
	}
	for _, e := range z.explainers {
		if why := e.ExplainDenial(ctx, a); why != "" {
			msg += "; " + why
		}
	}
	return msg
}

// Compose is deputy's authorizer as deputy serve answers /authorize: the
// impersonation gate first (its Deny of an impersonation is final), then
// RBAC, named GateName and RBACName, with opts.Default (New).
func Compose(opts Options, gate *Gate, rbac *RBAC) (*Authorizer, error) {
	return New(opts,
		union.NamedAuthorizer{AuthorizerName: GateName, Authorizer: gate},
		union.NamedAuthorizer{AuthorizerName: RBACName, Authorizer: rbac})
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
