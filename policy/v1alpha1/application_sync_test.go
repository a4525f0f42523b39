package v1alpha1_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"deputy.dev/deputy/policy/v1alpha1"
)

func TestRetryWaitsArgoCDsBackoff(t *testing.T) {
	three := int64(3)
	for _, tc := range []struct {
		name  string
		retry *v1alpha1.RetryStrategy
		waits []time.Duration // retries 1, 2, ...
	}{
		{"Argo CD's defaults: 5s doubling up to 3m", &v1alpha1.RetryStrategy{Limit: 10},
			[]time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 3 * time.Minute, 3 * time.Minute}},
		{"whole seconds, factor 3, a cap", &v1alpha1.RetryStrategy{Limit: -1, Backoff: &v1alpha1.Backoff{Duration: "2", Factor: &three, MaxDuration: "1m"}},
			[]time.Duration{2 * time.Second, 6 * time.Second, 18 * time.Second, 54 * time.Second, time.Minute}},
		{"a cap below the first wait", &v1alpha1.RetryStrategy{Limit: 1, Backoff: &v1alpha1.Backoff{Duration: "10m", MaxDuration: "1m"}},
			[]time.Duration{time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, errs := tc.retry.Parse(field.NewPath("spec", "syncPolicy", "retry"))
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			for i, want := range tc.waits {
				if got := p.Wait(int64(i + 1)); got != want {
					t.Errorf("retry %d waits %s, want %s", i+1, got, want)
				}
			}
			if p.Wait(1000) != p.MaxDuration {
				t.Errorf("retry 1000 waits %s, want the cap %s", p.Wait(1000), p.MaxDuration)
			}
		})
	}
}

func TestRetryLimit(t *testing.T) {
	for _, tc := range []struct {
		limit, retries int64
		allowed        bool
	}{{0, 0, false}, {2, 1, true}, {2, 2, false}, {-1, 1000, true}} {
		if got := (v1alpha1.RetryPolicy{Limit: tc.limit}).Allows(tc.retries); got != tc.allowed {
			t.Errorf("limit %d after %d retries: Allows = %v", tc.limit, tc.retries, got)
		}
	}
}

func TestValidateSyncPolicyNamesTheFieldAndTheFix(t *testing.T) {
	zero := int64(0)
	spec := v1alpha1.ApplicationSpec{SyncPolicy: &v1alpha1.SyncPolicy{
		Retry:         &v1alpha1.RetryStrategy{Limit: 3, Backoff: &v1alpha1.Backoff{Duration: "soon", Factor: &zero, MaxDuration: "-1m"}},
		HealthTimeout: "5 minutes",
	}}
	var got []string
	for _, e := range spec.ValidateSyncPolicy() {
		got = append(got, e.Error())
	}
	for _, want := range []string{
		`spec.syncPolicy.retry.backoff.duration: Invalid value: "soon": not a duration: give a Go duration such as 30s or 2m, or whole seconds such as 30`,
		"spec.syncPolicy.retry.backoff.factor: Invalid value: 0: must be at least 1",
		`spec.syncPolicy.retry.backoff.maxDuration: Invalid value: "-1m": must be positive`,
		`spec.syncPolicy.healthTimeout: Invalid value: "5 minutes": not a Go duration: give how long one wave may take to become healthy, e.g. 5m`,
	} {
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, want)
		}
		if !found {
			t.Errorf("no error starting with %q in:\n%s", want, strings.Join(got, "\n"))
		}
	}
	if len(got) != 4 {
		t.Errorf("%d errors, want 4", len(got))
	}
	valid := v1alpha1.ApplicationSpec{SyncPolicy: &v1alpha1.SyncPolicy{Retry: &v1alpha1.RetryStrategy{Limit: -1, Backoff: &v1alpha1.Backoff{Duration: "30", MaxDuration: "5m"}}, HealthTimeout: "90s"}}
	if errs := valid.ValidateSyncPolicy(); len(errs) > 0 {
		t.Errorf("a valid syncPolicy: %v", errs)
	}
	op := v1alpha1.SyncOperation{HealthTimeout: "0s"}
	if errs := op.Validate(field.NewPath("operation", "sync")); len(errs) != 1 || !strings.Contains(errs[0].Error(), "operation.sync.healthTimeout") {
		t.Errorf("operation healthTimeout 0s: %v", errs)
	}
}
