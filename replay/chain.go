package replay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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
	kind apiserver.AuthorizerType
	name string
	// conds are the webhook's matchConditions, each compiled alone.
	conds []*cond
	// failDeny: the webhook's failurePolicy is Deny.
	failDeny bool
}

// cond is one matchCondition: a CELMatcher of that expression alone, and a
// memo of its results keyed by the request fields it names.
type cond struct {
	matcher *authorizationcel.CELMatcher
	uses    map[string]bool
	memo    *matchMemo
}

// condFields are the SubjectAccessReview fields a matchCondition can read.
// A field an expression does not name, in any spelling
// (request.resourceAttributes.name, ['name']), cannot change its result:
// CEL reads fields by name. Keying each condition's memo by the fields it
// names makes the memo hit nearly always (the generated conditions read the
// user, the groups, or the verb and resource, never all of them).
var condFields = []string{"user", "groups", "uid", "extra", "verb", "group", "version", "resource", "subresource",
	"name", "namespace", "path", "fieldSelector", "labelSelector"}

// celString matches a CEL string literal (single or double quoted, with
// escapes; raw and triple-quoted strings are matched as their parts, which
// only keeps more text as code).
var celString = regexp.MustCompile(`'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"`)

// fieldsNamed returns the condFields expr can read: each named as a field
// selection (.name) outside string literals, or as an index (['name']).
// It may say more than the expression reads, never less.
func fieldsNamed(expr string) map[string]bool {
	code := celString.ReplaceAllString(expr, "''")
	uses := map[string]bool{}
	for _, f := range condFields {
		uses[f] = regexp.MustCompile(`\.\s*`+f+`\b`).MatchString(code) ||
			regexp.MustCompile(`\[\s*['"]`+f+`['"]\s*\]`).MatchString(expr)
	}
	return uses
}

// matchMemoSize bounds each condition's memo; it is cleared when full.
const matchMemoSize = 1 << 16

// matchMemo is a concurrent, bounded memo of one condition's results.
type matchMemo struct {
	m sync.Map // string -> bool
	n atomic.Int64
}

func (mm *matchMemo) get(k string) (bool, bool) {
	v, ok := mm.m.Load(k)
	if !ok {
		return false, false
	}
	return v.(bool), true
}

func (mm *matchMemo) put(k string, v bool) {
	if mm.n.Add(1) > matchMemoSize {
		mm.m.Clear()
		mm.n.Store(1)
	}
	mm.m.Store(k, v)
}

// key is the memo key of a for c: whether a is a resource request, and the
// fields c names.
func (c *cond) key(a authorizer.Attributes) string {
	var b strings.Builder
	if a.IsResourceRequest() {
		b.WriteByte('R')
	}
	u := a.GetUser()
	field := func(name, v string) {
		if c.uses[name] {
			b.WriteString(v)
			b.WriteByte(0)
		}
	}
	field("user", u.GetName())
	field("uid", u.GetUID())
	field("verb", a.GetVerb())
	field("group", a.GetAPIGroup())
	field("version", a.GetAPIVersion())
	field("resource", a.GetResource())
	field("subresource", a.GetSubresource())
	field("name", a.GetName())
	field("namespace", a.GetNamespace())
	field("path", a.GetPath())
	if c.uses["groups"] {
		for _, g := range u.GetGroups() {
			b.WriteString(g)
			b.WriteByte(1)
		}
		b.WriteByte(0)
	}
	if c.uses["extra"] {
		for _, k := range slices.Sorted(maps.Keys(u.GetExtra())) {
			b.WriteString(k)
			b.WriteByte(1)
			for _, v := range u.GetExtra()[k] {
				b.WriteString(v)
				b.WriteByte(1)
			}
			b.WriteByte(0)
		}
	}
	return b.String()
}

// match evaluates the matchConditions as CELMatcher.Eval does: false as soon
// as one is false; otherwise an error if one failed; otherwise true.
func (s *step) match(ctx context.Context, a authorizer.Attributes, sar **authorizationv1.SubjectAccessReview) (bool, error) {
	var errs []error
	for _, c := range s.conds {
		k := c.key(a)
		ok, known := c.memo.get(k)
		if !known {
			if *sar == nil {
				*sar = sarOf(a)
			}
			var err error
			if ok, err = c.matcher.Eval(ctx, *sar); err != nil {
				errs = append(errs, err)
				continue
			}
			c.memo.put(k, ok)
		}
		if !ok {
			return false, nil
		}
	}
	return len(errs) == 0, errors.Join(errs...)
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
			for j, mc := range a.Webhook.MatchConditions {
				res, err := compiler.CompileCELExpression(&authorizationcel.SubjectAccessReviewMatchCondition{Expression: mc.Expression})
				if err != nil {
					return nil, fmt.Errorf("authorizers[%d] %q matchConditions[%d]: kube-apiserver's CEL compiler rejects it: %w", i, a.Name, j, err)
				}
				c := &cond{matcher: &authorizationcel.CELMatcher{AuthorizerType: "Webhook", AuthorizerName: a.Name,
					CompilationResults: []authorizationcel.CompilationResult{res}, UsesFieldSelector: res.UsesFieldSelector, UsesLabelSelector: res.UsesLabelSelector},
					uses: map[string]bool{}, memo: &matchMemo{}}
				c.uses = fieldsNamed(mc.Expression)
				s.conds = append(s.conds, c)
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
	for i := range c.steps {
		s := &c.steps[i]
		switch s.kind {
		case typeNode:
			if slices.Contains(groups, user.NodesGroup) {
				return Decision{Allowed: true, Reason: "the user is in system:nodes: the Node authorizer decides (not replayed)", By: s.name, Outside: true}
			}
		case apiserver.TypeWebhook:
			match, err := s.match(ctx, a, &sar)
			if err != nil {
				if s.failDeny {
					return Decision{Reason: fmt.Sprintf("webhook %s: matchConditions fail (failurePolicy Deny): %v", s.name, err), By: s.name, Deputy: deputy}
				}
				continue
			}
			if !match {
				continue
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
