package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
)

// inProcess holds deputy's evaluator and upstream's authorizer over the same
// policy, for comparisons without an apiserver.
type inProcess struct {
	policy *Policy
	// upstream visits bindings in the policy's order, as deputy does.
	upstream authorizer.Authorizer
	// shuffled is upstream over the bindings in another order.
	shuffled authorizer.Authorizer
	ref      *Reference
	deputy   *deputyauthz.RBAC
	// composed is deputy's evaluator inside deputy's composition (a union,
	// as `deputy serve` builds it), which reports missing roles as the
	// evaluation error.
	composed authorizer.Authorizer
}

func newInProcess(p *Policy, r Rand) (*inProcess, error) {
	rbac, err := policy.NewRBAC(p.DeputyObjects(), false)
	if err != nil {
		return nil, fmt.Errorf("deputy rejected the policy: %w", err)
	}
	snap := &policy.Snapshot{RBAC: rbac}
	deputy := deputyauthz.NewRBAC(func() *policy.Snapshot { return snap })
	composed, err := deputyauthz.New(deputyauthz.Options{}, union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: deputy})
	if err != nil {
		return nil, err
	}
	return &inProcess{
		policy:   p,
		upstream: NewUpstream(p),
		shuffled: NewUpstream(shuffledPolicy(p, r)),
		ref:      NewReference(p),
		deputy:   deputy,
		composed: composed,
	}, nil
}

// shuffledPolicy returns p with its bindings in an order drawn from r.
func shuffledPolicy(p *Policy, r Rand) *Policy {
	q := *p
	q.ClusterRoleBindings = slices.Clone(p.ClusterRoleBindings)
	q.RoleBindings = slices.Clone(p.RoleBindings)
	for i := len(q.ClusterRoleBindings) - 1; i > 0; i-- {
		j := r.IntN(i + 1)
		q.ClusterRoleBindings[i], q.ClusterRoleBindings[j] = q.ClusterRoleBindings[j], q.ClusterRoleBindings[i]
	}
	for i := len(q.RoleBindings) - 1; i > 0; i-- {
		j := r.IntN(i + 1)
		q.RoleBindings[i], q.RoleBindings[j] = q.RoleBindings[j], q.RoleBindings[i]
	}
	return &q
}

// answer is one authorizer's answer.
type answer struct {
	decision authorizer.Decision
	reason   string
	err      string
}

func (a answer) String() string {
	s := fmt.Sprintf("%s %q", decisionName(a.decision), a.reason)
	if a.err != "" {
		s += fmt.Sprintf(" (evaluationError %q)", a.err)
	}
	return s
}

func ask(a authorizer.Authorizer, attrs authorizer.Attributes) answer {
	d, reason, err := a.Authorize(context.Background(), attrs)
	ans := answer{decision: d, reason: reason}
	if err != nil {
		ans.err = err.Error()
	}
	return ans
}

// check asks every authorizer about req and returns what disagrees:
//   - deputy and upstream over the same binding order: the same decision
//     and the same reason, byte for byte; deputy's error is upstream's
//     reason without "RBAC: " (upstream reports resolution errors only in
//     the reason);
//   - deputy composed as `deputy serve` does: the same decision, the same
//     reason when allowed, the errors as the evaluation error;
//   - all of them, and upstream over shuffled bindings, against the
//     per-binding reference: an allowed reason is one a binding gives.
func (ip *inProcess) check(req Request) (expect Expectation, errs []error) {
	attrs, err := Attributes(req.Spec)
	if err != nil {
		return expect, []error{err}
	}
	up, dep, comp, shuf := ask(ip.upstream, attrs), ask(ip.deputy, attrs), ask(ip.composed, attrs), ask(ip.shuffled, attrs)
	expect = ip.ref.Expect(attrs)
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{req}, args...)...))
	}
	if up.decision != dep.decision || up.reason != dep.reason {
		fail("upstream %s, deputy %s", up, dep)
	}
	wantErr := ""
	if up.decision != authorizer.DecisionAllow {
		wantErr = strings.TrimPrefix(up.reason, "RBAC: ")
	}
	if dep.err != wantErr {
		fail("deputy's error %q, want %q (upstream %s)", dep.err, wantErr, up)
	}
	if comp.decision != dep.decision || (dep.decision == authorizer.DecisionAllow && comp.reason != dep.reason) || comp.err != wantErr {
		fail("deputy composed as served: %s, want the decision of %s with error %q", comp, dep, wantErr)
	}
	for _, c := range []struct {
		name string
		a    answer
		err  *string
	}{
		{"upstream", up, nil},
		{"upstream (shuffled bindings)", shuf, nil},
		{"deputy", dep, &dep.err},
		{"deputy composed", comp, &comp.err},
	} {
		if err := expect.CheckAnswer(c.a.decision, c.a.reason, c.err); err != nil {
			fail("%s: %v", c.name, err)
		}
	}
	return expect, errs
}
