package webhook

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are deputy's Prometheus metrics, registered on their own registry
// (no global state). Endpoint label values: authorize, authenticate, validate,
// api (deputy's own API), git_webhook (the Git push webhook).
type Metrics struct {
	Registry *prometheus.Registry

	requests  *prometheus.CounterVec   // endpoint, code
	duration  *prometheus.HistogramVec // endpoint
	decisions *prometheus.CounterVec   // endpoint, decision, authorizer, impersonation
	inFlight  prometheus.Gauge

	decisionLogsWritten prometheus.Counter
	decisionLogsDropped prometheus.Counter

	policyReloads     *prometheus.CounterVec // result
	policyReady       prometheus.Gauge
	policyLastSuccess prometheus.Gauge

	gitWebhookDeliveries *prometheus.CounterVec // provider, result
	gitWebhookApps       *prometheus.CounterVec // result

	// collectors are every collector registered on Registry, for
	// MetricNames.
	collectors []prometheus.Collector
}

// NewMetrics creates and registers deputy's metrics plus the Go runtime and
// process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deputy_http_requests_total",
			Help: "Review requests by endpoint and HTTP status code.",
		}, []string{"endpoint", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "deputy_http_request_duration_seconds",
			Help: "Time from request start to response written, by endpoint.",
			// 25µs .. ~1.6s: the hot path is tens of microseconds.
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 17),
		}, []string{"endpoint"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deputy_decisions_total",
			Help: "Decisions by endpoint: authorize allow|deny|no_opinion, authenticate authenticated|unauthenticated|error, validate allowed|denied. " +
				"On authorize, authorizer is who decided (gate|rbac|default: no opinion turned into a denial|none: no opinion) and impersonation the check's shape " +
				"(none; legacy:users|groups|serviceaccounts|uids|userextras|other; constrained:<mode>|other and on:<mode>|other with mode serviceaccount|user-info|arbitrary-node|associated-node); " +
				"other endpoints have both labels empty.",
		}, []string{"endpoint", "decision", "authorizer", "impersonation"}),
		decisionLogsWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "deputy_decision_logs_written_total",
			Help: "Decision log lines written (logging.decisions).",
		}),
		decisionLogsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "deputy_decision_logs_dropped_total",
			Help: "Decision log lines dropped because the writer's buffer was full (the output is slower than the decisions).",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "deputy_http_requests_in_flight",
			Help: "Review requests being served.",
		}),
		policyReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deputy_policy_reloads_total",
			Help: "Policy load attempts by result (success|failure).",
		}, []string{"result"}),
		policyReady: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "deputy_policy_ready",
			Help: "1 when a policy snapshot is loaded and the last reload succeeded.",
		}),
		policyLastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "deputy_policy_last_success_timestamp_seconds",
			Help: "Unix time of the last successful policy load.",
		}),
		gitWebhookDeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deputy_git_webhook_deliveries_total",
			Help: "Git push webhook deliveries by provider (github|gitlab|form) and result (processed|ignored|unauthorized|rejected|failed).",
		}, []string{"provider", "result"}),
		gitWebhookApps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deputy_git_webhook_applications_total",
			Help: "Applications matched by Git push webhook deliveries, by result (triggered|in_progress|manual|failed).",
		}, []string{"result"}),
	}
	m.collectors = []prometheus.Collector{m.requests, m.duration, m.decisions, m.inFlight,
		m.decisionLogsWritten, m.decisionLogsDropped,
		m.policyReloads, m.policyReady, m.policyLastSuccess,
		m.gitWebhookDeliveries, m.gitWebhookApps,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	m.Registry.MustRegister(m.collectors...)
	return m
}

// DecisionLogCounters returns the counters of decision log lines written
// and dropped (deputy_decision_logs_written_total,
// deputy_decision_logs_dropped_total), for the decision log's writer.
func (m *Metrics) DecisionLogCounters() (written, dropped prometheus.Counter) {
	return m.decisionLogsWritten, m.decisionLogsDropped
}

// Describe sends the descriptions of every metric NewMetrics registers,
// the Go runtime and process collectors' included (prometheus.Collector's
// Describe; Registry itself has none). With DescribedNames it lists the
// names /metrics can export, series without observations included.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// fqName finds a description's metric name in its String form: client_golang's
// Desc has no accessor for it.
var fqName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// DescribedNames returns the sorted metric names describe sends (for a
// histogram its base name, without _bucket, _sum and _count).
func DescribedNames(describe func(chan<- *prometheus.Desc)) []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		describe(ch)
		close(ch)
	}()
	var names []string
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// decision counts one decision of an endpoint other than authorize.
func (m *Metrics) decision(endpoint, decision string) {
	m.decisions.WithLabelValues(endpoint, decision, "", "").Inc()
}

// authorizeDecision counts one decision of /authorize: by, the authorizer
// that decided, and shape, the impersonation shape, are bounded
// (authorizer.Result.Authorizer, authorizer.ImpersonationShape).
func (m *Metrics) authorizeDecision(decision, by, shape string) {
	m.decisions.WithLabelValues("authorize", decision, by, shape).Inc()
}

// PolicyLoad records a policy load attempt.
func (m *Metrics) PolicyLoad(ok bool, ready bool, at time.Time) {
	if ok {
		m.policyReloads.WithLabelValues("success").Inc()
		m.policyLastSuccess.Set(float64(at.Unix()))
	} else {
		m.policyReloads.WithLabelValues("failure").Inc()
	}
	if ready {
		m.policyReady.Set(1)
	} else {
		m.policyReady.Set(0)
	}
}

// gitWebhookDelivery counts one Git push webhook delivery; m may be nil.
func (m *Metrics) gitWebhookDelivery(provider, result string) {
	if m != nil {
		m.gitWebhookDeliveries.WithLabelValues(provider, result).Inc()
	}
}

// gitWebhookApplications counts n Applications matched by a delivery; m may
// be nil.
func (m *Metrics) gitWebhookApplications(result string, n int) {
	if m != nil && n > 0 {
		m.gitWebhookApps.WithLabelValues(result).Add(float64(n))
	}
}

// instrument wraps an endpoint handler with request, status and latency metrics.
func (m *Metrics) instrument(endpoint string, next http.Handler) http.Handler {
	duration := m.duration.WithLabelValues(endpoint)
	// Nearly every answer is a 200: resolve that series once, not per request.
	ok := m.requests.WithLabelValues(endpoint, "200")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		m.inFlight.Inc()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		returned := false
		defer func() {
			code := rec.code
			if !returned && !rec.wroteHeader {
				// next panicked before answering: recoverPanics, further
				// out, answers 500.
				code = http.StatusInternalServerError
			}
			m.inFlight.Dec()
			duration.Observe(time.Since(start).Seconds())
			if code == http.StatusOK {
				ok.Inc()
			} else {
				m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
			}
		}()
		next.ServeHTTP(rec, r)
		returned = true
	})
}

// statusRecorder remembers the status code written.
type statusRecorder struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wroteHeader {
		s.code, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wroteHeader = true
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
