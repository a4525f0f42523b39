package conformance

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/webhook"
)

// TestNamedRegressions runs each named case in process: deputy's evaluator
// against upstream's RBACAuthorizer (same decision and reason, errors as
// the evaluation error), both against the answers written in the case, and
// deputy's /authorize handler on the wire, in the version the case asks.
func TestNamedRegressions(t *testing.T) {
	for _, c := range namedCases() {
		t.Run(c.name, func(t *testing.T) {
			ip, err := newInProcess(c.policy, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			h := &webhook.AuthorizeHandler{Authorizer: ip.composed, Metrics: webhook.NewMetrics(), Log: slog.New(slog.DiscardHandler)}
			serve := func(r *http.Request) (*http.Response, error) {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				return rec.Result(), nil
			}
			for _, want := range c.checks {
				_, errs := ip.check(want.req)
				for _, err := range errs {
					t.Error(err)
				}
				attrs, err := Attributes(want.req.Spec)
				if err != nil {
					t.Fatal(err)
				}
				if err := want.checkAnswer(ask(ip.upstream, attrs), nil); err != nil {
					t.Errorf("%s: upstream: %v", want.req, err)
				}
				dep := ask(ip.deputy, attrs)
				if err := want.checkAnswer(dep, &dep.err); err != nil {
					t.Errorf("%s: deputy: %v", want.req, err)
				}
				got, err := askDeputy(serve, "/authorize", want.req)
				if err != nil {
					t.Fatalf("%s: %v", want.req, err)
				}
				if err := want.checkAnswer(got.answer(), &got.EvaluationError); err != nil {
					t.Errorf("%s: deputy's /authorize: %v", want.req, err)
				}
			}
		})
	}
}

// answer converts a SubjectAccessReview status to an authorizer answer.
func (a sarAnswer) answer() answer {
	d := authorizer.DecisionNoOpinion
	switch {
	case a.Allowed:
		d = authorizer.DecisionAllow
	case a.Denied:
		d = authorizer.DecisionDeny
	}
	return answer{decision: d, reason: a.Reason, err: a.EvaluationError}
}

// checkAnswer compares an answer with the one written in the case. With
// evaluationError nil (upstream's RBACAuthorizer, which reports errors only
// in the reason) the evaluation error is not checked.
func (c namedCheck) checkAnswer(a answer, evaluationError *string) error {
	wantDecision := authorizer.DecisionNoOpinion
	if c.allowed {
		wantDecision = authorizer.DecisionAllow
	}
	if a.decision != wantDecision {
		return fmt.Errorf("decision %s (%s), want %s", decisionName(a.decision), a, decisionName(wantDecision))
	}
	if c.allowed {
		if a.reason != c.reason {
			return fmt.Errorf("reason %q, want %q", a.reason, c.reason)
		}
		if evaluationError != nil && *evaluationError != "" {
			return fmt.Errorf("evaluation error %q on an allow", *evaluationError)
		}
		return nil
	}
	wantReason := ""
	if c.evaluationError != "" {
		wantReason = "RBAC: " + c.evaluationError
	}
	// Through a union (deputy's composition, kube-apiserver's chain) a
	// NoOpinion reason carries the authorizer's name.
	if a.reason != wantReason && a.reason != "rbac: "+wantReason {
		return fmt.Errorf("reason %q, want %q", a.reason, wantReason)
	}
	if evaluationError != nil && *evaluationError != c.evaluationError {
		return fmt.Errorf("evaluation error %q, want %q", *evaluationError, c.evaluationError)
	}
	return nil
}
