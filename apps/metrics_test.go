package apps_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// metricsRunner fails guestbook/manual's first attempt (it is retried) and
// succeeds otherwise, with a PreSync hook and a healthy Deployment.
type metricsRunner struct{ manualRuns atomic.Int32 }

func (m *metricsRunner) Run(_ context.Context, req syncer.Request, _ syncer.Progress) *v1alpha1.OperationState {
	hook := &v1alpha1.ResourceResult{Group: "batch", Version: "v1", Kind: "Job", Namespace: "guestbook", Name: "migrate", Status: v1alpha1.ResultCodeSynced,
		HookType: v1alpha1.SyncPhasePreSync, HookPhase: v1alpha1.HookPhaseSucceeded, SyncPhase: v1alpha1.SyncPhasePreSync}
	deploy := &v1alpha1.ResourceResult{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "guestbook", Name: "web", Status: v1alpha1.ResultCodeSynced,
		SyncPhase: v1alpha1.SyncPhaseSync, Health: &v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusHealthy}}
	if req.Application.Name == "manual" && m.manualRuns.Add(1) == 1 {
		deploy.Status, deploy.Health = v1alpha1.ResultCodeSyncFailed, nil
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed, Message: "apply failed",
			SyncResult: &v1alpha1.SyncOperationResult{Resources: []*v1alpha1.ResourceResult{hook, deploy}}}
	}
	return &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded,
		SyncResult: &v1alpha1.SyncOperationResult{Revision: "abc", Resources: []*v1alpha1.ResourceResult{hook, deploy}}}
}

// retryPolicyFile is filePolicy with guestbook/manual retried once.
var retryPolicyFile = strings.Replace(string(filePolicy[0].Data), `metadata: {name: manual, namespace: guestbook}
spec:
  project: guestbook`, `metadata: {name: manual, namespace: guestbook}
spec:
  project: guestbook
  syncPolicy: {retry: {limit: 1, backoff: {duration: 1ms}}}`, 1)

func TestMetricsCountSyncsAndReportEveryApplication(t *testing.T) {
	if retryPolicyFile == string(filePolicy[0].Data) {
		t.Fatal("the test policy has no retry")
	}
	full, err := policy.Load([]policy.SourceFile{{Name: "apps.yaml", Data: []byte(retryPolicyFile)}})
	if err != nil {
		t.Fatal(err)
	}
	var snap atomic.Pointer[policy.Snapshot]
	snap.Store(full)
	reg := prometheus.NewRegistry()
	metrics, err := apps.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	f := apps.NewFile(apps.FileOptions{Snapshot: snap.Load, ProjectNamespaces: []string{"guestbook"}, Runner: &metricsRunner{}, Metrics: metrics})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f.Shutdown(ctx)
	})
	for _, name := range []string{"manual", "auto"} {
		a, _ := f.Application("guestbook", name)
		p, err := f.AppProject(a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Start(t.Context(), a, p, v1alpha1.SyncOperation{}, alice); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, f, "guestbook", name)
	}

	want := `
# HELP deputy_app_info Information about an Application: 1, with its project, sync status and health.
# TYPE deputy_app_info gauge
deputy_app_info{health_status="Healthy",name="auto",namespace="guestbook",project="guestbook",sync_status="Synced"} 1
deputy_app_info{health_status="Healthy",name="manual",namespace="guestbook",project="guestbook",sync_status="Synced"} 1
deputy_app_info{health_status="Unknown",name="orphan",namespace="guestbook",project="missing",sync_status="Unknown"} 1
# HELP deputy_app_sync_total Ended sync attempts (a retried failure too) by Application and phase (Succeeded|Failed|Error).
# TYPE deputy_app_sync_total counter
deputy_app_sync_total{name="auto",namespace="guestbook",phase="Succeeded",project="guestbook"} 1
deputy_app_sync_total{name="manual",namespace="guestbook",phase="Failed",project="guestbook"} 1
deputy_app_sync_total{name="manual",namespace="guestbook",phase="Succeeded",project="guestbook"} 1
# HELP deputy_app_sync_resources_total Resource results of ended sync attempts by sync phase (PreSync|Sync|PostSync|SyncFail) and result (Synced|SyncFailed|Pruned|PruneSkipped).
# TYPE deputy_app_sync_resources_total counter
deputy_app_sync_resources_total{phase="PreSync",status="Synced"} 3
deputy_app_sync_resources_total{phase="Sync",status="SyncFailed"} 1
deputy_app_sync_resources_total{phase="Sync",status="Synced"} 2
`
	names := []string{"deputy_app_info", "deputy_app_sync_total", "deputy_app_sync_resources_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "deputy_app_sync_duration_seconds"); err != nil || n != 1 {
		t.Errorf("deputy_app_sync_duration_seconds: %d series (%v), want 1 (namespace guestbook, project guestbook)", n, err)
	}
	if got := histogramCount(t, reg, "deputy_app_sync_duration_seconds"); got != 3 {
		t.Errorf("deputy_app_sync_duration_seconds counts %d attempts, want 3", got)
	}

	// manual leaves the policy: its series go at the next scrape.
	without, err := policy.Load([]policy.SourceFile{{Name: "apps.yaml", Data: []byte(strings.Replace(retryPolicyFile, "name: manual", "name: other", 1))}})
	if err != nil {
		t.Fatal(err)
	}
	snap.Store(without)
	_, _ = reg.Gather() // the scrape that notices
	out, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range out {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == "manual" {
					t.Errorf("%s still has a series of the deleted Application: %v", mf.GetName(), m.GetLabel())
				}
			}
		}
	}
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	out, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range out {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}
