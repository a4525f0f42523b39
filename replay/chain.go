package replay

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apiserver "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	authorizationcel "k8s.io/apiserver/pkg/authorization/cel"
)

// The authorizer types kube-apiserver knows besides Webhook (only Webhook
// has a constant in k8s.io/apiserver; the others are kube-apiserver's
// pkg/kubeapiserver/authorizer/modes).
const (
	typeNode        apiserver.AuthorizerType = "Node"
	typeRBAC        apiserver.AuthorizerType = "RBAC"
	typeAlwaysAllow apiserver.AuthorizerType = "AlwaysAllow"
	typeAlwaysDeny  apiserver.AuthorizerType = "AlwaysDeny"
)

// Decision is the answer to one authorization check.
type Decision struct {
	// Allowed: the check passed.
	Allowed bool
	// Reason is the deciding authorizer's reason, or why nothing allowed.
	Reason string
	// By names what decided: "system:masters", the name of a Node, Webhook
	// or RBAC authorizer of the configuration, or "" when nothing allowed.
	By string
	// Deputy: a deputy webhook received the check (its matchConditions
	// matched), whatever it answered.
	Deputy bool
	// Outside: decided before any webhook by system:masters or the Node
	// authorizer; no policy of deputy can change it.
	Outside bool
}

// Decider decides one authorization check as kube-apiserver's
// authorization chain would.
type Decider interface {
	Decide(ctx context.Context, a authorizer.Attributes) Decision
}

// ChainOptions configure NewChain.
type ChainOptions struct {
	// Config is the AuthorizationConfiguration kube-apiserver runs
	// (k8s.io/apiserver/pkg/apis/apiserver/load). Every Webhook authorizer
	// in it is taken to be deputy. Required.
	Config *apiserver.AuthorizationConfiguration
	// Deputy answers what deputy's /authorize answers under the policy
	// (impersonation gate, the policy's RBAC, defaultDecision). Required.
	Deputy authorizer.Authorizer
	// RBAC answers what kube-apiserver's RBAC authorizer answers: the
	// cluster's RBAC objects, or kube-apiserver's bootstrap grants. Required
	// when Config has an RBAC authorizer.
	RBAC authorizer.Authorizer
}

// Chain is a model of kube-apiserver's authorization chain around deputy
// (k8s.io/apiserver/pkg/server/options authorization and
// plugin/pkg/authorizer/webhook): system:masters is allowed first
// (kube-apiserver's privileged group); then each authorizer of the
// configuration in order: Node decides every check of a user in
// system:nodes (outside deputy); a Webhook whose CEL matchConditions all
// hold asks deputy (Allow and Deny are final, NoOpinion goes on; a
// matchCondition error applies the webhook's failurePolicy); RBAC allows or
// goes on; AlwaysAllow and AlwaysDeny decide. Nothing left: denied.
type Chain struct {
	steps  []step
	deputy authorizer.Authorizer
	rbac   authorizer.Authorizer
}

type step struct {
	kind    apiserver.AuthorizerType
	name    string
	matcher *authorizationcel.CELMatcher
	// failDeny: the webhook's failurePolicy is Deny.
	failDeny bool
}

// NewChain compiles the configuration's matchConditions with kube-apiserver's
// CEL compiler for authorization matchConditions.
//
// Errors: a missing Config or Deputy, an RBAC authorizer without
// opts.RBAC, an authorizer type the model does not know (ABAC), a
// matchCondition kube-apiserver would reject.
func NewChain(opts ChainOptions) (*Chain, error) {
	if opts.Config == nil || opts.Deputy == nil {
		return nil, fmt.Errorf("replay: the chain needs an AuthorizationConfiguration and deputy's authorizer")
	}
	c := &Chain{deputy: opts.Deputy, rbac: opts.RBAC}
	compiler := authorizationcel.NewDefaultCompiler()
	for i, a := range opts.Config.Authorizers {
		s := step{kind: a.Type, name: a.Name}
		switch a.Type {
		case apiserver.TypeWebhook:
			if a.Webhook == nil {
				return nil, fmt.Errorf("authorizers[%d] %q: type Webhook without a webhook section", i, a.Name)
			}
			s.failDeny = a.Webhook.FailurePolicy == apiserver.FailurePolicyDeny
			m := &authorizationcel.CELMatcher{AuthorizerType: "Webhook", AuthorizerName: a.Name}
			for j, mc := range a.Webhook.MatchConditions {
				res, err := compiler.CompileCELExpression(&authorizationcel.SubjectAccessReviewMatchCondition{Expression: mc.Expression})
				if err != nil {
					return nil, fmt.Errorf("authorizers[%d] %q matchConditions[%d]: kube-apiserver's CEL compiler rejects it: %w", i, a.Name, j, err)
				}
				m.CompilationResults = append(m.CompilationResults, res)
				m.UsesFieldSelector = m.UsesFieldSelector || res.UsesFieldSelector
				m.UsesLabelSelector = m.UsesLabelSelector || res.UsesLabelSelector
			}
			if len(m.CompilationResults) > 0 {
				s.matcher = m
			}
		case typeRBAC:
			if opts.RBAC == nil {
				return nil, fmt.Errorf("authorizers[%d] %q: an RBAC authorizer needs the cluster's RBAC or the bootstrap grants", i, a.Name)
			}
		case typeNode, typeAlwaysAllow, typeAlwaysDeny:
		default:
			return nil, fmt.Errorf("authorizers[%d] %q: type %s is not modelled by replay (Node, Webhook, RBAC, AlwaysAllow, AlwaysDeny are)", i, a.Name, a.Type)
		}
		c.steps = append(c.steps, s)
	}
	return c, nil
}

