package webhook

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	deputyauthz "deputy.dev/deputy/authorizer"
)

// counterValue reads one counter (or a histogram's sample count) from m's
// registry; a series that does not exist reads 0.
func counterValue(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("failed to gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range s.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			switch {
			case s.GetCounter() != nil:
				return s.GetCounter().GetValue()
			case s.GetHistogram() != nil:
				return float64(s.GetHistogram().GetSampleCount())
			case s.GetGauge() != nil:
				return s.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func TestMetricsCountRequestsDecisionsAndLatencyPerEndpoint(t *testing.T) {
	m := NewMetrics()
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == "alice" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionDeny, "", nil
	})
	rev := fakeReviewer(func(context.Context, authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error) {
		return authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}, nil
	})
	adm := admission.HandlerFunc(func(context.Context, admission.Request) admission.Response { return admission.Denied("no") })
	h := NewServer(ServerOptions{
		Authorize:    &AuthorizeHandler{Authorizer: authz, Metrics: m, Log: discardLog()},
		Authenticate: &AuthenticateHandler{Reviewer: rev, Metrics: m, Log: discardLog()},
		Validate:     quietValidateHandler(adm, m),
		Metrics:      m, Log: discardLog(),
	}).Handler()

	send := func(method, path, body string) {
		r := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	send(http.MethodPost, "/authorize", sarV1Body)
	send(http.MethodPost, "/authorize", sarV1Body)
	send(http.MethodPost, "/authorize", strings.Replace(sarV1Body, `"user": "alice"`, `"user": "bob"`, 1))
	send(http.MethodPost, "/authorize", "")
	send(http.MethodGet, "/authorize", "")
	send(http.MethodPost, "/authenticate", trV1Body)
	send(http.MethodPost, "/validate", arV1Body)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", rec.Code)
	}
	exposition := rec.Body.String()
	for _, want := range []string{
		`deputy_http_requests_total{code="200",endpoint="authorize"} 3`,
		`deputy_http_requests_total{code="400",endpoint="authorize"} 1`,
		`deputy_http_requests_total{code="405",endpoint="authorize"} 1`,
		`deputy_http_requests_total{code="200",endpoint="authenticate"} 1`,
		`deputy_http_requests_total{code="200",endpoint="validate"} 1`,
		`deputy_decisions_total{authorizer="",decision="allow",endpoint="authorize",impersonation="none"} 2`,
		`deputy_decisions_total{authorizer="",decision="deny",endpoint="authorize",impersonation="none"} 1`,
		`deputy_decisions_total{authorizer="",decision="authenticated",endpoint="authenticate",impersonation=""} 1`,
		`deputy_decisions_total{authorizer="",decision="denied",endpoint="validate",impersonation=""} 1`,
		`deputy_http_request_duration_seconds_bucket{endpoint="authorize",le="+Inf"} 5`,
		`deputy_http_request_duration_seconds_count{endpoint="authorize"} 5`,
		`deputy_http_request_duration_seconds_bucket{endpoint="authorize",le="2.5e-05"} `,
		`deputy_http_request_duration_seconds_count{endpoint="authenticate"} 1`,
		`deputy_http_request_duration_seconds_count{endpoint="validate"} 1`,
		`deputy_http_requests_in_flight 0`,
		"go_goroutines ",
		"process_start_time_seconds ",
	} {
		t.Run("the exposition contains "+want, func(t *testing.T) {
			if !strings.Contains(exposition, "\n"+want) {
				t.Errorf("missing %q in:\n%s", want, grepLines(exposition, "deputy_"))
			}
		})
	}
}

