package apps_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/apps/appstatus"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// scriptedRunner ends each attempt with the next of its states.
type scriptedRunner struct{ states chan *v1alpha1.OperationState }

func (s scriptedRunner) Run(context.Context, syncer.Request, syncer.Progress) *v1alpha1.OperationState {
	return <-s.states
}

func healthy(code, msg string) *v1alpha1.HealthStatus {
	return &v1alpha1.HealthStatus{Status: code, Message: msg}
}

func TestStatusHealthAndResourcesFollowTheOperations(t *testing.T) {
	runner := scriptedRunner{states: make(chan *v1alpha1.OperationState, 10)}
	ops, _ := newOps(t, runner, apps.OperationsOptions{})
	sync := func(op v1alpha1.SyncOperation, st *v1alpha1.OperationState) v1alpha1.ApplicationStatus {
		t.Helper()
		runner.states <- st
		if _, err := ops.Start(t.Context(), app("ns", "app"), project("ns"), op, alice); err != nil {
			t.Fatal(err)
		}
		waitFinished(t, ops, "ns", "app")
		return ops.ApplicationStatus("ns", "app")
	}

	if st := ops.ApplicationStatus("ns", "app"); st.Health.Status != "" || st.Resources != nil {
		t.Errorf("before any operation: health %+v, resources %v; want none", st.Health, st.Resources)
	}

	deploy := &v1alpha1.ResourceResult{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "web", Status: v1alpha1.ResultCodeSynced,
		SyncPhase: v1alpha1.SyncPhaseSync, SyncWave: 2, Health: healthy(v1alpha1.HealthStatusProgressing, "0 of 2 replicas available")}
	cm := &v1alpha1.ResourceResult{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "conf", Status: v1alpha1.ResultCodeSyncFailed,
		SyncPhase: v1alpha1.SyncPhaseSync, Health: healthy(v1alpha1.HealthStatusHealthy, "")}
	failedHook := &v1alpha1.ResourceResult{Group: "batch", Version: "v1", Kind: "Job", Namespace: "ns", Name: "smoke", Status: v1alpha1.ResultCodeSynced,
		HookType: v1alpha1.SyncPhasePostSync, HookPhase: v1alpha1.HookPhaseFailed, Health: healthy(v1alpha1.HealthStatusDegraded, "BackoffLimitExceeded")}
	pruned := &v1alpha1.ResourceResult{Version: "v1", Kind: "Service", Namespace: "ns", Name: "old", Status: v1alpha1.ResultCodePruned}
	left := &v1alpha1.ResourceResult{Version: "v1", Kind: "Secret", Namespace: "ns", Name: "legacy", Status: v1alpha1.ResultCodePruneSkipped}
	first := sync(v1alpha1.SyncOperation{}, &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed, Message: "not healthy within 5m0s",
		SyncResult: &v1alpha1.SyncOperationResult{Resources: []*v1alpha1.ResourceResult{cm, deploy, failedHook, pruned, left}}})

	// Hooks and pruned objects are left out; the health is the worst of
	// the rest, naming its resources.
	wantResources := []v1alpha1.ResourceStatus{
		{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "conf", Status: v1alpha1.SyncStatusCodeOutOfSync, Health: healthy(v1alpha1.HealthStatusHealthy, "")},
		{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "web", Status: v1alpha1.SyncStatusCodeSynced, SyncWave: 2,
			Health: healthy(v1alpha1.HealthStatusProgressing, "0 of 2 replicas available")},
		{Version: "v1", Kind: "Secret", Namespace: "ns", Name: "legacy", Status: v1alpha1.SyncStatusCodeOutOfSync},
	}
	if diff := cmp.Diff(wantResources, first.Resources); diff != "" {
		t.Errorf("status.resources (-want +got):\n%s", diff)
	}
	if h := first.Health; h.Status != v1alpha1.HealthStatusProgressing || h.Message != "Deployment ns/web: 0 of 2 replicas available" || h.LastTransitionTime == nil {
		t.Errorf("status.health = %+v; want Progressing naming the Deployment, with a transition time", h)
	}

	// A dry run and an operation that applied nothing leave both.
	dry := sync(v1alpha1.SyncOperation{DryRun: true}, &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded,
		SyncResult: &v1alpha1.SyncOperationResult{Resources: []*v1alpha1.ResourceResult{{Version: "v1", Kind: "Pod", Name: "x", Status: v1alpha1.ResultCodeSynced}}}})
	early := sync(v1alpha1.SyncOperation{}, &v1alpha1.OperationState{Phase: v1alpha1.OperationError, Message: "failed to fetch"})
	for name, st := range map[string]v1alpha1.ApplicationStatus{"dry run": dry, "failed before apply": early} {
		if diff := cmp.Diff(first.Resources, st.Resources); diff != "" || !cmp.Equal(first.Health, st.Health) {
			t.Errorf("after a %s, status changed: health %+v, resources (-first +now):\n%s", name, st.Health, diff)
		}
	}

	// The same health keeps its transition time; results without a health
	// make it Unknown.
	deploy2 := deploy.DeepCopy()
	deploy2.Health.Message = "1 of 2 replicas available"
	same := sync(v1alpha1.SyncOperation{}, &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed,
		SyncResult: &v1alpha1.SyncOperationResult{Resources: []*v1alpha1.ResourceResult{deploy2}}})
	if !same.Health.LastTransitionTime.Equal(first.Health.LastTransitionTime) || same.Health.Message != "Deployment ns/web: 1 of 2 replicas available" {
		t.Errorf("unchanged health status: %+v (first %+v)", same.Health, first.Health)
	}
	unassessed := sync(v1alpha1.SyncOperation{}, &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed,
		SyncResult: &v1alpha1.SyncOperationResult{Resources: []*v1alpha1.ResourceResult{{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "web", Status: v1alpha1.ResultCodeSyncFailed}}}})
	if unassessed.Health.Status != v1alpha1.HealthStatusUnknown || !strings.Contains(unassessed.Health.Message, "assessed no resource") ||
		len(unassessed.Resources) != 1 || unassessed.Resources[0].Status != v1alpha1.SyncStatusCodeOutOfSync {
		t.Errorf("results without health: health %+v, resources %+v", unassessed.Health, unassessed.Resources)
	}
}

func TestStatusResourcesAreCapped(t *testing.T) {
	runner := scriptedRunner{states: make(chan *v1alpha1.OperationState, 1)}
	ops, _ := newOps(t, runner, apps.OperationsOptions{})
	results := make([]*v1alpha1.ResourceResult, appstatus.MaxStatusResources+10)
	for i := range results {
		results[i] = &v1alpha1.ResourceResult{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "c" + strings.Repeat("x", i%7),
			Status: v1alpha1.ResultCodeSynced, Health: healthy(v1alpha1.HealthStatusHealthy, "")}
	}
	results[len(results)-1].Health = healthy(v1alpha1.HealthStatusDegraded, "broken")
	runner.states <- &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded, SyncResult: &v1alpha1.SyncOperationResult{Resources: results}}
	if _, err := ops.Start(t.Context(), app("ns", "app"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	waitFinished(t, ops, "ns", "app")
	st := ops.ApplicationStatus("ns", "app")
	if len(st.Resources) != appstatus.MaxStatusResources || st.Health.Status != v1alpha1.HealthStatusDegraded {
		t.Errorf("%d resources (want %d), health %s (want Degraded: it counts every result)", len(st.Resources), appstatus.MaxStatusResources, st.Health.Status)
	}
}
