package v1alpha1

import (
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Argo CD's defaults of spec.syncPolicy.retry.backoff
// (DefaultSyncRetryDuration, DefaultSyncRetryFactor,
// DefaultSyncRetryMaxDuration).
const (
	DefaultRetryDuration    = 5 * time.Second
	DefaultRetryFactor      = 2
	DefaultRetryMaxDuration = 3 * time.Minute
)

// RetryPolicy is spec.syncPolicy.retry parsed, with Argo CD's defaults
// filled in (RetryStrategy.Parse).
type RetryPolicy struct {
	// Limit is the number of retries after the first attempt; negative
	// retries without limit, 0 not at all.
	Limit int64
	// Duration is the first retry's wait; Factor multiplies it for each
	// further retry; MaxDuration caps it.
	Duration, MaxDuration time.Duration
	Factor                int64
}

// Parse returns r's retry policy with Argo CD's defaults (5s, factor 2, at
// most 3m) for what r leaves unset. A nil r is the zero policy: no retry.
// Durations are Go durations ("30s", "2m") or whole seconds ("30"), as Argo
// CD reads them.
//
// Errors (each naming its field under fld, e.g.
// spec.syncPolicy.retry.backoff.duration, and the fix): a duration that
// does not parse or is not positive (Argo CD takes a maxDuration of 0 as no
// cap; deputy asks for one), a factor below 1.
func (r *RetryStrategy) Parse(fld *field.Path) (RetryPolicy, field.ErrorList) {
	if r == nil {
		return RetryPolicy{}, nil
	}
	p := RetryPolicy{Limit: r.Limit, Duration: DefaultRetryDuration, MaxDuration: DefaultRetryMaxDuration, Factor: DefaultRetryFactor}
	b := r.Backoff
	if b == nil {
		return p, nil
	}
	var errs field.ErrorList
	bf := fld.Child("backoff")
	if b.Duration != "" {
		d, err := parseRetryDuration(b.Duration, bf.Child("duration"), "the first retry's wait, e.g. 5s")
		errs = append(errs, err...)
		p.Duration = d
	}
	if b.MaxDuration != "" {
		d, err := parseRetryDuration(b.MaxDuration, bf.Child("maxDuration"), "the longest wait between two attempts, e.g. 3m")
		errs = append(errs, err...)
		p.MaxDuration = d
	}
	if b.Factor != nil {
		if *b.Factor < 1 {
			errs = append(errs, field.Invalid(bf.Child("factor"), *b.Factor, "must be at least 1 (each wait is the previous one times factor), e.g. 2; leave it out for Argo CD's default 2"))
		}
		p.Factor = *b.Factor
	}
	return p, errs
}

// parseRetryDuration reads a backoff duration as Argo CD does: whole
// seconds ("5") or a Go duration ("5s"); it must be positive.
func parseRetryDuration(s string, fld *field.Path, what string) (time.Duration, field.ErrorList) {
	var d time.Duration
	if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil && n <= math.MaxInt64/int64(time.Second) {
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(strings.TrimSpace(s)); err != nil {
		return 0, field.ErrorList{field.Invalid(fld, s, "not a duration: give a Go duration such as 30s or 2m, or whole seconds such as 30 ("+what+")")}
	}
	if d <= 0 {
		return 0, field.ErrorList{field.Invalid(fld, s, "must be positive: "+what)}
	}
	return d, nil
}

// Allows reports whether a failed attempt may be retried after retries
// retries: always with a negative Limit, else while retries < Limit.
func (p RetryPolicy) Allows(retries int64) bool { return p.Limit < 0 || retries < p.Limit }

// Wait is how long the n-th retry (n from 1) waits after the failed
// attempt ends: min(Duration × Factor^(n-1), MaxDuration), Argo CD's
// formula.
func (p RetryPolicy) Wait(n int64) time.Duration {
	wait := float64(p.Duration) * math.Pow(float64(max(p.Factor, 1)), float64(max(n-1, 0)))
	if p.MaxDuration > 0 && wait > float64(p.MaxDuration) {
		return p.MaxDuration
	}
	if wait >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(wait)
}

// ParseHealthTimeout reads a health timeout (spec.syncPolicy.healthTimeout,
// operation.sync.healthTimeout): a positive Go duration, 0 for "".
//
// Errors: one naming fld when s is not a Go duration or not positive.
func ParseHealthTimeout(s string, fld *field.Path) (time.Duration, *field.Error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, field.Invalid(fld, s, "not a Go duration: give how long one wave may take to become healthy, e.g. 5m or 90s (leave it out for sync.healthTimeout)")
	}
	if d <= 0 {
		return 0, field.Invalid(fld, s, "must be positive, e.g. 5m (leave it out for sync.healthTimeout)")
	}
	return d, nil
}

// ValidateSyncPolicy checks spec.syncPolicy's retry (RetryStrategy.Parse)
// and healthTimeout (ParseHealthTimeout) without reading anything: every
// error, each naming its field and the fix. A nil syncPolicy is valid.
func (s *ApplicationSpec) ValidateSyncPolicy() field.ErrorList {
	if s.SyncPolicy == nil {
		return nil
	}
	fld := field.NewPath("spec", "syncPolicy")
	_, errs := s.SyncPolicy.Retry.Parse(fld.Child("retry"))
	if _, err := ParseHealthTimeout(s.SyncPolicy.HealthTimeout, fld.Child("healthTimeout")); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// Validate checks what an operation's parameters must be before it is
// recorded or run: healthTimeout a positive Go duration. fld is the
// operation's path (operation.sync), nil for the root of a sync request's
// body.
func (o *SyncOperation) Validate(fld *field.Path) field.ErrorList {
	if _, err := ParseHealthTimeout(o.HealthTimeout, fld.Child("healthTimeout")); err != nil {
		return field.ErrorList{err}
	}
	return nil
}
