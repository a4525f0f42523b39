package apps

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Metrics are the Applications' Prometheus metrics, Argo CD's argocd_app_*
// in deputy's names:
//
//	deputy_app_info{namespace,name,project,sync_status,health_status}   gauge, 1 per Application
//	deputy_app_sync_total{namespace,name,project,phase}                  counter of ended attempts
//	deputy_app_sync_duration_seconds{namespace,project}                  histogram of attempt durations
//	deputy_app_sync_resources_total{phase,status}                        counter of resource results
//
// deputy_app_info is read from the Applications at every scrape (status.sync
// and status.health; health_status is Unknown before an operation assessed
// it). The sync counters count every attempt that ended, a failed attempt
// that is retried included, dry runs included, on the replica that ran it
// (cluster mode: the leader). Labels are bounded: an Application's
// namespace, name and project, phases and status codes, never a revision, a
// message or a resource's name; the series of a deleted Application go with
// it (at the next scrape). Safe for concurrent use; a nil *Metrics records
// nothing.
type Metrics struct {
	syncs     *prometheus.CounterVec   // namespace, name, project, phase
	duration  *prometheus.HistogramVec // namespace, project
	resources *prometheus.CounterVec   // phase, status
	info      *prometheus.Desc

	mu     sync.Mutex
	source Applications
	// synced and timed are the label values of syncs and duration in use,
	// to delete those of deleted Applications.
	synced map[[2]string]bool // namespace, name
	timed  map[[2]string]bool // namespace, project
}

// NewMetrics creates the Applications' metrics and registers them on reg
// (deputy serve: the registry of /metrics). Give the result to FileOptions
// or ControllerOptions, whose Applications deputy_app_info then reports.
//
// Errors: reg's, when a metric of the same name is registered already.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deputy_app_sync_total",
			Help: "Ended sync attempts (a retried failure too) by Application and phase (Succeeded|Failed|Error).",
		}, []string{"namespace", "name", "project", "phase"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "deputy_app_sync_duration_seconds",
			Help: "Duration of sync attempts, from a free worker to their end, by the Application's namespace and project.",
			// 0.25 s .. ~34 min: a sync takes seconds to minutes.
			Buckets: prometheus.ExponentialBuckets(0.25, 2, 14),
		}, []string{"namespace", "project"}),
		resources: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deputy_app_sync_resources_total",
			Help: "Resource results of ended sync attempts by sync phase (PreSync|Sync|PostSync|SyncFail) and result (Synced|SyncFailed|Pruned|PruneSkipped).",
		}, []string{"phase", "status"}),
		info: prometheus.NewDesc("deputy_app_info", "Information about an Application: 1, with its project, sync status and health.",
			[]string{"namespace", "name", "project", "sync_status", "health_status"}, nil),
		synced: map[[2]string]bool{}, timed: map[[2]string]bool{},
	}
	for _, c := range []prometheus.Collector{m.syncs, m.duration, m.resources, infoCollector{m}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe makes deputy_app_info report the Applications of a.
func (m *Metrics) observe(a Applications) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.source = a
}

// attemptEnded counts one ended attempt of app: its phase, its duration and
// its resource results.
func (m *Metrics) attemptEnded(app *v1alpha1.Application, final *v1alpha1.OperationState, took time.Duration) {
	if m == nil || app == nil || final == nil {
		return
	}
	m.mu.Lock()
	m.synced[[2]string{app.Namespace, app.Name}] = true
	m.timed[[2]string{app.Namespace, app.Spec.Project}] = true
	m.mu.Unlock()
	m.syncs.WithLabelValues(app.Namespace, app.Name, app.Spec.Project, final.Phase).Inc()
	m.duration.WithLabelValues(app.Namespace, app.Spec.Project).Observe(took.Seconds())
	if final.SyncResult == nil {
		return
	}
	for _, r := range final.SyncResult.Resources {
		if r == nil {
			continue
		}
		phase, status := r.SyncPhase, r.Status
		if phase == "" {
			phase = v1alpha1.SyncPhaseSync
		}
		if status == "" {
			status = "None"
		}
		m.resources.WithLabelValues(phase, status).Inc()
	}
}

// infoCollector collects deputy_app_info from the observed Applications at
// every scrape, and deletes the sync series of Applications that are gone.
type infoCollector struct{ m *Metrics }

// Describe implements prometheus.Collector.
func (c infoCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.m.info }

// Collect implements prometheus.Collector.
func (c infoCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	m.mu.Lock()
	source := m.source
	m.mu.Unlock()
	if source == nil {
		return
	}
	list, err := source.List()
	if err != nil {
		return // not loaded yet: nothing to report, nothing to delete
	}
	apps := map[[2]string]bool{}
	projects := map[[2]string]bool{}
	for _, app := range list {
		apps[[2]string{app.Namespace, app.Name}] = true
		projects[[2]string{app.Namespace, app.Spec.Project}] = true
		st := source.ApplicationStatus(app.Namespace, app.Name)
		ch <- prometheus.MustNewConstMetric(m.info, prometheus.GaugeValue, 1,
			app.Namespace, app.Name, app.Spec.Project, orUnknown(st.Sync.Status), orUnknown(st.Health.Status))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.synced {
		if !apps[k] {
			m.syncs.DeletePartialMatch(prometheus.Labels{"namespace": k[0], "name": k[1]})
			delete(m.synced, k)
		}
	}
	for k := range m.timed {
		if !projects[k] {
			m.duration.DeleteLabelValues(k[0], k[1])
			delete(m.timed, k)
		}
	}
}

func orUnknown(code string) string {
	if code == "" {
		return v1alpha1.HealthStatusUnknown
	}
	return code
}
