package tokenreview

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apiserver/pkg/authentication/authenticator"
)

// Metric results of one authenticator call.
const (
	resultSuccess = "success"
	resultFailure = "failure" // not authenticated, no error
	resultError   = "error"
)

// Chain names, the chain label of the metrics.
const (
	chainWebhook = "webhook"
	chainAPI     = "api"
)

// metrics are the authentication metrics; the zero value (nil vectors)
// records nothing.
type metrics struct {
	attempts *prometheus.CounterVec   // chain, authenticator, result
	duration *prometheus.HistogramVec // chain, authenticator
	rejected *prometheus.CounterVec   // reason
}

// newMetrics creates and registers the metrics with reg; a nil reg records
// nothing.
//
// Errors: a metric of the same name is already registered.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return &metrics{}, nil
	}
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deputy_authentication_attempts_total",
			Help: "Token authentication attempts by chain (webhook: /authenticate, api: deputy's API), authenticator and result (success|failure|error).",
		}, []string{"chain", "authenticator", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "deputy_authentication_duration_seconds",
			Help: "Time one authenticator took for a token, by chain and authenticator.",
			// 1µs .. ~8s: local checks take microseconds, delegated reviews milliseconds.
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}, []string{"chain", "authenticator"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deputy_project_token_rejections_total",
			Help: "Project tokens refused, by reason (malformed, unknown_kid, signature, expired, not_yet_valid, lifetime, audience, revoked, unknown_project_role).",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.attempts, m.duration, m.rejected} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if errors.As(err, &already) {
				return nil, errors.New("authentication metrics are already registered with this registry: build the chains once per registry")
			}
			return nil, err
		}
	}
	return m, nil
}

// reject counts a refused project token.
func (m *metrics) reject(reason string) {
	if m.rejected != nil {
		m.rejected.WithLabelValues(reason).Inc()
	}
}

// observer returns a function recording one call of authenticator name in
// chain; the label series are resolved once, here, not per call.
func (m *metrics) observer(chain, name string) func(start time.Time, ok bool, err error) {
	if m.attempts == nil {
		return func(time.Time, bool, error) {}
	}
	success := m.attempts.WithLabelValues(chain, name, resultSuccess)
	failure := m.attempts.WithLabelValues(chain, name, resultFailure)
	fault := m.attempts.WithLabelValues(chain, name, resultError)
	duration := m.duration.WithLabelValues(chain, name)
	return func(start time.Time, ok bool, err error) {
		duration.Observe(time.Since(start).Seconds())
		switch {
		case ok:
			success.Inc()
		case err != nil:
			fault.Inc()
		default:
			failure.Inc()
		}
	}
}

// instrument wraps a with the metrics of authenticator name in chain.
func (m *metrics) instrument(chain, name string, a authenticator.Token) authenticator.Token {
	if m.attempts == nil {
		return a
	}
	observe := m.observer(chain, name)
	return authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		start := time.Now()
		resp, ok, err := a.AuthenticateToken(ctx, token)
		observe(start, ok, err)
		return resp, ok, err
	})
}