// Decide runs a through the chain.
func (c *Chain) Decide(ctx context.Context, a authorizer.Attributes) Decision {
	groups := a.GetUser().GetGroups()
	if slices.Contains(groups, user.SystemPrivilegedGroup) {
		return Decision{Allowed: true, Reason: "the user is in system:masters", By: user.SystemPrivilegedGroup, Outside: true}
	}
	var sar *authorizationv1.SubjectAccessReview
	deputy := false
	var reasons []string
	for _, s := range c.steps {
		switch s.kind {
		case typeNode:
			if slices.Contains(groups, user.NodesGroup) {
				return Decision{Allowed: true, Reason: "the user is in system:nodes: the Node authorizer decides (not replayed)", By: s.name, Outside: true}
			}
		case apiserver.TypeWebhook:
			if s.matcher != nil {
				if sar == nil {
					sar = sarOf(a)
				}
				match, err := s.matcher.Eval(ctx, sar)
				if err != nil {
					if s.failDeny {
						return Decision{Reason: fmt.Sprintf("webhook %s: matchConditions fail (failurePolicy Deny): %v", s.name, err), By: s.name, Deputy: deputy}
					}
					continue
				}
				if !match {
					continue
				}
			}
			deputy = true
			d, reason, err := c.deputy.Authorize(ctx, a)
			switch {
			case d == authorizer.DecisionAllow:
				return Decision{Allowed: true, Reason: reason, By: s.name, Deputy: true}
			case d == authorizer.DecisionDeny:
				return Decision{Reason: reason, By: s.name, Deputy: true}
			case err != nil && s.failDeny:
				return Decision{Reason: fmt.Sprintf("webhook %s failed (failurePolicy Deny): %v", s.name, err), By: s.name, Deputy: true}
			}
			if reason == "" {
				reason = "no opinion"
			}
			reasons = append(reasons, "deputy (webhook "+s.name+"): "+reason)
		case typeRBAC:
			if d, reason, _ := c.rbac.Authorize(ctx, a); d == authorizer.DecisionAllow {
				return Decision{Allowed: true, Reason: reason, By: s.name, Deputy: deputy}
			}
			reasons = append(reasons, s.name+": no rule allows it")
		case typeAlwaysAllow:
			return Decision{Allowed: true, Reason: "AlwaysAllow", By: s.name, Deputy: deputy}
		case typeAlwaysDeny:
			return Decision{Reason: "AlwaysDeny", By: s.name, Deputy: deputy}
		}
	}
	reason := "no authorizer allowed it"
	if len(reasons) > 0 {
		reason += " (" + strings.Join(reasons, "; ") + ")"
	}
	return Decision{Reason: reason, Deputy: deputy}
}

// sarOf is the SubjectAccessReview kube-apiserver's webhook authorizer builds
// for a, which its matchConditions see (plugin/pkg/authorizer/webhook
// Authorize; label and field selectors are not replayed).
func sarOf(a authorizer.Attributes) *authorizationv1.SubjectAccessReview {
	u := a.GetUser()
	r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: u.GetName(), Groups: u.GetGroups(), UID: u.GetUID()}}
	if extra := u.GetExtra(); len(extra) > 0 {
		r.Spec.Extra = make(map[string]authorizationv1.ExtraValue, len(extra))
		for k, v := range extra {
			r.Spec.Extra[k] = v
		}
	}
	if a.IsResourceRequest() {
		r.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: a.GetNamespace(), Verb: a.GetVerb(), Group: a.GetAPIGroup(),
			Version: a.GetAPIVersion(), Resource: a.GetResource(), Subresource: a.GetSubresource(), Name: a.GetName()}
	} else {
		r.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: a.GetPath(), Verb: a.GetVerb()}
	}
	return r
}

// Outcome is a replayed request's decision: its impersonation checks (if
// any) and the request's own.
type Outcome struct {
	Allowed bool
	// Reason is the deciding reason: of the request's own check when
	// impersonation passed, else of the first failing impersonation check.
	Reason string
	// Check names the deciding check: "request", or "impersonation: CHECK".
	Check string
	// Deputy: some check reached a deputy webhook.
	Deputy bool
	// Outside: some check was decided by system:masters or Node and none
	// reached deputy.
	Outside bool
}

func (o *Outcome) note(d Decision) {
	o.Deputy = o.Deputy || d.Deputy
	o.Outside = o.Outside || d.Outside
}

// DecideRequest replays r: the impersonation checks as the requestor
// (constrained modes, then legacy), then, if they pass, the request as the
// impersonated user. Allowed iff both are.
func DecideRequest(ctx context.Context, d Decider, r *Request) Outcome {
	var out Outcome
	c := &checker{ctx: ctx, d: d, out: &out}
	if r.Wanted != nil {
		req := r.Attributes
		req.User = r.Requestor
		if ok, denied := c.impersonate(r.Wanted, req); !ok {
			out.Check, out.Reason = "impersonation", denied
			out.Outside = out.Outside && !out.Deputy
			return out
		}
	}
	dec := d.Decide(ctx, &r.Attributes)
	out.note(dec)
	out.Allowed, out.Reason, out.Check = dec.Allowed, dec.Reason, "request"
	out.Outside = out.Outside && !out.Deputy
	return out
}