// TestDecisionMetricsNameTheAuthorizerAndTheImpersonationShape sends
// SubjectAccessReviews through deputy's composition (authorizer.New: a gate
// that decides impersonation checks, then RBAC, with default Deny) and
// reads deputy_decisions_total's authorizer and impersonation labels.
func TestDecisionMetricsNameTheAuthorizerAndTheImpersonationShape(t *testing.T) {
	gate := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		switch kind, _, _ := deputyauthz.ParseImpersonationVerb(a.GetVerb()); {
		case kind == deputyauthz.NotImpersonation:
			return authorizer.DecisionNoOpinion, "", nil
		case a.GetName() == "deployer":
			return authorizer.DecisionAllow, "sync identity", nil
		}
		return authorizer.DecisionDeny, "not a derived ServiceAccount", nil
	})
	rbac := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == "alice" && a.GetVerb() == "list" {
			return authorizer.DecisionAllow, "RBAC: allowed", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	authz, err := deputyauthz.New(deputyauthz.Options{Default: deputyauthz.DefaultDeny},
		union.NamedAuthorizer{AuthorizerName: deputyauthz.GateName, Authorizer: gate},
		union.NamedAuthorizer{AuthorizerName: deputyauthz.RBACName, Authorizer: rbac})
	if err != nil {
		t.Fatal(err)
	}
	sar := func(user, verb, group, resource, ns, name string) string {
		return fmt.Sprintf(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":%q,"resourceAttributes":{"verb":%q,"group":%q,"resource":%q,"namespace":%q,"name":%q}}}`,
			user, verb, group, resource, ns, name)
	}
	tests := []struct {
		name, body                              string
		decision, authorizer, impersonationWant string
	}{
		{"RBAC allows an ordinary request", sar("alice", "list", "", "pods", "team-a", ""), "allow", "rbac", "none"},
		{"default Deny denies what nothing allows", sar("alice", "delete", "", "pods", "team-a", "web"), "deny", "default", "none"},
		{"the gate allows a constrained impersonation", sar("system:serviceaccount:deputy-system:deputy", "impersonate:serviceaccount", "authentication.k8s.io", "serviceaccounts", "team-a", "deployer"),
			"allow", "gate", "constrained:serviceaccount"},
		{"the gate denies a legacy impersonation", sar("mallory", "impersonate", "", "users", "", "admin"), "deny", "gate", "legacy:users"},
		{"the gate denies an impersonate-on check", sar("mallory", "impersonate-on:user-info:get", "", "secrets", "kube-system", "x"), "deny", "gate", "on:user-info"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMetrics()
			h := &AuthorizeHandler{Authorizer: authz, Metrics: m, Log: discardLog()}
			serve(t, h, postJSON(t, "/authorize", tc.body))
			labels := map[string]string{"endpoint": "authorize", "decision": tc.decision, "authorizer": tc.authorizer, "impersonation": tc.impersonationWant}
			if n := counterValue(t, m, "deputy_decisions_total", labels); n != 1 {
				t.Errorf("deputy_decisions_total%v = %v, want 1; have:\n%s", labels, n, decisionSeries(t, m))
			}
		})
	}
}

// decisionSeries renders deputy_decisions_total's series, for failures.
func decisionSeries(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/metrics", nil))
	return grepLines(rec.Body.String(), "deputy_decisions_total")
}

func TestDescribedNamesListsUnobservedMetrics(t *testing.T) {
	names := DescribedNames(NewMetrics().Describe)
	for _, want := range []string{"deputy_decisions_total", "deputy_decision_logs_dropped_total", "deputy_git_webhook_applications_total",
		"deputy_http_request_duration_seconds", "go_goroutines", "process_start_time_seconds"} {
		if !slices.Contains(names, want) {
			t.Errorf("DescribedNames lacks %s: %v", want, names)
		}
	}
	if slices.Contains(names, "deputy_http_request_duration_seconds_bucket") {
		t.Errorf("DescribedNames lists a histogram's series name: %v", names)
	}
}

func TestPolicyLoadMetrics(t *testing.T) {
	m := NewMetrics()
	m.PolicyLoad(true, true, time.Unix(1700000000, 0))
	m.PolicyLoad(false, true, time.Unix(1700000100, 0))
	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"a successful load is counted", "deputy_policy_reloads_total", map[string]string{"result": "success"}, 1},
		{"a failed load is counted", "deputy_policy_reloads_total", map[string]string{"result": "failure"}, 1},
		{"the last success time is not moved by a failure", "deputy_policy_last_success_timestamp_seconds", nil, 1700000000},
		{"readiness follows the last call", "deputy_policy_ready", nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := counterValue(t, m, tc.metric, tc.labels); got != tc.want {
				t.Errorf("%s%v = %v, want %v", tc.metric, tc.labels, got, tc.want)
			}
		})
	}
	m.PolicyLoad(false, false, time.Time{})
	if got := counterValue(t, m, "deputy_policy_ready", nil); got != 0 {
		t.Errorf("deputy_policy_ready = %v after a load that left no policy, want 0", got)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
